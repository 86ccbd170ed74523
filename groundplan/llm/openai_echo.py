"""Option scoring over an OpenAI-compatible ``/v1/completions`` (the ``openai`` backend's
:meth:`~groundplan.llm.openai_backend.OpenAILanguageModel.score`): what an echo request sends, how its
answer becomes an :class:`~groundplan.llm.base.OptionScore`, and how the departures of real servers
from the API are learnt or refused. Kept apart from sampling and the transport because it is where the
backend's decisions must equal the in-process engine's.

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

Servers depart from the API; the scorer tolerates what it can without knowing which server it talks to
(docs/models.md has llama-cpp-python's server as the worked case). Only the tokens that start inside the
sent text are counted, so a token a server generates after the echo is never part of a score. The
backend's first echo request goes out alone and learns how the server reads ``max_tokens: 0``: a server
that refuses it (a 400/422 naming ``max_tokens``) or generates anyway (reading 0 as "no limit") is sent
``max_tokens: 1`` from then on (:meth:`EchoScorer._echo`). The null log-prob of the text's first
token is the API's; any other missing or non-finite log-prob of an option's token is an error, never a
wrong sum. A server whose echo log-probs are shifted by one token (each read from the logits after its
token) is recognised from ``top_logprobs`` and refused (:meth:`EchoScorer._check_alignment`). A server
that answers an echo request without prompt log-probs is refused at that first request, quoting what it
returned.
"""
from __future__ import annotations

import json
import logging
import math
import threading
from typing import Any, Sequence

from groundplan.core.errors import InvalidInputError
from groundplan.llm.base import OptionScore, ScoreRequest
from groundplan.llm.openai_http import LLMServiceError, OpenAIClient, quote

log = logging.getLogger(__name__)

#: ``stop`` of the first echo request (see ``EchoScorer._echo``): the API's limit is 4 strings
_PROBE_STOP = ("\n", " ", ".", ",")
#: positions with top log-probs needed to judge whether a server's echo log-probs are shifted by one token
_ALIGN_MIN = 16


class EchoScorer:
    """Scores options with echo requests to ``<base_url>/completions`` through ``http``, and remembers
    what the first answers taught about the server (``max_tokens``, log-prob alignment).

    Args:
        http: the backend's transport (retries, key, concurrency).
        model: the server's model name, sent as each request's ``model``.
    """

    def __init__(self, http: OpenAIClient, model: str) -> None:
        self.http = http
        self.model = model
        self.base_url = http.base_url
        #: ``max_tokens`` of an echo request: None until the first one has shown whether the server honours 0
        self.max_tokens: int | None = None
        self._probe_lock = threading.Lock()
        self._alignment_checked = False

    def score_batch(self, requests_: Sequence[ScoreRequest]) -> list[list[OptionScore]]:
        """Every (prompt, option) pair of every request as its own echo request, all concurrent (up to
        ``max_concurrency``); each request gets back its own scores, in order."""
        pairs: list[tuple[str, str]] = []
        for prompt, options in requests_:
            if not options:
                raise InvalidInputError("score() needs at least one option")
            pairs += [(prompt, o) for o in options]
        flat: list[OptionScore] = []
        if self.max_tokens is None:  # the backend's first echo request goes alone (see _echo)
            with self._probe_lock:
                if self.max_tokens is None:
                    flat.append(self._score_one(*pairs[0]))
        rest = pairs[len(flat):]
        flat += self.http.concurrently(lambda pair: self._score_one(*pair), rest) if rest else []
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
            raise self.http.error(f"{url} returned no prompt log-probs for an echo request (echo: true, logprobs: 1, "
                                  f"max_tokens: {max_tokens}), so it cannot score options; it answered: "
                                  f"{quote(json.dumps(data))}. Use a server whose /v1/completions supports echo with "
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
            raise self.http.error(f"{url} returned log-probs that are not finite numbers for the option's tokens "
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
            raise self.http.error(
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
        body: dict[str, Any] = {"model": self.model, "prompt": text, "echo": True, "logprobs": 1}
        known = self.max_tokens
        if known is not None:
            return self.http.post("completions", {**body, "max_tokens": known}), known
        try:
            data = self.http.post("completions", {**body, "max_tokens": 0, "stop": list(_PROBE_STOP)})
        except LLMServiceError as exc:
            if exc.status not in (400, 422) or "max_tokens" not in str(exc):
                raise
            self.http.stats.failures -= 1  # answered, and used
            log.warning("%s/completions refuses max_tokens 0 with echo (%s); scoring with max_tokens 1 and "
                        "ignoring the generated token", self.base_url, quote(str(exc))[:200])
            self.max_tokens = 1
            return self.http.post("completions", {**body, "max_tokens": 1}), 1
        if not isinstance(_echo_logprobs(data)[2], list):
            return data, 0  # no prompt log-probs: refused by the caller, nothing learnt
        generated = _generated_tokens(data, text)
        if generated:
            log.warning("%s/completions generated %d token(s) for an echo request with max_tokens 0 (it does not "
                        "read 0 as 'generate nothing'); scoring with max_tokens 1 from now on and ignoring the "
                        "generated token", self.base_url, generated)
        self.max_tokens = 1 if generated else 0
        return data, 0


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
