"""Language-model backends. ``load_llm("hf", model=...)`` builds one; configs name backends by string."""
from __future__ import annotations

from typing import Any

from groundplan.core.registry import Registry
from groundplan.llm.base import Generation, LanguageModel, OptionScore

LLM_BACKENDS: Registry = Registry("LLM backend")
LLM_BACKENDS.register_lazy("hf", "groundplan.llm.hf:HFLanguageModel", config="groundplan.llm.options:HFOptions")


def load_llm(backend: str = "hf", **options: Any) -> LanguageModel:
    """Build a language model by backend name (``hf``) and backend options (``model=...``)."""
    return LLM_BACKENDS.get(backend)(**options)


__all__ = ["LLM_BACKENDS", "Generation", "LanguageModel", "OptionScore", "load_llm"]
