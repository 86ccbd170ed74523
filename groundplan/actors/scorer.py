"""The LLM scorer actor: one model, many concurrent episodes, dynamic batching (docs/architecture.md, "Runtime").

``LLMScorer`` is a plain class whose public methods are coroutines, so it works as a Ray async actor
(``make_scorer_actor``) and, in tests, directly under ``asyncio``. Score requests go into a queue; a
batching loop takes the first waiting request, collects more until ``batch_window_ms`` has passed or
``max_batch`` requests are waiting, runs one ``lm.score_batch`` in a thread and hands each caller back
only its own scores. Requests that share a prompt prefix share its key/values through the backend's
prefix cache (``HFLanguageModel.cache``). ``generate`` and ``embed`` run unbatched.

Score memo: a batch computes only the (prompt, option) pairs the memo (:mod:`groundplan.llm.memo`) lacks,
so every worker of a sweep shares it; its hit rate is in :meth:`LLMScorer.stats` and thereby in the
sweep's stats and MLflow metrics.
"""
from __future__ import annotations

import asyncio
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
    with ``adaptive`` (default), as soon as it holds as many requests as the last batch held plus
    those left waiting behind it: in a sweep each episode waits for its answer before sending its next
    request, so that is how many requests are coming, and waiting the window out for more only adds
    latency (a lone episode would pay the whole window on every step). When more episodes join, the
    requests left in the queue raise the expectation for the next batch.
    An exception in ``run_batch`` fails every request of that batch (each caller sees it).
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
        self.stats = BatchStats()
        self._queue: asyncio.Queue[_Pending] | None = None
        self._task: asyncio.Task | None = None

    async def submit(self, item: Any) -> Any:
        if self._queue is None:
            self._queue = asyncio.Queue()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._loop())
        fut = asyncio.get_running_loop().create_future()
        await self._queue.put(_Pending(item, fut, self.size_of(item)))
        return await fut

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
            self._expected = max(1, min(self.max_batch, len(batch) + self._queue.qsize()))
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
    """Holds one language model and serves score/generate/embed requests from many episodes.

    Args:
        backend, model, options: passed to :func:`groundplan.factory.build_llm` inside the actor.
        batch_window_ms: how long a batch waits for more requests after its first one arrived.
        max_batch: most score requests in one ``score_batch`` call.
        lm_factory: builds the model instead of ``build_llm`` (tests inject a fake this way).
        memo_size: most option scores the memo keeps (LRU); 0 disables it.
        adaptive_batching: close a batch once the expected number of requests is in (see DynamicBatcher).
    """

    def __init__(self, backend: str = "hf", model: str | None = None, options: dict[str, Any] | None = None,
                 batch_window_ms: float = 5.0, max_batch: int = 32, lm_factory: LMFactory | None = None,
                 num_threads: int | None = None, memo_size: int = 200_000, adaptive_batching: bool = True) -> None:
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
        self._generate_calls = 0
        self._embed_calls = 0

    def _score_batch(self, requests: list[ScoreRequest]) -> list[list[OptionScore]]:
        results, computed = memoized_score_batch(self.lm, self.memo, requests, self._mode)
        self._computed += computed
        return results

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
        options = list(options)
        if not options:
            raise InvalidInputError("score needs at least one option")
        return await self._batcher.submit((prompt, options))

    async def score_batch(self, requests: Sequence[ScoreRequest]) -> list[list[OptionScore]]:
        return list(await asyncio.gather(*(self.score(p, o) for p, o in requests)))

    async def generate(self, prompt: str, params: GenerationParams) -> list[Generation]:
        self._generate_calls += 1
        return await asyncio.to_thread(self.lm.generate, prompt, params)

    async def embed(self, texts: Sequence[str]):
        self._embed_calls += 1
        return await asyncio.to_thread(self.lm.embed, list(texts))

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
