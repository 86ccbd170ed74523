"""The one LLM scorer host: one model, many concurrent callers, dynamic batching (docs/architecture.md, "Runtime").

``LLMScorer`` is a plain class whose public methods are coroutines, and every place that serves a model
to many callers wraps this one class, so batching, the score memo and the stats behave alike everywhere:
eval's Ray actor is the class under ``ray.remote`` (:func:`make_scorer_actor`), Serve's scorer deployment
is :class:`groundplan.serve.service.ServeScorer` (this class configured from a serve config) under
``serve.deployment``, ``groundplan serve --local`` calls that same class in its own event loop, and tests
call it directly under ``asyncio``.

Score requests go into a :class:`DynamicBatcher`: it takes the first waiting request, collects more until
``batch_window_ms`` has passed or ``max_batch`` requests are waiting, runs one ``lm.score_batch`` in a
thread and hands each caller back only its own scores. Requests that share a prompt prefix share its
key/values through the backend's prefix cache (``HFLanguageModel.cache``). Prompt log-probs
(``/v1/completions`` with ``echo``) are batched by a second batcher with the same policy into one
``prompt_logprobs`` call; ``generate``, ``embed`` and ``count_tokens`` run unbatched.

Score memo: a batch computes only the (prompt, option) pairs the memo (:mod:`groundplan.llm.memo`) lacks,
so every caller of a host shares it; its hit rate is in :meth:`LLMScorer.stats` and thereby in the
sweep's stats and MLflow metrics.
"""
from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from groundplan.core.errors import InvalidInputError
from groundplan.llm.base import (
    Generation,
    GenerationParams,
    LanguageModel,
    OptionScore,
    PromptLogprobs,
    ScoreRequest,
)
from groundplan.llm.memo import memo_for, memoized_score_batch

log = logging.getLogger(__name__)

#: a zero-argument callable that builds the backend inside the actor (tests inject fakes this way)
LMFactory = Callable[[], LanguageModel]


@dataclass
class _Pending:
    item: Any
    future: asyncio.Future
    size: int = 1


@dataclass
class BatchStats:
    requests: int = 0
    batches: int = 0
    items: int = 0  # options scored (scorer) or skills scored (affordance server)
    busy_s: float = 0.0
    max_batch_seen: int = 0
    started: float = field(default_factory=time.perf_counter)

    def to_dict(self) -> dict[str, float]:
        wall = time.perf_counter() - self.started
        return {
            "requests": self.requests,
            "batches": self.batches,
            "mean_batch_size": self.requests / self.batches if self.batches else 0.0,
            "max_batch_size": self.max_batch_seen,
            "items": self.items,
            "busy_s": self.busy_s,
            "items_per_s": self.items / self.busy_s if self.busy_s else 0.0,
            "uptime_s": wall,
        }


class DynamicBatcher:
    """Collects awaitable requests into batches for one synchronous ``run_batch(items) -> results``.

    The loop starts lazily on the first request (inside the running event loop). A batch closes when
    ``max_batch`` requests are in it or ``window_ms`` has passed since its first request arrived, or,
    with ``adaptive`` (default), as soon as it holds as many requests as are coming: the most requests
    outstanding (sent, not yet answered) at any arrival since the last batch closed (at least that batch and
    those left waiting behind it). Callers that each wait for their answer before sending again (a sweep's
    episodes, an HTTP client's concurrent slots) keep that many requests in play, so waiting the window out
    for more only adds latency (a lone caller would pay the whole window on every request). Counting the
    outstanding requests, not only the last batch, keeps callers whose requests once fell into two batches
    (half arriving while the other half ran) from staying split: on a CPU, where a pass over the weights
    costs about the same for 4 texts as for 8, a split doubles the passes. When more callers join, the
    requests left in the queue raise the expectation for the next batch.
    An exception in ``run_batch`` fails every request of that batch (each caller sees it).

    The queue and the loop task belong to the event loop of the first request; a request from another
    event loop (Starlette's test client opens one per request when not used as a context manager) gets
    a fresh queue and task there, since asyncio objects cannot be awaited across loops.
    """

    def __init__(self, run_batch: Callable[[list[Any]], list[Any]], window_ms: float = 5.0, max_batch: int = 32,
                 size_of: Callable[[Any], int] = lambda _: 1, adaptive: bool = True) -> None:
        if max_batch < 1:
            raise InvalidInputError(f"max_batch must be at least 1, got {max_batch}")
        if window_ms < 0:
            raise InvalidInputError(f"batch_window_ms must be >= 0, got {window_ms}")
        self.run_batch = run_batch
        self.window_s = window_ms / 1000.0
        self.max_batch = int(max_batch)
        self.size_of = size_of
        self.adaptive = adaptive
        self._expected = self.max_batch
        self._outstanding = 0  # requests submitted and not yet answered
        self._peak = 0  # the most outstanding at an arrival since the last batch closed
        self.stats = BatchStats()
        self._queue: asyncio.Queue[_Pending] | None = None
        self._task: asyncio.Task | None = None
        self._event_loop: asyncio.AbstractEventLoop | None = None

    async def submit(self, item: Any) -> Any:
        loop = asyncio.get_running_loop()
        if self._queue is None or self._event_loop is not loop:
            self._event_loop, self._queue, self._task = loop, asyncio.Queue(), None
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._loop())
        fut = loop.create_future()
        self._outstanding += 1
        self._peak = max(self._peak, self._outstanding)
        try:
            await self._queue.put(_Pending(item, fut, self.size_of(item)))
            return await fut
        finally:
            self._outstanding -= 1

    async def _loop(self) -> None:
        assert self._queue is not None
        loop = asyncio.get_running_loop()
        while True:
            first = await self._queue.get()
            batch = [first]
            deadline = loop.time() + self.window_s
            target = min(self.max_batch, self._expected) if self.adaptive else self.max_batch
            while len(batch) < target:
                try:
                    batch.append(self._queue.get_nowait())
                    continue
                except asyncio.QueueEmpty:
                    pass
                left = deadline - loop.time()
                if left <= 0:
                    break
                try:
                    batch.append(await asyncio.wait_for(self._queue.get(), timeout=left))
                except asyncio.TimeoutError:
                    break
            self._expected = max(1, min(self.max_batch, max(self._peak, len(batch) + self._queue.qsize())))
            self._peak = 0
            await self._run(batch)

    async def _run(self, batch: list[_Pending]) -> None:
        t0 = time.perf_counter()
        try:
            results = await asyncio.to_thread(self.run_batch, [p.item for p in batch])
            if len(results) != len(batch):
                raise RuntimeError(f"batch of {len(batch)} requests returned {len(results)} results")
        except Exception as exc:  # every caller of the batch sees the error
            for p in batch:
                if not p.future.done():
                    p.future.set_exception(exc)
            return
        finally:
            self.stats.busy_s += time.perf_counter() - t0
            self.stats.batches += 1
            self.stats.requests += len(batch)
            self.stats.items += sum(p.size for p in batch)
            self.stats.max_batch_seen = max(self.stats.max_batch_seen, len(batch))
        for p, r in zip(batch, results):
            if not p.future.done():
                p.future.set_result(r)


def prompt_logprobs_batch(lm: Any, requests: Sequence[tuple[list[Any], int, bool]]) -> list[Any]:
    """Several callers' ``(prompts, top_k, keep_next)`` requests in one ``lm.prompt_logprobs`` call (at the
    largest top-k asked, each getting its own; next-token logits kept when any caller will sample after its
    texts), so the ``prompt + option`` texts of a SayCan step, sent concurrently, share their prompt's
    context and are packed together. Should the joint call fail (one caller's bad token ids), each request
    runs alone, so a caller only ever gets its own error: each result is a list of :class:`PromptLogprobs`
    or the exception to raise for that caller."""
    flat = [p for prompts, _, _ in requests for p in prompts]
    try:
        results = lm.prompt_logprobs(flat, max(k for _, k, _ in requests), keep_next=any(kn for _, _, kn in requests))
    except Exception as exc:
        if len(requests) == 1:
            return [exc]
        out: list[Any] = []
        for prompts, k, kn in requests:
            try:
                out.append(lm.prompt_logprobs(prompts, k, keep_next=kn))
            except Exception as one:
                out.append(one)
        return out
    out, at = [], 0
    for prompts, k, _ in requests:
        out.append([dataclasses.replace(r, top=tuple(t[:k] for t in r.top)) for r in results[at:at + len(prompts)]])
        at += len(prompts)
    return out


PLUGINS_ENV = "GROUNDPLAN_PLUGINS"


def import_plugins() -> list[str]:
    """Import the comma-separated modules named by ``$GROUNDPLAN_PLUGINS`` (e.g. ``tests.fake_backend``).

    A backend registered by a module of one's own (``LLM_BACKENDS.register``) must be registered in
    the scorer's process too, which on a cluster is another machine; nodes inherit this variable from
    ``ray start``'s environment, so naming the module here is enough."""
    import importlib

    names = [m.strip() for m in os.environ.get(PLUGINS_ENV, "").split(",") if m.strip()]
    for name in names:
        importlib.import_module(name)
    return names


class LLMScorer:
    """The scorer host: holds one language model and serves score/generate/embed requests from many callers.

    Args:
        backend, model, options: passed to :func:`groundplan.factory.build_llm` inside the host.
        batch_window_ms: how long a batch waits for more requests after its first one arrived.
        max_batch: most requests in one ``score_batch`` (and one ``prompt_logprobs``) call.
        lm_factory: builds the model instead of ``build_llm`` (tests, and ``--local`` with its model, this way).
        num_threads: torch's CPU threads; None: every core, 0: leave the process's setting alone.
        memo_size: most option scores the memo keeps (LRU); 0 disables it.
        adaptive_batching: close a batch once the expected number of requests is in (see DynamicBatcher).
    """

    def __init__(self, backend: str = "hf", model: str | None = None, options: dict[str, Any] | None = None,
                 batch_window_ms: float = 5.0, max_batch: int = 32, lm_factory: LMFactory | None = None,
                 num_threads: int | None = None, memo_size: int = 200_000, adaptive_batching: bool = True) -> None:
        if num_threads != 0:
            # Ray sets OMP_NUM_THREADS to an actor's num_cpus (1 by default), which would leave a CPU scorer
            # with one thread; the scorer is the compute-heavy actor, so by default it uses every core.
            import torch

            torch.set_num_threads(max(1, num_threads or os.cpu_count() or 1))
        if lm_factory is not None:
            self.lm = lm_factory()
        else:
            from groundplan.factory import build_llm

            import_plugins()
            self.lm = build_llm(backend, model, options)
        self.name = self.lm.name
        self.memo = memo_for(self.lm, memo_size)
        self._mode = str(getattr(self.lm, "score_mode", "score"))
        self._computed = 0
        self._batcher = DynamicBatcher(self._score_batch, batch_window_ms, max_batch, size_of=lambda r: len(r[1]),
                                       adaptive=adaptive_batching)
        self._echo = DynamicBatcher(functools.partial(prompt_logprobs_batch, self.lm), batch_window_ms, max_batch,
                                    size_of=lambda r: len(r[0]), adaptive=adaptive_batching)
        self._generate_calls = 0
        self._embed_calls = 0

    def _score_batch(self, requests: list[ScoreRequest]) -> list[tuple[list[OptionScore], int]]:
        """Each request's scores with the size of the batch it rode in (Serve reports it per request)."""
        results, computed = memoized_score_batch(self.lm, self.memo, requests, self._mode)
        self._computed += computed
        return [(r, len(requests)) for r in results]

    async def ready(self) -> dict[str, Any]:
        """Name, process and (under Ray) node id: the multi-node test checks placement with it."""
        node = None
        try:
            import ray

            if ray.is_initialized():
                node = ray.get_runtime_context().get_node_id()
        except Exception:  # informative only
            pass
        return {"name": self.name, "pid": os.getpid(), "node_id": node}

    async def get_name(self) -> str:
        return self.name

    async def score(self, prompt: str, options: Sequence[str]) -> list[OptionScore]:
        return (await self.score_sized(prompt, options))[0]

    async def score_sized(self, prompt: str, options: Sequence[str]) -> tuple[list[OptionScore], int]:
        """The scores of ``options`` and how many requests their batch held."""
        options = list(options)
        if not options:
            raise InvalidInputError("score needs at least one option")
        return await self._batcher.submit((prompt, options))

    async def score_batch(self, requests: Sequence[ScoreRequest]) -> list[list[OptionScore]]:
        return list(await asyncio.gather(*(self.score(p, o) for p, o in requests)))

    async def generate(self, prompt: str, params: GenerationParams) -> list[Generation]:
        self._generate_calls += 1
        return await asyncio.to_thread(self.lm.generate, prompt, params)

    async def beam_candidates(self, prompt: str, params: Any) -> list[Any]:
        """SayCanPay's proposals (token-level diverse beam search) by the hosted model, which must support
        it (:func:`~groundplan.llm.beam_search.propose` says so otherwise)."""
        from groundplan.llm.beam_search import propose

        return await asyncio.to_thread(propose, self.lm, prompt, params)

    async def chat_prompt(self, text: str) -> str:
        """``text`` in the hosted model's chat template (a backend that declares ``chat_template``)."""
        return self.lm.chat_prompt(text)

    async def embed(self, texts: Sequence[str]):
        self._embed_calls += 1
        return await asyncio.to_thread(self.lm.embed, list(texts))

    async def prompt_logprobs(self, prompts: Sequence[Any], top_k: int, keep_next: bool = False) -> list[PromptLogprobs]:
        """Per-token log-probs of whole prompts, batched with other callers' into one ``prompt_logprobs``
        call (:func:`prompt_logprobs_batch`); a caller gets only its own error. ``keep_next``: the caller
        will sample one token after each prompt (the engine keeps their next-token logits)."""
        out = await self._echo.submit((list(prompts), int(top_k), bool(keep_next)))
        if isinstance(out, BaseException):
            raise out
        return out

    async def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return await asyncio.to_thread(self.lm.count_tokens, list(texts))  # type: ignore[attr-defined]

    async def stats(self) -> dict[str, Any]:
        """requests, batches, mean batch size, options/s (options scored per second of model time)."""
        out: dict[str, Any] = self._batcher.stats.to_dict()
        out["options"] = out.pop("items")
        out["options_per_s"] = out.pop("items_per_s")
        out["generate_calls"] = self._generate_calls
        out["embed_calls"] = self._embed_calls
        out["pid"] = os.getpid()
        out["options_computed"] = self._computed
        out.update(self.memo.stats())
        engine = getattr(self.lm, "stats", None)
        if engine is not None and hasattr(engine, "forward_tokens"):
            out["forward_tokens"] = engine.forward_tokens
            out["padded_batches"] = engine.padded_batches
        cache = getattr(self.lm, "cache", None)
        if cache is not None and hasattr(cache, "stats"):
            try:
                out["prefix_cache"] = dict(vars(cache.stats)) if not callable(cache.stats) else cache.stats()
            except Exception:  # stats are informative only
                pass
        return out


def make_scorer_actor(*, num_gpus: float = 0, num_cpus: float = 1, resources: dict[str, float] | None = None,
                      max_restarts: int = -1, max_task_retries: int = -1, max_concurrency: int = 1000,
                      name: str | None = None, **kwargs: Any):
    """Start one ``LLMScorer`` Ray actor; ``kwargs`` go to :class:`LLMScorer`.

    ``max_restarts`` restarts a dead scorer (reloading its model) and ``max_task_retries`` resends the
    calls that were pending when it died, so episodes see a delay, not an error.
    """
    import ray

    opts: dict[str, Any] = dict(num_gpus=num_gpus, num_cpus=num_cpus, max_restarts=max_restarts,
                                max_task_retries=max_task_retries, max_concurrency=max_concurrency)
    if resources:
        opts["resources"] = resources
    if name:
        opts["name"] = name
    return ray.remote(LLMScorer).options(**opts).remote(**kwargs)


def merge_scorer_stats(per: list[dict[str, Any]]) -> dict[str, Any]:
    """One scorer's stats, or the replicas' summed (memo hit rate over all lookups) with each kept."""
    if len(per) == 1:
        return per[0]
    total = {k: sum(s.get(k, 0) for s in per) for k in ("requests", "batches", "options", "busy_s", "memo_hits",
                                                         "memo_lookups", "options_computed")}
    return {**total, "mean_batch_size": total["requests"] / total["batches"] if total["batches"] else 0.0,
            "options_per_s": total["options"] / total["busy_s"] if total["busy_s"] else 0.0,
            "memo_hit_rate": total["memo_hits"] / total["memo_lookups"] if total["memo_lookups"] else 0.0,
            "replicas": per}
