"""Any model behind an OpenAI-compatible HTTP API (vLLM, llama.cpp, TGI, a hosted API, or
``groundplan serve`` itself) as a :class:`~groundplan.llm.base.LanguageModel` (``llm.backend: openai``).

Scoring is SayCan's pattern as its public demo ran it on GPT-3 (SayCan Sec. 3, "LLM scoring"; the demo
in ../shared/papers/NOTES.md): one completions request per ``prompt + option`` with ``echo: true``,
``logprobs: 1`` and ``max_tokens: 0``, so the server returns the log-probability of every token of the
joint text, and the option's log-probability is the sum over its own tokens. An option's tokens are the
ones whose character span ends past the prompt, the rule the in-process engine uses
(:mod:`groundplan.llm.hf`): where no token straddles the prompt's end that is exactly the demo's
``text_offset >= len(prompt)``; where one does (a merge across the boundary, "pine" + "apple"), the
straddling token is the option's, as it is in-process, so both backends score the same tokens and their
decisions are comparable. Sum, mean and count fill :class:`~groundplan.llm.base.OptionScore` as the
engine does. The requests of one call (all options of a step, or every request of a ``score_batch``)
go out concurrently, at most ``max_concurrency`` at a time.

``mode: chat`` is for servers that only speak ``/v1/chat/completions``: it samples (the prompt is one
user message) but cannot score, and says so in its declared capabilities, so a config pairing it with a
scoring planner is refused when it loads.

Faults: a 429 or 5xx answer, a timeout or a failed connection is retried ``max_retries`` times with
exponential backoff (or the server's ``Retry-After``); what still fails raises :class:`LLMServiceError`,
naming the URL, an :class:`~groundplan.core.errors.InfrastructureError`, so an episode records it as an
infrastructure failure and not as the planner's. A server that answers an echo request without prompt
log-probs is refused at that first call, quoting what it returned. The API key is read from the
environment variable ``api_key_env`` names at every request and never stored, logged or put in an
error message (a server that quotes it back has it replaced by ``***``).
"""
from __future__ import annotations

import json
import logging
import math
import os
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import requests

from groundplan.core.errors import InfrastructureError, InvalidInputError
from groundplan.core.validation import validate_options
from groundplan.llm.base import Generation, GenerationParams, OptionScore, ScoreRequest
from groundplan.llm.loading import DEFAULT_LLM
from groundplan.llm.options import OpenAIOptions

log = logging.getLogger(__name__)

#: longest part of a server's answer quoted in an error message
_QUOTE = 500
#: texts per /v1/embeddings request
_EMBED_BATCH = 256


class LLMServiceError(InfrastructureError):
    """The OpenAI-compatible server could not be reached, timed out, kept answering 429/5xx past
    ``max_retries``, refused a request, or answered something this backend cannot use. The message names
    the URL and never holds the API key."""


@dataclass
class HTTPStats:
    """Counters for the scorer actor's metrics and tests."""

    requests: int = 0
    retries: int = 0
    failures: int = 0


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
        self.stats = HTTPStats()
        self._pool = ThreadPoolExecutor(max_workers=self.options.max_concurrency, thread_name_prefix="openai-http")
        self._local = threading.local()
        self._warned_no_logprobs = False
        if self.options.embeddings == "local":
            from groundplan.llm.embeddings import SentenceEmbedder

            self._embedder: Any = SentenceEmbedder(self.options.embedder)
            self.embedder_name = self.options.embedder  # the action-index cache key, shared with the hf engine
        else:
            self._embedder = None
            self.embedder_name = f"openai-{self.options.embedding_model or model}"

    def __repr__(self) -> str:
        return f"OpenAILanguageModel(model={self.name!r}, base_url={self.base_url!r}, mode={self.options.mode!r})"

    # ------------------------------------------------------------------ HTTP
    def _key(self) -> str | None:
        env = self.options.api_key_env
        return (os.environ.get(env) or None) if env else None

    def _redact(self, text: str) -> str:
        key = self._key()
        return text.replace(key, "***") if key else text

    def _session(self) -> requests.Session:
        session = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = requests.Session()
        return session

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST ``body`` to ``<base_url>/<path>``: 429, 5xx, timeouts and failed connections retried with
        backoff; anything that still fails raises :class:`LLMServiceError` naming the URL."""
        url = f"{self.base_url}/{path}"
        opts = self.options
        headers = {"Content-Type": "application/json"}
        key = self._key()
        if key:
            headers["Authorization"] = f"Bearer {key}"
        payload = json.dumps(body)
        problem = ""
        for attempt in range(opts.max_retries + 1):
            wait = opts.backoff_s * (2 ** attempt)
            self.stats.requests += 1
            try:
                r = self._session().post(url, data=payload, headers=headers, timeout=opts.timeout_s)
            except requests.Timeout:
                problem = f"no answer from {url} within timeout_s={opts.timeout_s:g} s"
            except requests.ConnectionError as exc:
                problem = f"cannot connect to {url} ({_reason(exc)})"
            except requests.RequestException as exc:
                raise self._error(f"request to {url} failed: {type(exc).__name__}: {exc}") from None
            else:
                if r.status_code == 429 or r.status_code >= 500:
                    problem = f"{url} answered HTTP {r.status_code}: {_quote(r.text)}"
                    wait = _retry_after(r.headers.get("Retry-After"), wait)
                elif r.status_code >= 400:
                    hint = ""
                    if r.status_code in (401, 403):
                        hint = (f" (the API key comes from ${opts.api_key_env}, which is "
                                f"{'set' if key else 'unset'})" if opts.api_key_env else " (api_key_env is null: no key sent)")
                    raise self._error(f"{url} answered HTTP {r.status_code}{hint}: {_quote(r.text)}")
                else:
                    try:
                        data = r.json()
                    except ValueError:
                        raise self._error(f"{url} answered HTTP {r.status_code} with no JSON: {_quote(r.text)}") from None
                    if not isinstance(data, dict):
                        raise self._error(f"{url} answered JSON that is not an object: {_quote(r.text)}")
                    return data
            if attempt < opts.max_retries:
                self.stats.retries += 1
                log.warning("%s; retry %d of %d in %.2f s", self._redact(problem), attempt + 1, opts.max_retries, wait)
                time.sleep(wait)
        raise self._error(f"{problem}; gave up after {opts.max_retries + 1} attempt(s) (max_retries={opts.max_retries})")

    def _error(self, message: str) -> LLMServiceError:
        self.stats.failures += 1
        return LLMServiceError(self._redact(message))

    def _concurrently(self, fn: Callable[..., Any], items: Sequence[Any]) -> list[Any]:
        """``fn(item)`` for every item, at most ``max_concurrency`` in flight (the pool is shared by all
        calls); the first error is raised once all have finished."""
        if len(items) == 1:
            return [fn(items[0])]
        futures = [self._pool.submit(fn, item) for item in items]
        results, first_error = [], None
        for f in futures:
            try:
                results.append(f.result())
            except BaseException as exc:  # wait for the rest, so no request outlives the call
                first_error = first_error or exc
                results.append(None)
        if first_error is not None:
            raise first_error
        return results

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
        pairs: list[tuple[str, str]] = []
        for prompt, options in requests_:
            if not options:
                raise InvalidInputError("score() needs at least one option")
            pairs += [(prompt, o) for o in options]
        flat = self._concurrently(lambda pair: self._score_one(*pair), pairs)
        out, k = [], 0
        for _, options in requests_:
            out.append(flat[k:k + len(options)])
            k += len(options)
        return out

    def _score_one(self, prompt: str, option: str) -> OptionScore:
        if not option:
            raise InvalidInputError(f"option {option!r} adds no tokens to the prompt")
        text = prompt + option
        data = self._post("completions", {"model": self.name, "prompt": text, "max_tokens": 0, "echo": True,
                                          "logprobs": 1})
        url = f"{self.base_url}/completions"
        try:
            lp = data["choices"][0].get("logprobs") or {}
            tokens, token_lps, offsets = lp.get("tokens"), lp.get("token_logprobs"), lp.get("text_offset")
        except (KeyError, IndexError, TypeError, AttributeError):
            tokens = token_lps = offsets = None
        if not tokens or not token_lps or not offsets or not (len(tokens) == len(token_lps) == len(offsets)):
            raise self._error(f"{url} returned no prompt log-probs for an echo request (echo: true, logprobs: 1, "
                              f"max_tokens: 0), so it cannot score options; it answered: {_quote(json.dumps(data))}. "
                              "Use a server whose /v1/completions supports echo with logprobs (vLLM, groundplan "
                              "serve), or mode 'chat' with planners that only generate")
        first = option_start(len(prompt), len(text), tokens, offsets)
        if first is None:
            raise InvalidInputError(f"option {option!r} adds no tokens to the prompt")
        picked = token_lps[first:]
        if any(v is None for v in picked):
            raise InvalidInputError("the prompt is empty and the server returned no log-prob for the first token")
        total = float(sum(picked))
        return OptionScore(option=option, logprob_sum=total, logprob_mean=total / len(picked), num_tokens=len(picked))

    # ------------------------------------------------------------------ sampling
    def generate(self, prompt: str, params: GenerationParams) -> list[Generation]:
        """``params.n`` samples: ``/v1/completions`` (completions mode) or ``/v1/chat/completions`` with the
        prompt as one user message (chat mode). Each sample's text, finish reason and, where the server
        returns token log-probs, their mean (the model's own, as the in-process engine reports; 0.0, i.e.
        no preference between samples, when it returns none)."""
        body: dict[str, Any] = {"model": self.name, "n": params.n, "temperature": params.temperature,
                                "top_p": params.top_p, "max_tokens": params.max_new_tokens}
        if params.stop:
            body["stop"] = list(params.stop)
        if params.seed is not None:
            body["seed"] = int(params.seed)
        if params.repetition_penalty != 1.0:
            body["repetition_penalty"] = params.repetition_penalty  # vLLM's extension of the API
        if self.options.mode == "chat":
            body.update(messages=[{"role": "user", "content": prompt}], logprobs=True)
            data = self._post("chat/completions", body)
            choices = self._choices(data, "chat/completions")
            out = []
            for c in choices:
                content = ((c.get("logprobs") or {}).get("content")) or []
                lps = [t.get("logprob") for t in content if isinstance(t, dict)]
                out.append(self._generation(str((c.get("message") or {}).get("content") or ""), lps, c.get("finish_reason")))
            return out
        body.update(prompt=prompt, logprobs=1)
        data = self._post("completions", body)
        return [self._generation(str(c.get("text") or ""), (c.get("logprobs") or {}).get("token_logprobs") or [],
                                 c.get("finish_reason")) for c in self._choices(data, "completions")]

    def _choices(self, data: dict[str, Any], path: str) -> list[dict[str, Any]]:
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not all(isinstance(c, dict) for c in choices):
            raise self._error(f"{self.base_url}/{path} answered without choices: {_quote(json.dumps(data))}")
        return sorted(choices, key=lambda c: c.get("index", 0))

    def _generation(self, text: str, lps: Sequence[Any], reason: Any) -> Generation:
        values = [float(v) for v in lps if isinstance(v, (int, float)) and math.isfinite(v)]
        if text and not values and not self._warned_no_logprobs:
            self._warned_no_logprobs = True
            log.warning("%s returns no token log-probs with its samples: Generation.logprob_mean is 0.0", self.base_url)
        mean = float(np.mean(values)) if values else 0.0
        return Generation(text=text, logprob_mean=mean, num_tokens=len(values),
                          finish_reason="length" if reason == "length" else "stop")

    # ------------------------------------------------------------------ embeddings
    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """L2-normalised sentence embeddings: the local encoder (default) or the server's /v1/embeddings."""
        texts = list(texts)
        if self._embedder is not None:
            return self._embedder.embed(texts)
        model = self.options.embedding_model or self.name
        batches = [texts[i:i + _EMBED_BATCH] for i in range(0, len(texts), _EMBED_BATCH)]
        parts = self._concurrently(lambda batch: self._embed_batch(model, batch), batches) if batches else []
        if not parts:
            return np.zeros((0, 0), dtype=np.float32)
        out = np.concatenate(parts, axis=0).astype(np.float32)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return np.divide(out, norms, out=np.zeros_like(out), where=norms > 0)

    def _embed_batch(self, model: str, texts: list[str]) -> np.ndarray:
        data = self._post("embeddings", {"model": model, "input": texts})
        rows = data.get("data")
        if not isinstance(rows, list) or len(rows) != len(texts):
            raise self._error(f"{self.base_url}/embeddings answered {len(rows) if isinstance(rows, list) else 'no'} "
                              f"embeddings for {len(texts)} texts: {_quote(json.dumps(data))}")
        rows = sorted(rows, key=lambda r: r.get("index", 0))
        return np.asarray([r["embedding"] for r in rows], dtype=np.float32)

    def close(self) -> None:
        """Stop the request threads (the object is unusable afterwards)."""
        self._pool.shutdown(wait=False, cancel_futures=True)


def option_start(prompt_chars: int, text_chars: int, tokens: Sequence[str], offsets: Sequence[int]) -> int | None:
    """Index of the first token of ``prompt + option`` that belongs to the option: the first whose character
    span ends past the prompt (see the module doc). A token's span ends where the next one starts, or at its
    own start plus its length if that is further (a token that is only part of a character), the last one at
    the text's end. None when no token ends past the prompt."""
    n = len(tokens)
    for i in range(n):
        nxt = offsets[i + 1] if i + 1 < n else text_chars
        end = max(int(nxt), int(offsets[i]) + len(tokens[i] or ""))
        if end > prompt_chars:
            return i
    return None


def _quote(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= _QUOTE else text[:_QUOTE] + " ..."


def _reason(exc: requests.ConnectionError) -> str:
    """The root cause of a failed connection ("[Errno 111] Connection refused"), not urllib3's wrapping."""
    text = str(exc)
    found = re.search(r"\[Errno -?\d+\][^'\")\n]*", text)
    if found:
        return found.group(0).strip()
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return first[:200]


def _retry_after(header: str | None, default: float) -> float:
    """The server's Retry-After in seconds (capped at a minute), else ``default``."""
    try:
        return min(60.0, max(0.0, float(header))) if header else default
    except ValueError:
        return default
