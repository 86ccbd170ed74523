"""Language-model backends. ``load_llm("hf", model=...)`` builds one; configs name backends by string."""
from __future__ import annotations

import importlib
from typing import Any, Mapping, Sequence

from groundplan.core.registry import Registry
from groundplan.llm.base import Generation, LanguageModel, LLMCapabilities, OptionScore

LLM_BACKENDS: Registry = Registry("LLM backend")
LLM_BACKENDS.register_lazy("hf", "groundplan.llm.hf:HFLanguageModel", config="groundplan.llm.options:HFOptions")
LLM_BACKENDS.register_lazy("openai", "groundplan.llm.openai_backend:OpenAILanguageModel",
                           config="groundplan.llm.options:OpenAIOptions")


def load_llm(backend: str = "hf", **options: Any) -> LanguageModel:
    """Build a language model by backend name (``hf``) and backend options (``model=...``)."""
    return LLM_BACKENDS.get(backend)(**options)


def backend_capabilities(backend: str, options: Mapping[str, Any] | None = None) -> LLMCapabilities | None:
    """What backend ``backend`` with ``options`` declares it can do (its options class's ``capabilities``),
    without building it; None for a backend that declares nothing (one registered without typed options,
    e.g. a test fake), which is then not checked."""
    cls = LLM_BACKENDS.config_class(backend)
    if cls is None:
        return None
    declared = getattr(cls, "capabilities", None)
    if not isinstance(declared, property):
        return None
    return cls.model_validate(dict(options or {})).capabilities


#: backends whose declared capabilities cannot say what the server behind them does, with the function that
#: asks it (``"module:function"``, imported on first use like the backends themselves), called as
#: ``probe(model, options, needs)`` by :func:`probe_backend`
LLM_PROBES: dict[str, str] = {"openai": "groundplan.llm.openai_backend:probe_scoring"}


def probe_backend(backend: str, model: str, options: Mapping[str, Any] | None,
                  needs: Mapping[str, Sequence[str]]) -> None:
    """Ask backend ``backend``'s server, once, whether it does what ``needs`` (capability -> the labels of the
    planners that need it) asks, where its declared capabilities cannot know: the probe :data:`LLM_PROBES`
    names. An in-process backend (``hf``) has none and is not asked. Raises
    :class:`~groundplan.core.errors.InvalidInputError` saying what the server answered."""
    target = LLM_PROBES.get(backend)
    if target is None or not any(needs.values()):
        return
    module, function = target.split(":")
    cls = LLM_BACKENDS.config_class(backend)
    opts = cls.model_validate(dict(options or {})) if cls is not None else dict(options or {})
    getattr(importlib.import_module(module), function)(model, opts, needs)


__all__ = ["LLM_BACKENDS", "LLM_PROBES", "Generation", "LLMCapabilities", "LanguageModel", "OptionScore",
           "backend_capabilities", "load_llm", "probe_backend"]
