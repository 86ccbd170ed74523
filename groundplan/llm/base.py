"""The language-model interface every planner uses (DESIGN.md, "Interfaces").

Planners depend on this protocol only, never on a backend: the in-process Hugging Face engine, a Ray
actor handle wrapper and test fakes all satisfy it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence, runtime_checkable

import numpy as np


@dataclass(frozen=True)
class OptionScore:
    """Log-probability of one option as the continuation of a prompt.

    SayCan scores fixed skill labels this way (paper Sec. 3, "LLM scoring"); the paper does not say
    whether to sum or length-normalise, so both are returned and planners choose.
    """

    option: str
    logprob_sum: float
    logprob_mean: float
    num_tokens: int


@dataclass(frozen=True)
class Generation:
    """One sampled continuation; ``logprob_mean`` is the mean token log-prob under the model
    (temperature 1), the P(â) of Zero-Shot Planners' translation score."""

    text: str
    logprob_mean: float
    num_tokens: int
    finish_reason: str  # "stop" (a stop string or EOS) or "length"


ScoreRequest = tuple[str, Sequence[str]]


@runtime_checkable
class LanguageModel(Protocol):
    """Synchronous, batched LM operations. Implementations must be deterministic for ``score``."""

    name: str

    def score(self, prompt: str, options: Sequence[str]) -> list[OptionScore]:
        """Log-prob of each option after ``prompt``; raises on an empty option list."""
        ...

    def score_batch(self, requests: Sequence[ScoreRequest]) -> list[list[OptionScore]]:
        """Several (prompt, options) requests in one pass; each gets back only its own scores."""
        ...

    def generate(
        self,
        prompt: str,
        n: int = 1,
        temperature: float = 1.0,
        top_p: float = 1.0,
        max_new_tokens: int = 32,
        stop: Sequence[str] | None = None,
        seed: int | None = None,
        repetition_penalty: float = 1.0,
    ) -> list[Generation]:
        """``n`` samples (greedy when ``temperature == 0``), each cut at the first stop string;
        ``repetition_penalty`` > 1 discourages tokens already in the prompt or sample (Hugging Face's)."""
        ...

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """L2-normalised sentence embeddings, shape (len(texts), dim)."""
        ...
