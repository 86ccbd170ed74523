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

The routes share the API's bearer token, body limit and error rules. What the server accepts is what its
request model (:func:`completion_request_model`) says, enums and bounds included, so the OpenAPI schema
tells a client exactly: an unknown model, a ``logprobs`` above 5, ``stream``, ``best_of`` other than 1 (with
``n`` 1), ``logit_bias``, penalties, ``suffix``, or a request over the configured limits (``n`` x prompts
over ``limits.max_samples`` included) is a 422 naming the field. Only the served model knows its
vocabulary: a token id outside it is a 400 with a message.
"""
from __future__ import annotations

import asyncio
import time
import uuid
from typing import Annotated, Any, Literal, Sequence, Union

from fastapi import FastAPI
from pydantic import BaseModel, BeforeValidator, ConfigDict, Discriminator, Field, Tag, model_validator

from groundplan.llm import backend_capabilities
from groundplan.llm.base import PromptLogprobs
from groundplan.llm.openai_echo import option_start
from groundplan.serve.config import ServeConfig
from groundplan.serve.schemas import json_int, narrowed, one_of

#: most alternatives per position (the OpenAI API's limit for ``logprobs``)
MAX_LOGPROBS = 5
#: most samples per prompt (``n``) the schema allows at all; ``limits.max_samples`` bounds n x prompts
MAX_N = 128
#: ``max_tokens`` when a request leaves it out (or null), as in the OpenAI API
MAX_TOKENS = 16
_STARTED = int(time.time())
#: ``best_of`` only as a no-op: given (and not null), ``n`` is 1 (omitted, null or 1)
_BEST_OF_RULE = {"anyOf": [{"properties": {"best_of": {"type": "null"}}},
                           {"properties": {"n": {"anyOf": [{"const": 1}, {"type": "null"}]}}}]}
_STOP = Annotated[str, Field(min_length=1)]


def _form(value: Any) -> str | None:
    """Which form of a text-or-list field ``value`` has (its list form by its first item), so a bad value
    is refused with that form's error alone, named by it, rather than one error per form."""
    if isinstance(value, str):
        return "text"
    if not isinstance(value, list):
        return None
    first = value[0] if value else ""
    return "token-id lists" if isinstance(first, list) else "texts" if isinstance(first, str) else "token ids"


_FORMS = {"text": "a text", "texts": "a list of texts", "token ids": "a list of token ids",
          "token-id lists": "a list of token-id lists"}


def forms(tagged: dict[str, Any]) -> Any:
    """The union of ``tagged`` (a form's name -> its type), told apart by :func:`_form`."""
    names = [_FORMS[name] for name in tagged]
    message = "must be " + (", ".join(names[:-1]) + " or " if len(names) > 1 else "") + names[-1]
    return Annotated[Union[tuple(Annotated[tp, Tag(name)] for name, tp in tagged.items())],  # type: ignore[misc]
                     Discriminator(_form, custom_error_type="form", custom_error_message=message)]


_PROMPT = forms({"text": str, "texts": list[str], "token ids": list[json_int()],
                 "token-id lists": list[list[json_int()]]})
_STOPS = forms({"text": _STOP, "texts": Annotated[list[_STOP], Field(max_length=4)]})


def _boolean(value: Any) -> Any:
    """A JSON boolean and nothing else: a Literal of ``False`` alone would take ``0`` (Python's ``0 == False``),
    which the schema's ``false`` does not."""
    if value is not None and not isinstance(value, bool):
        raise ValueError("must be a boolean")
    return value


class CompletionRequest(BaseModel):
    """The OpenAI completions request (the fields groundplan implements; an unknown one is a 422)."""

    model_config = ConfigDict(extra="forbid", strict=True,  # as the API's own requests (schemas._Req)
                              json_schema_extra={"allOf": [_BEST_OF_RULE]})

    model: str = Field(..., max_length=200, description="the served model (GET /v1/models)")
    prompt: _PROMPT = Field(..., description="a text, a list of texts, token ids, or a list of token-id lists")
    max_tokens: json_int(ge=0) | None = Field(MAX_TOKENS, description="tokens to sample after each prompt (0: none, "
                                              "with echo: score the prompt only)")
    temperature: float | None = Field(1.0, ge=0, le=2, description="0: greedy")
    top_p: float | None = Field(1.0, gt=0, le=1)
    n: json_int(ge=1, le=MAX_N) | None = Field(1, description="samples per prompt")
    stream: Annotated[Literal[False], BeforeValidator(_boolean)] | None = Field(
        False, description="streaming is not supported: false or null")
    logprobs: json_int(ge=0, le=MAX_LOGPROBS) | None = Field(None, description="log-probs of each token and the top k "
                                                              f"alternatives (k <= {MAX_LOGPROBS})")
    echo: bool | None = Field(False, description="return the prompt before the completion, with its log-probs")
    stop: _STOPS | None = Field(None, description="up to 4 non-empty strings that end a sample (not returned)")
    # bounds within 2**53, where JSON numbers are exact in every client (and torch takes any of them)
    seed: json_int(ge=-(2**53 - 1), le=2**53 - 1) | None = Field(None, description="makes sampling reproducible")
    repetition_penalty: float | None = Field(1.0, gt=0, description="vLLM's extension: Hugging Face's repetition "
                                             "penalty (1: none)")
    presence_penalty: Annotated[float, Field(ge=0, le=0)] | None = Field(0.0, description="only 0 is supported")
    frequency_penalty: Annotated[float, Field(ge=0, le=0)] | None = Field(0.0, description="only 0 is supported")
    best_of: json_int(ge=1, le=1) | None = Field(None, description="only 1 with n 1 (the same as leaving it out) is "
                                                 "supported")
    logit_bias: Annotated[dict[str, float], Field(max_length=0)] | None = Field(
        None, description="not supported: null or {}")
    suffix: Annotated[str, Field(max_length=0)] | None = Field(None, description="not supported: null or \"\"")
    user: str | None = Field(None, max_length=256, description="ignored")

    @model_validator(mode="after")
    def _best_of(self) -> "CompletionRequest":
        if self.best_of is not None and (self.n or 1) != 1:
            raise ValueError(f"best_of is only supported as 1 with n 1 (it is {self.best_of} with n {self.n}); "
                             "leave best_of out")
        return self

    def prompts(self) -> list[str | list[int]]:
        """The request's prompts as a list: a text or one token-id list is one prompt."""
        prompt = self.prompt
        if isinstance(prompt, str) or (prompt and isinstance(prompt[0], int)):
            return [prompt]  # type: ignore[list-item]
        return list(prompt)  # type: ignore[arg-type]


def samples_rule(max_samples: int, max_prompts: int) -> dict[str, Any]:
    """JSON Schema of ``limits.max_samples``: unless ``max_tokens`` is 0, ``n`` x prompts is at most
    ``max_samples``. JSON Schema has no arithmetic, so it is one branch per run of ``n`` that allows the
    same number of prompts (at most ``max_prompts`` branches); a text or one token-id list is one prompt."""
    branches: list[dict[str, Any]] = [{"required": ["max_tokens"], "properties": {"max_tokens": {"const": 0}}}]
    low = 1
    while low <= min(max_samples, MAX_N):
        allowed = max_samples // low  # prompts for every n in [low, high]
        high = max_samples // allowed if allowed < max_prompts else max_samples // max_prompts
        n: dict[str, Any] = {"type": "integer", "minimum": low, "maximum": min(high, MAX_N)}
        branch: dict[str, Any] = {"properties": {"n": {"anyOf": [n, {"type": "null"}]} if low == 1 else n}}
        if low > 1:
            branch["required"] = ["n"]
        if allowed < max_prompts:
            one = [{"type": "string"}, {"type": "array", "items": {"type": "integer"}}]
            branch["properties"]["prompt"] = {"anyOf": [*one, {"type": "array", "maxItems": allowed}]}
        branches.append(branch)
        low = high + 1
    return {"anyOf": branches}


def completion_request_model(config: ServeConfig, served: str, can_logprob: bool) -> type[CompletionRequest]:
    """The completions request this server accepts: ``model`` the served one, ``limits`` as bounds, and
    token-id prompts and ``logprobs`` only when the served model can return log-probs."""
    lim = config.limits
    longest = lim.max_prompt_chars + lim.max_option_chars  # an echo prompt is a prompt and an option
    one_text = Annotated[str, Field(min_length=1, max_length=longest)]
    ids = Annotated[list[json_int(ge=0)], Field(min_length=1, max_length=longest)]
    texts = Annotated[list[one_text], Field(min_length=1, max_length=lim.max_options)]
    id_lists = Annotated[list[ids], Field(min_length=1, max_length=lim.max_options)]

    class Limited(CompletionRequest):
        __doc__ = CompletionRequest.__doc__
        model_config = ConfigDict(json_schema_extra={"allOf": [_BEST_OF_RULE,
                                                               samples_rule(lim.max_samples, lim.max_options)]})

        @model_validator(mode="after")
        def _samples(self) -> "Limited":
            n, count = self.n or 1, len(self.prompts())
            if (MAX_TOKENS if self.max_tokens is None else self.max_tokens) > 0 and n * count > lim.max_samples:
                raise ValueError(f"n x prompts is {n * count} samples; the limit is {lim.max_samples} "
                                 "(limits.max_samples)")
            return self

    prompt = forms({"text": one_text, "texts": texts,
                    **({"token ids": ids, "token-id lists": id_lists} if can_logprob else {})})
    return narrowed(Limited, "CompletionRequest", model=(one_of([served]), ...),
                    prompt=(prompt, ...), max_tokens=(json_int(ge=0, le=lim.max_new_tokens) | None, MAX_TOKENS),
                    logprobs=(json_int(ge=0, le=MAX_LOGPROBS) | None if can_logprob else None, None))


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

    async def completions(req: CompletionRequest) -> dict[str, Any]:
        """The OpenAI completions API over the served model: scoring (``echo`` + ``logprobs``,
        ``max_tokens: 0``) through the batched, prefix-cached scorer; sampling through the engine."""
        return await complete(req, req.prompts(), backend, served, can_logprob)

    # the request model is this server's (its model's name, its limits), so the route is added once the
    # annotation names it
    completions.__annotations__["req"] = completion_request_model(config, served, can_logprob)
    app.post("/v1/completions", response_model=CompletionResponse, response_model_exclude_none=False,
             dependencies=secured, responses=errors, tags=["openai"])(completions)


async def complete(req: CompletionRequest, prompts: list[str | list[int]], backend: Any, served: str,
                   can_logprob: bool = True) -> dict[str, Any]:
    """Score and/or sample every prompt and build the OpenAI response (choice ``i * n + j`` is sample j of
    prompt i, as the OpenAI API orders them). A served model without ``prompt_logprobs`` (a backend that
    is itself an HTTP client) has no tokenizer here: its usage counts only the sampled tokens."""
    n, k = req.n or 1, req.logprobs
    max_tokens = MAX_TOKENS if req.max_tokens is None else req.max_tokens
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
                  "seed": req.seed, "repetition_penalty": req.repetition_penalty or 1.0, "logprobs": k}
        # the prompts' own log-probs (echo) and the token-id prompts' texts come from one grouped call (calls of
        # one text each would cost a forward pass per text; lm-evaluation-harness's local-completions sends echo
        # with max_tokens 1 for every request it scores)
        echo = bool(req.echo and k is not None)
        need_heads = can_logprob and (echo or any(not isinstance(p, str) for p in prompts))
        # with one token to sample, the engine keeps each text's next-token logits from this same forward
        heads = (await backend.prompt_logprobs(prompts, k if echo else 0, keep_next=max_tokens == 1)
                 if need_heads else None)
        texts = [h.text for h in heads] if heads else await _texts(backend, prompts)
        counts = [len(h.token_ids) for h in heads] if heads else await _counts(backend, prompts, can_logprob)
        prompt_tokens = sum(counts)
        samples = await asyncio.gather(*(backend.generate(t, params) for t in texts))
        # the samples' own log-probs come with them where the backend gives them (groundplan's engine does);
        # else from one grouped call on prompt + sample
        rescore = [t + g["text"] for t, gens in zip(texts, samples) for g in gens if g.get("tokens") is None]
        tails = iter(await backend.prompt_logprobs(rescore, k) if k is not None and rescore else [])
        for i, (text, gens) in enumerate(zip(texts, samples)):
            for g in gens:
                completion_tokens += int(g["num_tokens"])
                lp = None
                if k is not None and g.get("tokens") is not None:
                    lp = _sampled(g["tokens"], len(text), k)
                elif k is not None:
                    tail = next(tails)
                    first = option_start(len(text), len(tail.text), tail.tokens, tail.offsets) if g["text"] else None
                    lp = _logprobs(tail, len(tail.tokens) if first is None else first, k)
                if lp is not None and echo:
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


def _sampled(tokens: Sequence[dict[str, Any]], start: int, k: int) -> dict[str, Any]:
    """The OpenAI ``logprobs`` object of a sample's tokens as the engine sampled them (offsets after the
    prompt's ``start`` characters, as the re-scored form gives them)."""
    return {"tokens": [t["token"] for t in tokens], "token_logprobs": [t["logprob"] for t in tokens],
            "top_logprobs": [dict(tuple(p) for p in t["top"][:k]) for t in tokens],
            "text_offset": [start + t["offset"] for t in tokens]}


def _join(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    return {key: a[key] + b[key] for key in a}
