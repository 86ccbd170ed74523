"""Sampling over an OpenAI-compatible server (the ``openai`` backend's
:meth:`~groundplan.llm.openai_backend.OpenAILanguageModel.generate`): the request for
``/v1/completions`` or ``/v1/chat/completions`` and the reading of its choices into
:class:`~groundplan.llm.base.Generation`. Kept apart from scoring because it learns different things
about a server and works in both modes.

``mode: chat`` is for servers that only speak ``/v1/chat/completions``: it samples (the prompt is one
user message) but cannot score, and says so in its declared capabilities. A server that answers fewer
choices than ``n`` is asked again for the rest (:meth:`ChoiceSampler._all_choices`). A server that
refuses token log-probs for sampling (a 400 naming ``logprobs``, as some hosted chat models answer, or a
5xx naming them after its retries, as llama.cpp's server without ``--logits_all``) is sampled without
them from then on, with one warning.
"""
from __future__ import annotations

import json
import logging
import math
from typing import Any, Sequence

import numpy as np

from groundplan.llm.base import Generation, GenerationParams
from groundplan.llm.openai_http import LLMServiceError, OpenAIClient, quote

log = logging.getLogger(__name__)


class ChoiceSampler:
    """Samples through ``http`` in ``mode`` ('completions' or 'chat'), and remembers what the server
    taught: whether it takes token log-probs, and the warnings already given.

    Args:
        http: the backend's transport (retries, key, concurrency).
        model: the server's model name, sent as each request's ``model``.
        mode: ``completions`` (``/v1/completions``) or ``chat`` (``/v1/chat/completions``).
    """

    def __init__(self, http: OpenAIClient, model: str, mode: str) -> None:
        self.http = http
        self.model = model
        self.mode = mode
        self.base_url = http.base_url
        self._warned_no_logprobs = False
        self._warned_few_choices = False
        #: whether sampling requests ask for token log-probs: until a server refuses them (some hosted chat
        #: models answer a 400 naming ``logprobs``), after which samples carry none
        self._sample_logprobs = True

    def generate(self, prompt: str, params: GenerationParams) -> list[Generation]:
        """``params.n`` samples: ``/v1/completions`` (completions mode) or ``/v1/chat/completions`` with the
        prompt as one user message (chat mode). Each sample's text, finish reason and, where the server
        returns token log-probs, their mean (the model's own, as the in-process engine reports; 0.0, i.e.
        no preference between samples, when it returns none)."""
        body: dict[str, Any] = {"model": self.model, "n": params.n, "temperature": params.temperature,
                                "top_p": params.top_p, "max_tokens": params.max_new_tokens}
        if params.stop:
            body["stop"] = list(params.stop)
        if params.seed is not None:
            body["seed"] = int(params.seed)
        if params.repetition_penalty != 1.0:
            body["repetition_penalty"] = params.repetition_penalty  # vLLM's extension of the API
        if self.mode == "chat":
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
        choices = self._choices(self.http.post(path, body), path)[:n]
        asked = 1
        while len(choices) < n and asked < n:
            if not self._warned_few_choices:
                self._warned_few_choices = True
                log.warning("%s/%s answered %d choice(s) for n=%d; requesting the rest separately", self.base_url,
                            path, len(choices), body.get("n", n))
            more = {**body, "n": n - len(choices)}
            if body.get("seed") is not None:
                more["seed"] = int(body["seed"]) + asked
            choices += self._choices(self.http.post(path, more), path)[:n - len(choices)]
            asked += 1
        if len(choices) < n:
            raise self.http.error(f"{self.base_url}/{path} answered {len(choices)} choice(s) for n={n} in {asked} requests")
        return choices

    def _choices(self, data: dict[str, Any], path: str) -> list[dict[str, Any]]:
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not all(isinstance(c, dict) for c in choices):
            raise self.http.error(f"{self.base_url}/{path} answered without choices: {quote(json.dumps(data))}")
        return sorted(choices, key=lambda c: c.get("index", 0))

    def _generation(self, text: str, lps: Sequence[Any], reason: Any) -> Generation:
        values = [float(v) for v in lps if isinstance(v, (int, float)) and math.isfinite(v)]
        if text and not values and not self._warned_no_logprobs:
            self._warned_no_logprobs = True
            log.warning("%s returns no token log-probs with its samples: Generation.logprob_mean is 0.0", self.base_url)
        mean = float(np.mean(values)) if values else 0.0
        return Generation(text=text, logprob_mean=mean, num_tokens=len(values),
                          finish_reason="length" if reason == "length" else "stop")
