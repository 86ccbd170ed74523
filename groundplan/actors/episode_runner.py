"""The episode-runner actor: an :class:`~groundplan.rollout.runner.EpisodeRunner` inside a Ray actor.

The env lives in the actor for its whole life; each ``run(spec)`` plays one episode from reset there, so
a sweep makes one actor call per episode instead of one per env step. The planner's LLM calls go to the
shared scorer actor(s) through :class:`~groundplan.actors.remote.RemoteLM`, and, when the sweep asks for
it, its affordance calls to the affordance-server actor.

With ``envs_per_worker`` > 1 the actor is threaded (``max_concurrency``) and owns that many runners, each
with its own env and its own ``RemoteLM`` (so a scorer death is still charged to the right episode);
each concurrent ``run`` takes a free one. Episodes mostly wait on the scorer, so threads suffice, and
many cheap sims then share one process instead of one process each (RLlib's
``num_envs_per_env_runner``).

An actor that dies is restarted by Ray with a fresh env (``max_restarts``); calls in flight are not
retried (``max_task_retries=0``): the sweep driver reruns the whole episode from reset, so an
infrastructure fault is never recorded as the planner's failure. An episode during which a scorer call
failed for good raises here for the same reason.
"""
from __future__ import annotations

import os
import queue
from typing import Any

from groundplan.actors.remote import RemoteLM
from groundplan.config import EnvSpec
from groundplan.core.errors import InfrastructureError
from groundplan.rollout.runner import EpisodeResult, EpisodeRunner, EpisodeSpec


class RunnerActor:
    def __init__(self, env_spec: EnvSpec, scorers: list[Any], lm_name: str, max_steps: int, config_hash: str,
                 worker_id: int = 0, call_timeout_s: float | None = None, affordance_server: Any = None,
                 trace_llm: str | None = None, envs: int = 1) -> None:
        self.affordance_server = affordance_server
        affordance_for = None
        if affordance_server is not None:
            from groundplan.actors.affordance_server import RemoteAffordance
            from groundplan.grounding import AFFORDANCES

            def affordance_for(spec: Any, episode_id: str) -> Any:
                declaration = AFFORDANCES.get(spec.affordance).declaration  # what the hosted source reads
                return RemoteAffordance(affordance_server, spec.display, episode_id, declaration)

        self.runners: list[EpisodeRunner] = []
        self._free: queue.SimpleQueue[EpisodeRunner] = queue.SimpleQueue()
        for _ in range(max(1, envs)):
            lm = RemoteLM(scorers, name=lm_name, timeout_s=call_timeout_s)
            runner = EpisodeRunner(env_spec, lm, max_steps, llm_name=trace_llm or lm_name, config_hash=config_hash,
                                   affordance_for=affordance_for)
            self.runners.append(runner)
            self._free.put(runner)
        self.worker_id = worker_id

    def info(self) -> dict[str, Any]:
        metrics = [r.metrics() for r in self.runners]
        return {"worker_id": self.worker_id, "pid": os.getpid(), "node_id": _node_id(), "envs": len(self.runners),
                **{k: sum(m[k] for m in metrics) for k in metrics[0]}}

    def run(self, spec: EpisodeSpec) -> EpisodeResult:
        runner = self._free.get()
        lm: RemoteLM = runner.lm  # type: ignore[assignment]
        lm.actor_error = None
        try:
            result = runner.run(spec)
            died = lm.actor_error  # read before the runner goes back to the pool
        finally:
            self._free.put(runner)
            if self.affordance_server is not None:
                self.affordance_server.release.remote(spec.episode_id)
        if died is not None:
            raise InfrastructureError(f"a scorer died during the episode: {died}")
        return result

    def healthy(self) -> bool:
        return all(r.healthy() for r in self.runners)


def _node_id() -> str:
    import ray

    return ray.get_runtime_context().get_node_id()


def make_runner_actor(env_spec: EnvSpec, scorers: list[Any], lm_name: str, max_steps: int, config_hash: str, *,
                      worker_id: int = 0, num_cpus: float = 0.5, resources: dict[str, float] | None = None,
                      call_timeout_s: float | None = None, affordance_server: Any = None, max_restarts: int = 3,
                      trace_llm: str | None = None, envs: int = 1) -> Any:
    """Start one RunnerActor with ``envs`` envs (see the module docstring for its restart rules).
    ``trace_llm`` is the model name traces record (the config's ``llm.model``; default: the scorer's name)."""
    import ray

    opts: dict[str, Any] = dict(num_cpus=num_cpus, max_restarts=max_restarts, max_task_retries=0,
                                max_concurrency=max(1, envs))
    if resources:
        opts["resources"] = resources
    return ray.remote(RunnerActor).options(**opts).remote(env_spec, scorers, lm_name, max_steps, config_hash,
                                                          worker_id, call_timeout_s, affordance_server, trace_llm, envs)
