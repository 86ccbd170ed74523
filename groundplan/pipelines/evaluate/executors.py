"""Where a sweep's episodes run: in this process, or on Ray actors (docs/architecture.md, "Runtime").

Both executors take the episodes still to run and call ``on_result(spec, result)`` as each finishes, in
the driver's thread, so the sweep driver alone writes traces (one record per episode). Both play them on
a :class:`~groundplan.actors.group.RunnerGroup`'s :class:`~groundplan.actors.worker.EpisodeWorker`; they
differ only in where the group puts it:

- :class:`LocalExecutor`: a local group, one worker in this process (``--local``, tests, debugging);
- :class:`RayExecutor`: ``runtime.workers`` worker actors, each owning ``runtime.envs_per_worker`` envs
  (one episode per env at a time), and ``runtime.scorers``
  LLM scorer actors that batch the score requests of every episode in flight. The workers form an
  :class:`~groundplan.actors.pool.ActorPool`: a worker that dies mid-episode is restarted by Ray (or
  replaced) and the episode rerun from reset, at most ``runtime.max_episode_retries`` times, after which
  it is recorded as failed with the error; a scorer that dies is restarted by Ray and its pending
  requests resent (``max_task_retries``).
"""
from __future__ import annotations

import functools
import logging
from typing import Any, Callable, Protocol

from groundplan.actors.group import RunnerGroup, pool_size
from groundplan.actors.pool import error_text
from groundplan.actors.worker import WorkerSpec
from groundplan.config import EvalConfig
from groundplan.llm.base import LanguageModel
from groundplan.rollout.runner import EpisodeResult, EpisodeSpec, failed_trace

log = logging.getLogger(__name__)

OnResult = Callable[[EpisodeSpec, EpisodeResult], None]
LMFactory = Callable[[], LanguageModel]


class Executor(Protocol):
    def run(self, specs: list[EpisodeSpec], on_result: OnResult) -> dict[str, Any]:
        """Run every episode once; returns the executor's stats."""
        ...


class LocalExecutor:
    """Episodes one after another on one in-process :class:`~groundplan.actors.worker.EpisodeWorker`."""

    def __init__(self, cfg: EvalConfig, lm_factory: LMFactory) -> None:
        self.cfg = cfg
        self.lm_factory = lm_factory

    def run(self, specs: list[EpisodeSpec], on_result: OnResult) -> dict[str, Any]:
        if not specs:
            return {}
        cfg = self.cfg
        with RunnerGroup.for_runtime(cfg.runtime, cpus_needed=0) as group:
            group.add_workers(WorkerSpec(cfg.env, cfg.max_steps, lm=self.lm_factory, llm_name=cfg.llm.model or "",
                                         config_hash=cfg.hash()), 1)
            for out in group.run(specs):
                if not out.ok:  # the runner records planner and env errors: anything else is a bug
                    raise out.errors[-1]
                on_result(out.item, out.value)
            return {"runner": group.workers[0].metrics()}


class RayExecutor:
    """Episodes on worker actors with shared scorer actors; see the module docstring."""

    def __init__(self, cfg: EvalConfig, lm_factory: LMFactory | None = None,
                 on_episode: Callable[[Any, dict[str, Any]], None] | None = None) -> None:
        self.cfg = cfg
        self.rt = cfg.runtime
        self.lm_factory = lm_factory
        self.on_episode = on_episode  # called after each episode with (trace, ctx); the fault tests kill actors

    def run(self, specs: list[EpisodeSpec], on_result: OnResult) -> dict[str, Any]:
        if not specs:
            return {}
        import ray

        from groundplan.actors.affordance_server import make_affordance_server
        from groundplan.actors.remote import RemoteLM
        from groundplan.actors.scorer import merge_scorer_stats

        rt, cfg = self.rt, self.cfg
        envs = rt.envs_per_worker
        n_workers, in_flight = pool_size(rt, len(specs))
        stats: dict[str, Any] = {"num_workers": n_workers, "envs_per_worker": envs, "max_in_flight": in_flight,
                                 "num_scorers": rt.scorers,
                                 "episode_reruns": 0, "rerun_episodes": [], "failed_after_retries": 0}
        cpus = rt.scorers * rt.scorer_cpus + n_workers * rt.worker_cpus + 0.5 * rt.remote_affordance
        with RunnerGroup.for_runtime(rt, cpus) as group:
            scorers = group.add_scorers(rt.scorers, num_gpus=rt.scorer_gpus, num_cpus=rt.scorer_cpus,
                                        resources=rt.scorer_resources or None, backend=cfg.llm.backend,
                                        model=cfg.llm.model, options=cfg.llm.options,
                                        batch_window_ms=rt.batch_window_ms, max_batch=rt.max_batch,
                                        lm_factory=self.lm_factory, num_threads=rt.scorer_threads,
                                        memo_size=rt.memo_size, adaptive_batching=rt.adaptive_batching)
            lm_name = ray.get(scorers[0].get_name.remote())
            aff = None
            if rt.remote_affordance:
                sources = {p.display: {"source": p.affordance, "options": p.affordance_options}
                           for p in cfg.planners if p.affordance}
                aff = group.add_actor(make_affordance_server(sources=sources))
            spec = WorkerSpec(cfg.env, cfg.max_steps, envs=envs,
                              lm=functools.partial(RemoteLM, scorers, name=lm_name, timeout_s=rt.call_timeout_s),
                              llm_name=cfg.llm.model or lm_name, config_hash=cfg.hash(), affordance_server=aff)
            # any exception from a worker is infrastructure (run_episode records the planner's own), so
            # every failed call is rerun; a worker that answers ``info`` after a failure was restarted by Ray
            group.add_workers(spec, n_workers, num_cpus=rt.worker_cpus, resources=rt.worker_resources or None,
                              max_restarts=3, max_in_flight=in_flight, max_retries=rt.max_episode_retries,
                              retry_app_errors=True, call_timeout_s=rt.call_timeout_s, probe=True,
                              what="episode runners")
            ctx = {"scorers": scorers, "runners": group.workers, "stats": stats}
            self._coordinate(specs, group, on_result, stats, ctx)
            stats["scorer"] = merge_scorer_stats(ray.get([s.stats.remote() for s in scorers]))
            if aff is not None:
                stats["affordance_server"] = ray.get(aff.stats.remote())
        return stats

    def _coordinate(self, specs: list[EpisodeSpec], group: RunnerGroup, on_result: OnResult,
                    stats: dict[str, Any], ctx: dict[str, Any]) -> None:
        """Every episode through the group's workers: results to ``on_result`` (and the ``on_episode``
        hook, which sees the live workers in ``ctx["runners"]``) as they finish; an episode that still fails after
        ``runtime.max_episode_retries`` reruns is recorded as an infrastructure failure."""
        retries = self.rt.max_episode_retries

        def failed_attempt(spec: EpisodeSpec, exc: BaseException, attempt: int, will_retry: bool) -> None:
            log.warning("episode %s: %s (attempt %d of %d)", spec.episode_id, error_text(exc), attempt, retries + 1)
            if will_retry:
                stats["episode_reruns"] += 1
                stats["rerun_episodes"].append(spec.episode_id)  # which ones: a fault report names them

        for out in group.run(specs, on_failure=failed_attempt):
            spec = out.item
            if out.ok:
                result = out.value
            else:
                stats["failed_after_retries"] += 1
                result = EpisodeResult(failed_trace(spec, self.cfg.env.name, self.cfg.llm.model, self.cfg.hash(),
                                                    f"infrastructure failed {len(out.errors)} times; "
                                                    f"last: {error_text(out.errors[-1])}"))
            on_result(spec, result)
            if self.on_episode is not None:
                ctx["runners"] = group.workers  # a replaced worker's successor, for hooks that kill workers
                self.on_episode(result.trace, ctx)
