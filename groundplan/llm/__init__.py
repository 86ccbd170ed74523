"""Language-model backends. ``load_llm("hf", model=...)`` builds one; configs name backends by string."""
from __future__ import annotations

from typing import Any, Mapping

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


__all__ = ["LLM_BACKENDS", "Generation", "LLMCapabilities", "LanguageModel", "OptionScore", "backend_capabilities",
           "load_llm"]
