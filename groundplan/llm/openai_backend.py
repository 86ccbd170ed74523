"""Any model behind an OpenAI-compatible HTTP API (vLLM, llama.cpp, TGI, a hosted API, or
``groundplan serve`` itself) as a :class:`~groundplan.llm.base.LanguageModel` (``llm.backend: openai``).

This module is the backend's face: the :class:`OpenAILanguageModel` the registry builds, its embeddings,
and the probe a config's load sends. Its work is done in three parts, each its own module:

- :mod:`groundplan.llm.openai_echo` scores options as SayCan does (SayCan Sec. 3, "LLM scoring"): one
  ``/v1/completions`` request per ``prompt + option`` with ``echo: true``, ``logprobs: 1`` and
  ``max_tokens: 0``, the option's tokens chosen by the in-process engine's rule
  (:mod:`groundplan.llm.hf_tokens`) so both backends make comparable decisions; it learns or refuses the
  ways servers depart from the API (docs/models.md has llama-cpp-python's server as the worked case);
- :mod:`groundplan.llm.openai_sampling` samples from ``/v1/completions`` or, in ``mode: chat``, from
  ``/v1/chat/completions`` (which samples but cannot score, and says so in its declared capabilities, so
  a config pairing it with a scoring planner is refused when it loads);
- :mod:`groundplan.llm.openai_http` sends the requests: retries with backoff, :class:`LLMServiceError`
  (an infrastructure failure, not the planner's) naming the URL, the API key read from ``api_key_env`` at
  every request and never stored, logged or quoted, and at most ``max_concurrency`` requests in flight.

A backend's declared capabilities say only what its mode can do, not whether the server echoes, so a
config whose planners score sends one echo request when it loads (:func:`probe_scoring`, through
``groundplan.config.probe_llm_needs``): a server without echo refuses the config before any episode
instead of failing every episode as an infrastructure failure.
"""
from __future__ import annotations

import json
import logging
from typing import Any, Mapping, Sequence

import numpy as np

from groundplan.core.errors import InvalidInputError
from groundplan.core.validation import validate_options
from groundplan.llm.base import Generation, GenerationParams, OptionScore, ScoreRequest
from groundplan.llm.loading import DEFAULT_LLM
from groundplan.llm.openai_echo import EchoScorer, option_start
from groundplan.llm.openai_http import HTTPStats, LLMServiceError, OpenAIClient, quote
from groundplan.llm.openai_sampling import ChoiceSampler
from groundplan.llm.options import OpenAIOptions

__all__ = ["HTTPStats", "LLMServiceError", "OpenAILanguageModel", "option_start", "probe_scoring"]

log = logging.getLogger(__name__)

#: texts per /v1/embeddings request
_EMBED_BATCH = 256
#: the text :func:`probe_scoring` scores: a SayCan kitchen step after one of Listing 1's examples, long enough
#: (more than ``openai_echo._ALIGN_MIN`` tokens) for the answer to show whether the server's echo log-probs
#: are shifted
_PROBE_PROMPT = ("Robot: Hi there, I'm a robot operating in an office kitchen.\nHuman: How would you hold the "
                 "snickers?\nRobot: 1. pick up the snickers, 2. done.\nHuman: How would you bring me a coke can?\n"
                 "Robot: 1.")
_PROBE_OPTION = " find a coke can"


class OpenAILanguageModel:
    """A :class:`~groundplan.llm.base.LanguageModel` over an OpenAI-compatible server.

    Args:
        model: the server's model name (``llm.model``), sent as each request's ``model``.
        **options: :class:`~groundplan.llm.options.OpenAIOptions` (``base_url``, ``api_key_env``, ``mode``,
            ``max_concurrency``, ``timeout_s``, ``max_retries``, ``backoff_s``, ``embeddings``, ...).
    """

    def __init__(self, model: str = DEFAULT_LLM, **options: Any) -> None:
        self.options = validate_options(OpenAIOptions, options, "openai backend options")
        self.name = model
        self.capabilities = self.options.capabilities
        self.base_url = self.options.base_url
        self._http = OpenAIClient(self.options)
        self.stats: HTTPStats = self._http.stats
        self._scorer = EchoScorer(self._http, model)
        self._sampler = ChoiceSampler(self._http, model, self.options.mode)
        if self.options.embeddings == "local":
            from groundplan.llm.embeddings import SentenceEmbedder

            self._embedder: Any = SentenceEmbedder(self.options.embedder)
            self.embedder_name = self.options.embedder  # the action-index cache key, shared with the hf engine
        else:
            self._embedder = None
            self.embedder_name = f"openai-{self.options.embedding_model or model}"

    def __repr__(self) -> str:
        return f"OpenAILanguageModel(model={self.name!r}, base_url={self.base_url!r}, mode={self.options.mode!r})"

    @property
    def _echo_max_tokens(self) -> int | None:
        """``max_tokens`` of an echo request: None until the first one has shown whether the server honours 0."""
        return self._scorer.max_tokens

    # ------------------------------------------------------------------ scoring
    def _need(self, capability: str, what: str) -> None:
        if not getattr(self.capabilities, capability):
            raise InvalidInputError(f"llm backend 'openai' in mode '{self.options.mode}' cannot {what}; "
                                    "use mode 'completions' (a server with /v1/completions)")

    def score(self, prompt: str, options: Sequence[str]) -> list[OptionScore]:
        """Log-prob of each option after ``prompt``: one echo request per option, concurrently."""
        return self.score_batch([(prompt, options)])[0]

    def score_batch(self, requests_: Sequence[ScoreRequest]) -> list[list[OptionScore]]:
        """Every (prompt, option) pair of every request as its own echo request, all concurrent (up to
        ``max_concurrency``); each request gets back its own scores, in order."""
        self._need("score", "score options (it has no prompt log-probs)")
        return self._scorer.score_batch(requests_)

    # ------------------------------------------------------------------ sampling
    def generate(self, prompt: str, params: GenerationParams) -> list[Generation]:
        """``params.n`` samples (:meth:`ChoiceSampler.generate
        <groundplan.llm.openai_sampling.ChoiceSampler.generate>`): text, finish reason and the mean of the
        token log-probs the server returns (0.0 when it returns none)."""
        return self._sampler.generate(prompt, params)

    # ------------------------------------------------------------------ embeddings
    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """L2-normalised sentence embeddings: the local encoder (default) or the server's /v1/embeddings."""
        texts = list(texts)
        if self._embedder is not None:
            return self._embedder.embed(texts)
        model = self.options.embedding_model or self.name
        batches = [texts[i:i + _EMBED_BATCH] for i in range(0, len(texts), _EMBED_BATCH)]
        parts = self._http.concurrently(lambda batch: self._embed_batch(model, batch), batches) if batches else []
        if not parts:
            return np.zeros((0, 0), dtype=np.float32)
        out = np.concatenate(parts, axis=0).astype(np.float32)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return np.divide(out, norms, out=np.zeros_like(out), where=norms > 0)

    def _embed_batch(self, model: str, texts: list[str]) -> np.ndarray:
        data = self._http.post("embeddings", {"model": model, "input": texts})
        rows = data.get("data")
        if not isinstance(rows, list) or len(rows) != len(texts):
            raise self._http.error(f"{self.base_url}/embeddings answered {len(rows) if isinstance(rows, list) else 'no'} "
                                   f"embeddings for {len(texts)} texts: {quote(json.dumps(data))}")
        rows = sorted(rows, key=lambda r: r.get("index", 0))
        return np.asarray([r["embedding"] for r in rows], dtype=np.float32)

    def close(self) -> None:
        """Stop the request threads (the object is unusable afterwards)."""
        self._http.close()


def probe_scoring(model: str, options: OpenAIOptions, needs: Mapping[str, Sequence[str]]) -> None:
    """Refuse a config whose planners score options (``needs["score"]``: their labels) when the server at
    ``options.base_url`` cannot: score one option as a planner would (the same echo request with
    ``logprobs``, the same checks of the answer, the same retries) and raise
    :class:`~groundplan.core.errors.InvalidInputError` naming the planners, the URL and what the server
    answered: no echo, no prompt log-probs, or log-probs shifted by one token
    (:meth:`EchoScorer._check_alignment <groundplan.llm.openai_echo.EchoScorer._check_alignment>`, which the
    probe's text is long enough for). Nothing is asked in chat mode (refused already by the declared
    capabilities) or when no planner scores. :meth:`OpenAIOptions.probe
    <groundplan.llm.options.OpenAIOptions.probe>`, called once per config load
    (``groundplan.config.probe_llm_needs``), before any episode."""
    labels = list(needs.get("score") or ())
    if not labels or not options.capabilities.score:
        return
    lm = OpenAILanguageModel(model, **options.model_dump())
    try:
        lm.score(_PROBE_PROMPT, [_PROBE_OPTION])
    except (LLMServiceError, InvalidInputError) as exc:
        raise InvalidInputError(
            f"planner(s) {', '.join(map(repr, labels))} score options, which needs {lm.base_url}/completions to "
            f"echo the prompt with log-probs (echo: true, logprobs: 1), and the one such request sent when the "
            f"config loaded failed: {exc}") from None
    finally:
        lm.close()
    log.info("%s/completions echoes prompt log-probs: option scoring works", lm.base_url)
