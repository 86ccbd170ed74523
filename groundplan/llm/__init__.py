"""Language-model backends. ``load_llm("hf", model=...)`` builds one; configs name backends by string."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from groundplan.core.registry import Registry
from groundplan.llm.base import Generation, LanguageModel, LLMCapabilities, OptionScore

LLM_BACKENDS: Registry = Registry("LLM backend")
LLM_BACKENDS.register_lazy("hf", "groundplan.llm.hf:HFLanguageModel", config="groundplan.llm.options:HFOptions")
LLM_BACKENDS.register_lazy("openai", "groundplan.llm.openai_backend:OpenAILanguageModel",
                           config="groundplan.llm.options:OpenAIOptions")
LLM_BACKENDS.register_lazy("llamacpp", "groundplan.llm.llamacpp_backend:LlamaCppLanguageModel",
                           config="groundplan.llm.llamacpp_backend:LlamaCppOptions")


def load_llm(backend: str = "hf", **options: Any) -> LanguageModel:
    """Build a language model by backend name (``hf``) and backend options (``model=...``)."""
    return LLM_BACKENDS.get(backend)(**options)


def _backend_options(backend: str) -> Any:
    """The backend's typed options class when it declares capabilities (a
    :class:`~groundplan.llm.options.BackendOptions`); None
    for a backend registered without one, which is then neither checked nor probed."""
    from groundplan.llm.options import BackendOptions

    cls = LLM_BACKENDS.config_class(backend)
    return cls if isinstance(cls, type) and issubclass(cls, BackendOptions) else None


def backend_capabilities(backend: str, options: Mapping[str, Any] | None = None) -> LLMCapabilities | None:
    """What backend ``backend`` with ``options`` declares it can do (its options' ``capabilities``),
    without building it; None for a backend that declares nothing, which is then not checked."""
    cls = _backend_options(backend)
    return None if cls is None else cls.model_validate(dict(options or {})).capabilities


def probe_backend(backend: str, model: str, options: Mapping[str, Any] | None,
                  needs: Mapping[str, Sequence[str]]) -> None:
    """Ask backend ``backend``'s server, once, whether it does what ``needs`` (capability -> the labels of the
    planners that need it) asks, where its declared capabilities cannot know (its options'
    :meth:`~groundplan.llm.options.BackendOptions.probe`; an in-process backend such as ``hf`` asks
    nothing). Raises :class:`~groundplan.core.errors.InvalidInputError` saying what the server answered."""
    cls = _backend_options(backend)
    if cls is None or not any(needs.values()):
        return
    cls.model_validate(dict(options or {})).probe(model, needs)


__all__ = ["LLM_BACKENDS", "Generation", "LLMCapabilities", "LanguageModel", "OptionScore",
           "backend_capabilities", "load_llm", "probe_backend"]
