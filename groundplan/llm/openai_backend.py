"""Any model behind an OpenAI-compatible HTTP API (vLLM, llama.cpp, TGI, a hosted API, or
``groundplan serve`` itself) as a :class:`~groundplan.llm.base.LanguageModel` (``llm.backend: openai``).

Scoring is SayCan's pattern (SayCan Sec. 3, "LLM scoring") as the demo its authors published ran it on
GPT-3: one completions request per ``prompt + option`` with ``echo: true``,
``logprobs: 1`` and ``max_tokens: 0``, so the server returns the log-probability of every token of the
joint text, and the option's log-probability is the sum over its own tokens. An option's tokens are the
ones whose character span ends past the prompt, the rule the in-process engine uses
(:mod:`groundplan.llm.hf_tokens`): where no token straddles the prompt's end that is exactly the demo's
``text_offset >= len(prompt)``; where one does (a merge across the boundary, "pine" + "apple"), the
straddling token is the option's, as it is in-process, so both backends score the same tokens and their
decisions are comparable. Sum, mean and count fill :class:`~groundplan.llm.base.OptionScore` as the
engine does. The requests of one call (all options of a step, or every request of a ``score_batch``)
go out concurrently, at most ``max_concurrency`` at a time.

Servers depart from the API; the backend tolerates what it can without knowing which server it talks to
(docs/models.md has llama-cpp-python's server as the worked case). Only the tokens that start inside the
sent text are counted, so a token a server generates after the echo is never part of a score. The
backend's first echo request goes out alone and learns how the server reads ``max_tokens: 0``: a server
that refuses it (a 400/422 naming ``max_tokens``) or generates anyway (reading 0 as "no limit") is sent
``max_tokens: 1`` from then on (:meth:`OpenAILanguageModel._echo`). The null log-prob of the text's first
token is the API's; any other missing or non-finite log-prob of an option's token is an error, never a
wrong sum. A server whose echo log-probs are shifted by one token (each read from the logits after its
token) is recognised from ``top_logprobs`` and refused (:meth:`OpenAILanguageModel._check_alignment`).
A server that answers fewer choices than ``n`` is asked again for the rest (``_all_choices``).

``mode: chat`` is for servers that only speak ``/v1/chat/completions``: it samples (the prompt is one
user message) but cannot score, and says so in its declared capabilities, so a config pairing it with a
scoring planner is refused when it loads.

Faults: a 429 or 5xx answer, a timeout or a failed connection is retried ``max_retries`` times with
exponential backoff (or the server's ``Retry-After``); what still fails raises :class:`LLMServiceError`,
naming the URL, an :class:`~groundplan.core.errors.InfrastructureError`, so an episode records it as an
infrastructure failure and not as the planner's. A server that answers an echo request without prompt
log-probs is refused at that first request, quoting what it returned; and since a backend's declared
capabilities say only what its mode can do, not whether the server echoes, a config whose planners score
sends that request once when it loads (:func:`probe_scoring`, through ``groundplan.config.probe_llm_needs``),
so a server without echo refuses the config before any episode instead of failing every episode as an
infrastructure failure. A server that refuses token log-probs
for sampling (a 400 naming ``logprobs``, as some hosted chat models answer, or a 5xx naming them after its
retries, as llama.cpp's server without ``--logits_all``) is sampled without them from
then on, with one warning. The API key is read from the
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
from typing import Any, Callable, Mapping, Sequence

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
#: ``stop`` of the first echo request (see ``OpenAILanguageModel._echo``): the API's limit is 4 strings
_PROBE_STOP = ("\n", " ", ".", ",")
#: positions with top log-probs needed to judge whether a server's echo log-probs are shifted by one token
_ALIGN_MIN = 16
#: the text :func:`probe_scoring` scores: a SayCan kitchen step after one of Listing 1's examples, long enough
#: (more than ``_ALIGN_MIN`` tokens) for the answer to show whether the server's echo log-probs are shifted
_PROBE_PROMPT = ("Robot: Hi there, I'm a robot operating in an office kitchen.\nHuman: How would you hold the "
                 "snickers?\nRobot: 1. pick up the snickers, 2. done.\nHuman: How would you bring me a coke can?\n"
                 "Robot: 1.")
_PROBE_OPTION = " find a coke can"


class LLMServiceError(InfrastructureError):
    """The OpenAI-compatible server could not be reached, timed out, kept answering 429/5xx past
    ``max_retries``, refused a request, or answered something this backend cannot use. The message names
    the URL and never holds the API key; ``status`` is the HTTP status of a refused request (4xx) or the last answer of one that failed after its retries (429, 5xx); None when no answer came."""

    status: int | None = None


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
        #: ``max_tokens`` of an echo request: None until the first one has shown whether the server honours 0
        self._echo_max_tokens: int | None = None
        self._probe_lock = threading.Lock()
        self._warned_few_choices = False
        self._alignment_checked = False
        #: whether sampling requests ask for token log-probs: until a server refuses them (some hosted chat
        #: models answer a 400 naming ``logprobs``), after which samples carry none
        self._sample_logprobs = True
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
        problem, status = "", None
        for attempt in range(opts.max_retries + 1):
            wait = opts.backoff_s * (2 ** attempt)
            self.stats.requests += 1
            status = None
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
                    problem, status = f"{url} answered HTTP {r.status_code}: {_quote(r.text)}", r.status_code
                    wait = _retry_after(r.headers.get("Retry-After"), wait)
                elif r.status_code >= 400:
                    hint = ""
                    if r.status_code in (401, 403):
                        hint = (f" (the API key comes from ${opts.api_key_env}, which is "
                                f"{'set' if key else 'unset'})" if opts.api_key_env else " (api_key_env is null: no key sent)")
                    raise self._error(f"{url} answered HTTP {r.status_code}{hint}: {_quote(r.text)}", r.status_code)
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
        raise self._error(f"{problem}; gave up after {opts.max_retries + 1} attempt(s) (max_retries={opts.max_retries})",
                          status)

    def _error(self, message: str, status: int | None = None) -> LLMServiceError:
        self.stats.failures += 1
        err = LLMServiceError(self._redact(message))
        err.status = status
        return err

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
        flat: list[OptionScore] = []
        if self._echo_max_tokens is None:  # the backend's first echo request goes alone (see _echo)
            with self._probe_lock:
                if self._echo_max_tokens is None:
                    flat.append(self._score_one(*pairs[0]))
        rest = pairs[len(flat):]
        flat += self._concurrently(lambda pair: self._score_one(*pair), rest) if rest else []
        out, k = [], 0
        for _, options in requests_:
            out.append(flat[k:k + len(options)])
            k += len(options)
        return out

    def _score_one(self, prompt: str, option: str) -> OptionScore:
        if not option:
            raise InvalidInputError(f"option {option!r} adds no tokens to the prompt")
        text = prompt + option
        data, max_tokens = self._echo(text)
        url = f"{self.base_url}/completions"
        tokens, token_lps, offsets = _echo_logprobs(data)
        if not tokens or not token_lps or not offsets or not (len(tokens) == len(token_lps) == len(offsets)):
            raise self._error(f"{url} returned no prompt log-probs for an echo request (echo: true, logprobs: 1, "
                              f"max_tokens: {max_tokens}), so it cannot score options; it answered: "
                              f"{_quote(json.dumps(data))}. Use a server whose /v1/completions supports echo with "
                              "logprobs (vLLM, llama.cpp's llama_cpp.server with logits_all, groundplan serve), or "
                              "mode 'chat' with planners that only generate")
        # only the echoed text's own tokens: one a server generated after it (max_tokens 1, or a server that
        # reads max_tokens 0 as "no limit") starts at or past its end
        kept = next((i for i, o in enumerate(offsets) if int(o) >= len(text)), len(offsets))
        tokens, token_lps, offsets = tokens[:kept], token_lps[:kept], offsets[:kept]
        if not self._alignment_checked:
            self._check_alignment(tokens, token_lps, _top_logprobs(data, kept), max_tokens)
        first = option_start(len(prompt), len(text), tokens, offsets) if tokens else None
        if first is None:
            raise InvalidInputError(f"option {option!r} adds no tokens to the prompt")
        picked = token_lps[first:]
        if first == 0 and picked[0] is None:  # only the text's first token may lack one (nothing conditions it)
            raise InvalidInputError("the prompt is empty and the server returned no log-prob for the first token")
        if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in picked):
            raise self._error(f"{url} returned log-probs that are not finite numbers for the option's tokens "
                              f"{tokens[first:]}: {picked}")
        total = float(sum(picked))
        return OptionScore(option=option, logprob_sum=total, logprob_mean=total / len(picked), num_tokens=len(picked))

    def _check_alignment(self, tokens: Sequence[str], token_lps: Sequence[Any], top: Sequence[Any] | None,
                         max_tokens: int) -> None:
        """Refuse a server whose prompt log-probs are shifted by one token: ``token_logprobs[i]`` read from the
        logits *after* token i (the distribution of token i+1) instead of those before it. Such numbers look
        like log-probs but score nothing (llama-cpp-python's server answers so for a model whose tokenizer adds
        no BOS token). It shows in ``top_logprobs``: listed for position i, the most likely token is, on any
        text a model predicts at all, often the text's token i and seldom its token i+1; shifted, the reverse.
        Judged once, on the first answer with at least ``_ALIGN_MIN`` positions that list top tokens."""
        if top is None:
            return
        n = same = following = 0
        for i in range(1, len(tokens) - 1):
            entry, lp = top[i], token_lps[i]
            if not isinstance(entry, dict) or not entry or not isinstance(lp, (int, float)):
                continue
            try:
                best_token, best = max(entry.items(), key=lambda kv: float(kv[1]))
                best = float(best)
            except (TypeError, ValueError):
                continue
            n += 1
            same += lp >= best - 1e-6
            following += best_token == tokens[i + 1]
        if n < _ALIGN_MIN:
            return
        self._alignment_checked = True
        if following >= n / 8 and following > 4 * same:
            raise self._error(
                f"{self.base_url}/completions returns prompt log-probs shifted by one token (echo: true, logprobs: 1, "
                f"max_tokens: {max_tokens}): at {following} of {n} positions the most likely token it lists is the "
                f"text's NEXT token, and at only {same} the token itself, so each log-prob is read from the logits "
                "after its token and scores nothing. llama-cpp-python's server does this for a GGUF whose tokenizer "
                "adds no BOS token; start it with --kv_overrides tokenizer.ggml.add_bos_token=bool:true "
                "(docs/models.md). Use a server whose echo log-probs are those of each token given the ones before it")

    def _echo(self, text: str) -> tuple[dict[str, Any], int]:
        """The server's answer to an echo request for ``text``, and the ``max_tokens`` it was sent with.

        The API's scoring request has ``max_tokens: 0``. Not every server takes it as "generate nothing":
        some refuse it (a 400/422 naming ``max_tokens``), and some read 0 as "no limit" and generate until
        the model stops or the context is full (llama-cpp-python's server does), which is slow though the
        generated tokens are never counted (:meth:`_score_one` keeps only the echoed text's tokens). So the
        backend's first echo request, sent alone, finds out: a refusal is retried with ``max_tokens: 1``,
        and an answer carrying generated text or tokens makes 1 the value of every later request, whose one
        generated token is then ignored. That first request also carries ``stop`` strings that end any
        generation at the first word boundary (``_PROBE_STOP``; nothing to stop for a server that generates
        nothing), so a server reading 0 as "no limit" costs a token or two there, not a context's worth."""
        body: dict[str, Any] = {"model": self.name, "prompt": text, "echo": True, "logprobs": 1}
        known = self._echo_max_tokens
        if known is not None:
            return self._post("completions", {**body, "max_tokens": known}), known
        try:
            data = self._post("completions", {**body, "max_tokens": 0, "stop": list(_PROBE_STOP)})
        except LLMServiceError as exc:
            if exc.status not in (400, 422) or "max_tokens" not in str(exc):
                raise
            self.stats.failures -= 1  # answered, and used
            log.warning("%s/completions refuses max_tokens 0 with echo (%s); scoring with max_tokens 1 and "
                        "ignoring the generated token", self.base_url, _quote(str(exc))[:200])
            self._echo_max_tokens = 1
            return self._post("completions", {**body, "max_tokens": 1}), 1
        if not isinstance(_echo_logprobs(data)[2], list):
            return data, 0  # no prompt log-probs: refused by the caller, nothing learnt
        generated = _generated_tokens(data, text)
        if generated:
            log.warning("%s/completions generated %d token(s) for an echo request with max_tokens 0 (it does not "
                        "read 0 as 'generate nothing'); scoring with max_tokens 1 from now on and ignoring the "
                        "generated token", self.base_url, generated)
        self._echo_max_tokens = 1 if generated else 0
        return data, 0

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
            choices = self._sample("chat/completions", body, params.n)
            out = []
            for c in choices:
                content = ((c.get("logprobs") or {}).get("content")) or []
                lps = [t.get("logprob") for t in content if isinstance(t, dict)]
                out.append(self._generation(str((c.get("message") or {}).get("content") or ""), lps, c.get("finish_reason")))
            return out
        body.update(prompt=prompt, logprobs=1)
        choices = self._sample("completions", body, params.n)
        return [self._generation(str(c.get("text") or ""), (c.get("logprobs") or {}).get("token_logprobs") or [],
                                 c.get("finish_reason")) for c in choices]

    def _sample(self, path: str, body: dict[str, Any], n: int) -> list[dict[str, Any]]:
        """:meth:`_all_choices` for a sampling request. A server that refuses token log-probs (a 400/422
        naming ``logprobs``, or a 5xx naming them that its retries did not cure, as llama.cpp's server started
        without ``--logits_all`` answers) is asked again without them, and is not asked for them again: its
        samples carry no log-probs (mean 0.0, no preference between them), which a planner that ranks samples
        by their log-probs then cannot use; one warning says so."""
        if not self._sample_logprobs:
            return self._all_choices(path, {k: v for k, v in body.items() if k != "logprobs"}, n)
        try:
            return self._all_choices(path, body, n)
        except LLMServiceError as exc:
            refused = exc.status in (400, 422) or (exc.status is not None and exc.status >= 500)
            if not refused or "logprobs" not in str(exc):
                raise
            self._sample_logprobs = False
            log.warning("%s/%s refuses token log-probs for sampling; sampling without them from now on (samples "
                        "carry none, so they are not ranked by the model's log-probs)", self.base_url, path)
            return self._all_choices(path, {k: v for k, v in body.items() if k != "logprobs"}, n)

    def _all_choices(self, path: str, body: dict[str, Any], n: int) -> list[dict[str, Any]]:
        """``n`` choices for ``body``. A server that answers fewer than the ``n`` asked for (llama-cpp-python's
        ignores ``n`` and answers one) is asked again for the rest, up to ``n`` requests in all; a seeded
        request's k-th follow-up carries ``seed + k``, so the samples stay reproducible without repeating."""
        choices = self._choices(self._post(path, body), path)[:n]
        asked = 1
        while len(choices) < n and asked < n:
            if not self._warned_few_choices:
                self._warned_few_choices = True
                log.warning("%s/%s answered %d choice(s) for n=%d; requesting the rest separately", self.base_url,
                            path, len(choices), body.get("n", n))
            more = {**body, "n": n - len(choices)}
            if body.get("seed") is not None:
                more["seed"] = int(body["seed"]) + asked
            choices += self._choices(self._post(path, more), path)[:n - len(choices)]
            asked += 1
        if len(choices) < n:
            raise self._error(f"{self.base_url}/{path} answered {len(choices)} choice(s) for n={n} in {asked} requests")
        return choices

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


def probe_scoring(model: str, options: OpenAIOptions, needs: Mapping[str, Sequence[str]]) -> None:
    """Refuse a config whose planners score options (``needs["score"]``: their labels) when the server at
    ``options.base_url`` cannot: score one option as a planner would (the same echo request with
    ``logprobs``, the same checks of the answer, the same retries) and raise
    :class:`~groundplan.core.errors.InvalidInputError` naming the planners, the URL and what the server
    answered: no echo, no prompt log-probs, or log-probs shifted by one token
    (:meth:`OpenAILanguageModel._check_alignment`, which the probe's text is long enough for). Nothing is
    asked in chat mode (refused already by the declared capabilities) or when no planner
    scores. :meth:`OpenAIOptions.probe <groundplan.llm.options.OpenAIOptions.probe>`, called once per config load
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


def _echo_logprobs(data: dict[str, Any]) -> tuple[Any, Any, Any]:
    """``tokens``, ``token_logprobs`` and ``text_offset`` of an echo answer's first choice (Nones if absent)."""
    try:
        lp = data["choices"][0].get("logprobs") or {}
        return lp.get("tokens"), lp.get("token_logprobs"), lp.get("text_offset")
    except (KeyError, IndexError, TypeError, AttributeError):
        return None, None, None


def _top_logprobs(data: dict[str, Any], count: int) -> list[Any] | None:
    """The first ``count`` entries of an echo answer's ``top_logprobs``, or None if it has none that long."""
    try:
        top = (data["choices"][0].get("logprobs") or {}).get("top_logprobs")
    except (KeyError, IndexError, TypeError, AttributeError):
        return None
    return top[:count] if isinstance(top, list) and len(top) >= count else None


def _generated_tokens(data: dict[str, Any], text: str) -> int:
    """How many tokens a server generated after the echoed ``text`` (0 for a request that asked for none and
    got none): the usage's ``completion_tokens``, else the tokens starting at or past the text's end, else 1
    if the answer's text runs on past ``text``."""
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    done = usage.get("completion_tokens")
    if isinstance(done, int) and done > 0:
        return done
    _, _, offsets = _echo_logprobs(data)
    if isinstance(offsets, list):
        past = sum(1 for o in offsets if isinstance(o, (int, float)) and o >= len(text))
        if past:
            return past
    try:
        echoed = data["choices"][0].get("text")
    except (KeyError, IndexError, TypeError, AttributeError):
        echoed = None
    return 1 if isinstance(echoed, str) and echoed.startswith(text) and len(echoed) > len(text) else 0


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
