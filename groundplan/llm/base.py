"""The language-model interface every planner uses (docs/architecture.md, "Layers").

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
    (temperature 1), the P(â) of Zero-Shot Planners' translation score. ``tokens``: each sampled token of
    ``text`` with its log-prob and most likely alternatives, when the call asked for them
    (``GenerationParams.logprobs``) and the backend gives them (None otherwise)."""

    text: str
    logprob_mean: float
    num_tokens: int
    finish_reason: str  # "stop" (a stop string or EOS) or "length"
    tokens: tuple["SampledToken", ...] | None = None


@dataclass(frozen=True)
class SampledToken:
    """A sampled token as the OpenAI API's ``logprobs`` reports it: its text (cut where the sample's text is
    cut at a stop string), its offset in the sample's text, its log-prob under the model (temperature 1) and
    the most likely tokens at its position, (text, log-prob) pairs."""

    token: str
    offset: int
    logprob: float
    top: tuple[tuple[str, float], ...] = ()


ScoreRequest = tuple[str, Sequence[str]]


@dataclass(frozen=True)
class LLMCapabilities:
    """What a backend can do, declared by its typed options (``capabilities``).

    A config whose planner needs something its backend lacks (SayCan's option scoring on a
    chat-completions-only server, say) is refused when it loads, before anything is built
    (:func:`missing`); ``prompt_logprobs`` is what ``groundplan serve``'s ``/v1/completions`` needs
    for ``echo`` with ``logprobs`` (:class:`SupportsPromptLogprobs`). For a backend over a remote server
    the declaration is only what its mode allows: whether the server really does it is the server's, so
    such a backend also registers a probe that asks the server once, before any episode
    (:func:`groundplan.llm.probe_backend`)."""

    score: bool = True
    generate: bool = True
    beam_search: bool = False
    prompt_logprobs: bool = False
    #: wraps a text as one user turn of the model's own chat template (:class:`SupportsChatTemplate`)
    chat_template: bool = False

    def missing(self, needs: Sequence[str]) -> list[str]:
        """The capabilities in ``needs`` (field names) that this backend does not have."""
        unknown = [n for n in needs if n not in LLM_CAPABILITIES]
        if unknown:
            raise ValueError(f"unknown LLM capabilities {unknown}; known: {', '.join(LLM_CAPABILITIES)}")
        return [n for n in needs if not getattr(self, n)]


#: the names a planner may list in ``PlannerOptions.llm_needs``
LLM_CAPABILITIES = ("score", "generate", "beam_search", "prompt_logprobs", "chat_template")


@dataclass(frozen=True)
class PromptLogprobs:
    """Every token of a text with its log-probability given the tokens before it: what an
    OpenAI-style completions server returns for ``echo`` with ``logprobs`` (the way SayCan's public
    demo scored options with GPT-3). ``logprobs[0]`` is None (nothing conditions the first token);
    ``top[j]`` holds the most likely tokens at position j with their log-probs (empty at 0)."""

    text: str
    token_ids: tuple[int, ...]
    tokens: tuple[str, ...]  # each token's text, decoded alone
    offsets: tuple[int, ...]  # character offset of each token in ``text``
    logprobs: tuple[float | None, ...]
    top: tuple[tuple[tuple[str, float], ...], ...]


@runtime_checkable
class SupportsPromptLogprobs(Protocol):
    """A backend that declares ``prompt_logprobs``: per-token log-probs of whole prompts (text or token
    ids), and token counts."""

    def prompt_logprobs(self, prompts: Sequence[str | Sequence[int]], top_k: int = 0,
                        keep_next: bool = False) -> list[PromptLogprobs]:
        """``keep_next``: the caller will generate one token after each prompt next; a backend may keep the
        next-token logits its forward computed for that generate (a hint: results are the same without)."""

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        ...


class SupportsChatTemplate(Protocol):
    """A backend that declares ``chat_template``: an instruct model is sent a user's text the way a chat
    user sends it, inside the model's own chat template, rather than as bare text to continue."""

    def chat_prompt(self, text: str) -> str:
        """``text`` as one user turn of the model's chat template, the assistant's turn opened after it;
        raises :class:`~groundplan.core.errors.InvalidInputError` for a model that has no template."""
        ...


@dataclass(frozen=True)
class GenerationParams:
    """How to decode: every backend, actor and fake takes this one object, so the decoding options are
    written once. Invalid values raise :class:`~groundplan.core.errors.InvalidInputError` on creation.

    ``temperature == 0`` is greedy; ``repetition_penalty`` > 1 discourages tokens already in the prompt
    or sample (Hugging Face's CTRL rule; Zero-Shot Planners search it, Appendix A.1); ``stop`` cuts each
    sample at the first stop string; ``seed`` makes sampling reproducible.
    """

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 32
    stop: tuple[str, ...] = ()
    seed: int | None = None
    repetition_penalty: float = 1.0
    logprobs: int | None = None  # per-token log-probs of the samples with this many alternatives (None: none)

    def __post_init__(self) -> None:
        from groundplan.core.errors import InvalidInputError

        object.__setattr__(self, "stop", tuple(s for s in (self.stop or ()) if s))
        if self.n < 1 or self.max_new_tokens < 1:
            raise InvalidInputError("generation needs n >= 1 and max_new_tokens >= 1")
        if self.temperature < 0 or not (0 < self.top_p <= 1):
            raise InvalidInputError("generation needs temperature >= 0 and 0 < top_p <= 1")
        if not self.repetition_penalty > 0:
            raise InvalidInputError("generation needs repetition_penalty > 0 (1.0: none)")
        if self.logprobs is not None and not 0 <= self.logprobs <= 20:
            raise InvalidInputError("generation's logprobs is None or between 0 and 20")


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

    def generate(self, prompt: str, params: GenerationParams) -> list[Generation]:
        """``params.n`` samples after ``prompt``, decoded as ``params`` says."""
        ...

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """L2-normalised sentence embeddings, shape (len(texts), dim)."""
        ...
