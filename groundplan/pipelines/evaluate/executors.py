"""Where a sweep's episodes run: in this process, or on Ray actors (docs/architecture.md, "Runtime").

Both executors take the episodes still to run and call ``on_result(spec, result)`` as each finishes, in
the driver's thread, so the sweep driver alone writes traces (one record per episode). They differ only
in where the :class:`~groundplan.rollout.runner.EpisodeRunner` lives:

- :class:`LocalExecutor`: one runner in this process (``--local``, tests, debugging);
- :class:`RayExecutor`: ``runtime.workers`` runner actors, each owning ``runtime.envs_per_worker`` envs
  (one episode per env at a time), and ``runtime.scorers``
  LLM scorer actors that batch the score requests of every episode in flight. The runners form an
  :class:`~groundplan.actors.pool.ActorPool`: a runner that dies mid-episode is restarted by Ray (or
  replaced) and the episode rerun from reset, at most ``runtime.max_episode_retries`` times, after which
  it is recorded as failed with the error; a scorer that dies is restarted by Ray and its pending
  requests resent (``max_task_retries``).
"""
from __future__ import annotations

import itertools
import logging
from typing import Any, Callable, Protocol

from groundplan.actors.cluster import connect, merge_scorer_stats, wait_for_actors
from groundplan.actors.pool import ActorPool, error_text
from groundplan.config import EvalConfig
from groundplan.llm.base import LanguageModel
from groundplan.rollout.runner import (
    EpisodeResult,
    EpisodeRunner,
    EpisodeSpec,
    failed_trace,
)

log = logging.getLogger(__name__)

OnResult = Callable[[EpisodeSpec, EpisodeResult], None]
LMFactory = Callable[[], LanguageModel]


class Executor(Protocol):
    def run(self, specs: list[EpisodeSpec], on_result: OnResult) -> dict[str, Any]:
        """Run every episode once; returns the executor's stats."""
        ...


class LocalExecutor:
    """Episodes one after another on one in-process :class:`EpisodeRunner`."""

    def __init__(self, cfg: EvalConfig, lm_factory: LMFactory) -> None:
        self.cfg = cfg
        self.lm_factory = lm_factory

    def run(self, specs: list[EpisodeSpec], on_result: OnResult) -> dict[str, Any]:
        if not specs:
            return {}
        runner = EpisodeRunner(self.cfg.env, self.lm_factory(), self.cfg.max_steps, llm_name=self.cfg.llm.model,
                               config_hash=self.cfg.hash())
        for spec in specs:
            on_result(spec, runner.run(spec))
        return {"runner": runner.metrics()}


class RayExecutor:
    """Episodes on runner actors with shared scorer actors; see the module docstring."""

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
        from groundplan.actors.episode_runner import make_runner_actor
        from groundplan.actors.scorer import make_scorer_actor

        rt, cfg = self.rt, self.cfg
        envs = rt.envs_per_worker
        in_flight = max(1, min(rt.in_flight or rt.workers * envs, len(specs)))
        n_workers = min(rt.workers, -(-in_flight // envs))
        started = connect(rt.address, cpus_needed=rt.scorers * rt.scorer_cpus + n_workers * rt.worker_cpus
                          + 0.5 * rt.remote_affordance)
        actors: list[Any] = []
        stats: dict[str, Any] = {"num_workers": n_workers, "envs_per_worker": envs, "max_in_flight": in_flight,
                                 "num_scorers": rt.scorers,
                                 "episode_reruns": 0, "rerun_episodes": [], "failed_after_retries": 0}
        try:
            scorers = [make_scorer_actor(num_gpus=rt.scorer_gpus, num_cpus=rt.scorer_cpus,
                                         resources=rt.scorer_resources or None, backend=cfg.llm.backend,
                                         model=cfg.llm.model, options=cfg.llm.options, batch_window_ms=rt.batch_window_ms,
                                         max_batch=rt.max_batch, lm_factory=self.lm_factory,
                                         num_threads=rt.scorer_threads, memo_size=rt.memo_size,
                                         adaptive_batching=rt.adaptive_batching) for _ in range(rt.scorers)]
            actors += scorers
            lm_name = wait_for_actors([scorers[0].get_name.remote()], "LLM scorer", rt.start_timeout_s)[0]
            aff = None
            if rt.remote_affordance:
                sources = {p.display: {"source": p.affordance, "options": p.affordance_options}
                           for p in cfg.planners if p.affordance}
                aff = make_affordance_server(sources=sources)
                actors.append(aff)
            ids = itertools.count()

            def new_runner() -> Any:
                return make_runner_actor(cfg.env, scorers, lm_name, cfg.max_steps, cfg.hash(), worker_id=next(ids),
                                         num_cpus=rt.worker_cpus, resources=rt.worker_resources or None,
                                         call_timeout_s=rt.call_timeout_s, affordance_server=aff,
                                         trace_llm=cfg.llm.model, envs=envs)

            # any exception from a runner is infrastructure (run_episode records the planner's own), so
            # every failed call is rerun; a runner that answers ``info`` after a failure was restarted by Ray
            with ActorPool(new_runner, n_workers, slots_per_actor=envs, max_in_flight=in_flight,
                           max_retries=rt.max_episode_retries, retry_app_errors=True,
                           call_timeout_s=rt.call_timeout_s, is_alive=lambda r: r.info.remote()) as pool:
                wait_for_actors([r.info.remote() for r in pool.actors], "episode runners", rt.start_timeout_s)
                ctx = {"scorers": scorers, "runners": pool.actors, "stats": stats}
                self._coordinate(specs, pool, on_result, stats, ctx)
            stats["scorer"] = merge_scorer_stats(ray.get([s.stats.remote() for s in scorers]))
            if aff is not None:
                stats["affordance_server"] = ray.get(aff.stats.remote())
        finally:
            for a in actors:
                try:
                    ray.kill(a)
                except Exception:
                    pass
            if started:
                ray.shutdown()
        return stats

    def _coordinate(self, specs: list[EpisodeSpec], pool: ActorPool, on_result: OnResult, stats: dict[str, Any],
                    ctx: dict[str, Any]) -> None:
        """Every episode through the runner pool: results to ``on_result`` (and the ``on_episode`` hook,
        which sees the live runners in ``ctx["runners"]``) as they finish; an episode that still fails after
        ``runtime.max_episode_retries`` reruns is recorded as an infrastructure failure."""
        retries = self.rt.max_episode_retries

        def failed_attempt(spec: EpisodeSpec, exc: BaseException, attempt: int, will_retry: bool) -> None:
            log.warning("episode %s: %s (attempt %d of %d)", spec.episode_id, error_text(exc), attempt, retries + 1)
            if will_retry:
                stats["episode_reruns"] += 1
                stats["rerun_episodes"].append(spec.episode_id)  # which ones: a fault report names them

        for out in pool.run(specs, lambda runner, spec: runner.run.remote(spec), on_failure=failed_attempt):
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
                ctx["runners"] = pool.actors  # a replaced runner's successor, for hooks that kill runners
                self.on_episode(result.trace, ctx)
