"""``POST /v1/completions`` and ``GET /v1/models``: the served model behind the OpenAI API, so any
OpenAI client (the ``openai`` package, or groundplan's own ``llm.backend: openai``) can score and
sample with it.

The request is the OpenAI completions request: ``prompt`` as a text, a list of texts, token ids or a list
of token-id lists; ``echo`` with ``max_tokens`` 0 or more; ``logprobs: k`` (0-5) giving ``tokens``,
``token_logprobs`` (the first prompt token's is null, nothing conditions it), ``top_logprobs`` and
``text_offset``; sampling with ``n``, ``temperature``, ``top_p``, ``stop``, ``seed``, ``max_tokens``
(and vLLM's ``repetition_penalty``). Prompt log-probs, SayCan's scoring pattern over HTTP (its public
demo sent ``prompt + option`` with ``echo``, ``logprobs`` and ``max_tokens: 0`` to GPT-3), go through the
scorer that serves ``/v1/score`` (batched across callers in the Serve app, prefix-cached in the engine:
:meth:`~groundplan.llm.hf.HFLanguageModel.prompt_logprobs`); samples through the engine's ``generate``.
The log-probs of sampled tokens are the model's own (temperature 1) over the canonical tokenization of
the returned text, computed by the same scorer. Token-id prompts are sampled from as their decoded text.

The routes share the API's bearer token, body limit and error rules: malformed or unknown fields 422;
an unknown model, a ``logprobs`` above 5, ``stream``, ``best_of`` other than ``n``, ``logit_bias``,
penalties, ``suffix`` or a request over the configured limits 400 with a message.
"""
from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any, Sequence

from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict, Field

from groundplan.core.errors import InvalidInputError, UnknownNameError
from groundplan.llm import backend_capabilities
from groundplan.llm.base import PromptLogprobs
from groundplan.llm.openai_echo import option_start
from groundplan.serve.config import ServeConfig
from groundplan.serve.schemas import json_int

#: most alternatives per position (the OpenAI API's limit for ``logprobs``)
MAX_LOGPROBS = 5
_STARTED = int(time.time())


class CompletionRequest(BaseModel):
    """The OpenAI completions request (the fields groundplan implements; an unknown one is a 422)."""

    model_config = ConfigDict(extra="forbid", strict=True)  # as the API's own requests (schemas._Req)

    model: str = Field(..., max_length=200, description="the served model (GET /v1/models)")
    prompt: str | list[str] | list[json_int()] | list[list[json_int()]] = Field(
        ..., description="a text, a list of texts, token ids, or a list of token-id lists")
    max_tokens: json_int(ge=0) | None = Field(16, description="tokens to sample after each prompt (0: none, with echo: "
                                   "score the prompt only)")
    temperature: float | None = Field(1.0, ge=0, le=2, description="0: greedy")
    top_p: float | None = Field(1.0, gt=0, le=1)
    n: json_int(ge=1, le=128) | None = Field(1, description="samples per prompt")
    stream: bool | None = Field(False, description="not supported (400 when true)")
    logprobs: json_int(ge=0) | None = Field(None, description=f"log-probs of each token and the top k alternatives "
                                 f"(k <= {MAX_LOGPROBS})")
    echo: bool | None = Field(False, description="return the prompt before the completion, with its log-probs")
    stop: str | list[str] | None = Field(None, description="up to 4 strings that end a sample (not returned)")
    # bounds within 2**53, where JSON numbers are exact in every client (and torch takes any of them)
    seed: json_int(ge=-(2**53 - 1), le=2**53 - 1) | None = Field(None, description="makes sampling reproducible")
    repetition_penalty: float | None = Field(1.0, gt=0, description="vLLM's extension: Hugging Face's repetition "
                                             "penalty (1: none)")
    presence_penalty: float | None = Field(0.0, description="only 0 is supported")
    frequency_penalty: float | None = Field(0.0, description="only 0 is supported")
    best_of: json_int() | None = Field(None, description="only equal to n is supported")
    logit_bias: dict[str, float] | None = Field(None, description="not supported (400 when not empty)")
    suffix: str | None = Field(None, description="not supported (400 when set)")
    user: str | None = Field(None, max_length=256, description="ignored")


class CompletionLogprobs(BaseModel):
    tokens: list[str]
    token_logprobs: list[float | None]
    top_logprobs: list[dict[str, float] | None]
    text_offset: list[int]


class CompletionChoice(BaseModel):
    index: int
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: str


class CompletionUsage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class CompletionResponse(BaseModel):
    id: str
    object: str = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: CompletionUsage


class ModelCard(BaseModel):
    id: str
    object: str = "model"
    created: int
    owned_by: str = "groundplan"


class ModelList(BaseModel):
    object: str = "list"
    data: list[ModelCard]


def mount_openai(app: FastAPI, config: ServeConfig, backend: Any, secured: list[Any], errors: dict[int, Any],
                 llm_name: str | None = None) -> None:
    """Add ``/v1/completions`` and ``/v1/models`` to ``app`` behind ``secured`` (the bearer token)."""
    served = llm_name or config.llm.model
    caps = backend_capabilities(config.llm.backend, config.llm.options)
    can_logprob = caps is None or caps.prompt_logprobs

    @app.get("/v1/models", response_model=ModelList, dependencies=secured, responses=errors, tags=["openai"])
    async def models() -> dict[str, Any]:
        """The served model, as the OpenAI API lists models."""
        return {"object": "list", "data": [{"id": served, "object": "model", "created": _STARTED,
                                            "owned_by": "groundplan"}]}

    @app.post("/v1/completions", response_model=CompletionResponse, response_model_exclude_none=False,
              dependencies=secured, responses=errors, tags=["openai"])
    async def completions(req: CompletionRequest) -> dict[str, Any]:
        """The OpenAI completions API over the served model: scoring (``echo`` + ``logprobs``,
        ``max_tokens: 0``) through the batched, prefix-cached scorer; sampling through the engine."""
        prompts = check_request(req, config, served, can_logprob)
        return await complete(req, prompts, backend, served, can_logprob)


def check_request(req: CompletionRequest, config: ServeConfig, served: str, can_logprob: bool) -> list[str | list[int]]:
    """The request's prompts as a list, after every check that needs no model (400 with a message)."""
    if req.model != served:
        raise UnknownNameError(f"unknown model '{req.model}'; this server has: {served}")
    if req.stream:
        raise InvalidInputError("stream is not supported: send stream: false (or omit it)")
    n = req.n or 1
    if req.best_of is not None and req.best_of != n:
        raise InvalidInputError("best_of is not supported (only best_of equal to n)")
    if req.logit_bias:
        raise InvalidInputError("logit_bias is not supported")
    if req.presence_penalty or req.frequency_penalty:
        raise InvalidInputError("presence_penalty and frequency_penalty are not supported (only 0); "
                                "repetition_penalty is")
    if req.suffix:
        raise InvalidInputError("suffix is not supported")
    if req.logprobs is not None and req.logprobs > MAX_LOGPROBS:
        raise InvalidInputError(f"logprobs is {req.logprobs}; the most is {MAX_LOGPROBS}")
    if req.logprobs is not None and not can_logprob:
        raise InvalidInputError(f"this server's model (llm backend '{config.llm.backend}') cannot return log-probs")
    if not can_logprob and not isinstance(req.prompt, str) and any(not isinstance(p, str) for p in req.prompt):
        raise InvalidInputError(f"this server's model (llm backend '{config.llm.backend}') takes text prompts only")
    stops = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
    if len(stops) > 4 or any(not s for s in stops):
        raise InvalidInputError("stop takes at most 4 non-empty strings")
    prompt = req.prompt
    if isinstance(prompt, str) or (isinstance(prompt, list) and prompt and isinstance(prompt[0], int)):
        prompts: list[str | list[int]] = [prompt]  # type: ignore[list-item]
    else:
        prompts = list(prompt)  # type: ignore[arg-type]
    lim = config.limits
    if not prompts:
        raise InvalidInputError("prompt is empty")
    if len(prompts) > lim.max_options:
        raise InvalidInputError(f"{len(prompts)} prompts; the limit is {lim.max_options} per request (limits.max_options)")
    longest = lim.max_prompt_chars + lim.max_option_chars  # an echo prompt is a prompt and an option
    for p in prompts:
        if len(p) == 0:
            raise InvalidInputError("a prompt is empty")
        if len(p) > longest:
            what = "characters" if isinstance(p, str) else "tokens"
            raise InvalidInputError(f"a prompt is {len(p)} {what}; the limit is {longest} (limits.max_prompt_chars + "
                                    "limits.max_option_chars)")
    max_tokens = 16 if req.max_tokens is None else req.max_tokens
    if max_tokens > lim.max_new_tokens:
        raise InvalidInputError(f"max_tokens is {max_tokens}; this server's limit is {lim.max_new_tokens} "
                                "(limits.max_new_tokens)")
    if max_tokens > 0 and n * len(prompts) > lim.max_samples:
        raise InvalidInputError(f"n x prompts is {n * len(prompts)} samples; the limit is {lim.max_samples} "
                                "(limits.max_samples)")
    return prompts


async def complete(req: CompletionRequest, prompts: list[str | list[int]], backend: Any, served: str,
                   can_logprob: bool = True) -> dict[str, Any]:
    """Score and/or sample every prompt and build the OpenAI response (choice ``i * n + j`` is sample j of
    prompt i, as the OpenAI API orders them). A served model without ``prompt_logprobs`` (a backend that
    is itself an HTTP client) has no tokenizer here: its usage counts only the sampled tokens."""
    n, k = req.n or 1, req.logprobs
    max_tokens = 16 if req.max_tokens is None else req.max_tokens
    choices: list[dict[str, Any]] = []
    completion_tokens = 0
    if max_tokens == 0:
        scored: list[PromptLogprobs] | None = None
        if req.echo and k is not None:
            scored = await backend.prompt_logprobs(prompts, k)
        texts = [pl.text for pl in scored] if scored else await _texts(backend, prompts)
        counts = [len(pl.token_ids) for pl in scored] if scored else await _counts(backend, prompts, can_logprob)
        for i, text in enumerate(texts):
            lp = _logprobs(scored[i], 0, k) if scored else (_empty() if k is not None else None)
            for _ in range(n):
                choices.append({"index": len(choices), "text": text if req.echo else "", "logprobs": lp,
                                "finish_reason": "length"})
        prompt_tokens = sum(counts)
    else:
        stops = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
        params = {"n": n, "temperature": 1.0 if req.temperature is None else req.temperature,
                  "top_p": 1.0 if req.top_p is None else req.top_p, "max_new_tokens": max_tokens, "stop": tuple(stops),
                  "seed": req.seed, "repetition_penalty": req.repetition_penalty or 1.0}
        # the prompts' own log-probs (echo) and the token-id prompts' texts come from one grouped call, and every
        # sample's log-probs from one more: calls of one text each would cost a forward pass per text
        # (lm-evaluation-harness's local-completions sends echo with max_tokens 1 for every request it scores)
        echo = bool(req.echo and k is not None)
        need_heads = can_logprob and (echo or any(not isinstance(p, str) for p in prompts))
        heads = await backend.prompt_logprobs(prompts, k if echo else 0) if need_heads else None
        texts = [h.text for h in heads] if heads else await _texts(backend, prompts)
        counts = [len(h.token_ids) for h in heads] if heads else await _counts(backend, prompts, can_logprob)
        prompt_tokens = sum(counts)
        samples = await asyncio.gather(*(backend.generate(t, params) for t in texts))
        tails = iter(await backend.prompt_logprobs([t + g["text"] for t, gens in zip(texts, samples) for g in gens], k)
                     if k is not None else [])
        for i, (text, gens) in enumerate(zip(texts, samples)):
            for g in gens:
                completion_tokens += int(g["num_tokens"])
                lp = None
                if k is not None:
                    tail = next(tails)
                    first = option_start(len(text), len(tail.text), tail.tokens, tail.offsets) if g["text"] else None
                    lp = _logprobs(tail, len(tail.tokens) if first is None else first, k)
                    if echo:
                        lp = _join(_logprobs(heads[i], 0, k), lp)  # type: ignore[index]
                choices.append({"index": len(choices), "text": (text if req.echo else "") + g["text"], "logprobs": lp,
                                "finish_reason": g["finish_reason"]})
    return {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()), "model": served,
            "choices": choices, "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                                          "total_tokens": prompt_tokens + completion_tokens}}


async def _texts(backend: Any, prompts: Sequence[str | list[int]]) -> list[str]:
    """Each prompt as text (token ids decoded by the served tokenizer)."""
    ids = [p for p in prompts if not isinstance(p, str)]
    decoded = iter((await backend.prompt_logprobs(ids, 0)) if ids else [])
    return [p if isinstance(p, str) else next(decoded).text for p in prompts]


async def _counts(backend: Any, prompts: Sequence[str | list[int]], can_count: bool = True) -> list[int]:
    if not can_count:
        return [0 for _ in prompts]
    texts = [p for p in prompts if isinstance(p, str)]
    counted = iter((await backend.count_tokens(texts)) if texts else [])
    return [next(counted) if isinstance(p, str) else len(p) for p in prompts]


def _empty() -> dict[str, Any]:
    return {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}


def _logprobs(pl: PromptLogprobs, first: int, k: int | None) -> dict[str, Any]:
    """The OpenAI ``logprobs`` object of ``pl``'s tokens from ``first`` on (offsets in ``pl.text``)."""
    kk = k or 0
    return {"tokens": list(pl.tokens[first:]),
            "token_logprobs": list(pl.logprobs[first:]),
            "top_logprobs": [None if j == 0 else dict(pl.top[j][:kk]) for j in range(first, len(pl.tokens))],
            "text_offset": list(pl.offsets[first:])}


def _join(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    return {key: a[key] + b[key] for key in a}
