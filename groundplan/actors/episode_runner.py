"""The episode-runner actor: an :class:`~groundplan.rollout.runner.EpisodeRunner` inside a Ray actor.

The env lives in the actor for its whole life; each ``run(spec)`` plays one episode from reset there, so
a sweep makes one actor call per episode instead of one per env step. The planner's LLM calls go to the
shared scorer actor(s) through :class:`~groundplan.actors.remote.RemoteLM`, and, when the sweep asks for
it, its affordance calls to the affordance-server actor.

An actor that dies is restarted by Ray with a fresh env (``max_restarts``); calls in flight are not
retried (``max_task_retries=0``): the sweep driver reruns the whole episode from reset, so an
infrastructure fault is never recorded as the planner's failure. An episode during which a scorer call
failed for good raises here for the same reason.
"""
from __future__ import annotations

import os
from typing import Any

from groundplan.actors.remote import RemoteLM
from groundplan.config import EnvSpec
from groundplan.rollout.runner import EpisodeResult, EpisodeRunner, EpisodeSpec


class InfrastructureError(RuntimeError):
    """An actor the episode depended on died; the episode must be rerun, not recorded."""


class RunnerActor:
    def __init__(self, env_spec: EnvSpec, scorers: list[Any], lm_name: str, max_steps: int, config_hash: str,
                 worker_id: int = 0, call_timeout_s: float | None = None, affordance_server: Any = None,
                 trace_llm: str | None = None) -> None:
        self.lm = RemoteLM(scorers, name=lm_name, timeout_s=call_timeout_s)
        self.affordance_server = affordance_server
        affordance_for = None
        if affordance_server is not None:
            from groundplan.actors.affordance_server import RemoteAffordance

            def affordance_for(spec: Any, episode_id: str) -> Any:
                return RemoteAffordance(affordance_server, spec.display, episode_id)

        self.runner = EpisodeRunner(env_spec, self.lm, max_steps, llm_name=trace_llm or lm_name, config_hash=config_hash,
                                    affordance_for=affordance_for)
        self.worker_id = worker_id

    def info(self) -> dict[str, Any]:
        return {"worker_id": self.worker_id, "pid": os.getpid(), "node_id": _node_id(), **self.runner.metrics()}

    def run(self, spec: EpisodeSpec) -> EpisodeResult:
        self.lm.actor_error = None
        try:
            result = self.runner.run(spec)
        finally:
            if self.affordance_server is not None:
                self.affordance_server.release.remote(spec.episode_id)
        if self.lm.actor_error is not None:
            raise InfrastructureError(f"a scorer died during the episode: {self.lm.actor_error}")
        return result

    def healthy(self) -> bool:
        return self.runner.healthy()


def _node_id() -> str:
    import ray

    return ray.get_runtime_context().get_node_id()


def make_runner_actor(env_spec: EnvSpec, scorers: list[Any], lm_name: str, max_steps: int, config_hash: str, *,
                      worker_id: int = 0, num_cpus: float = 0.5, resources: dict[str, float] | None = None,
                      call_timeout_s: float | None = None, affordance_server: Any = None, max_restarts: int = 3,
                      trace_llm: str | None = None) -> Any:
    """Start one RunnerActor (see the module docstring for its restart rules). ``trace_llm`` is the model
    name traces record (the config's ``llm.model``; default: the scorer's name)."""
    import ray

    opts: dict[str, Any] = dict(num_cpus=num_cpus, max_restarts=max_restarts, max_task_retries=0)
    if resources:
        opts["resources"] = resources
    return ray.remote(RunnerActor).options(**opts).remote(env_spec, scorers, lm_name, max_steps, config_hash,
                                                          worker_id, call_timeout_s, affordance_server, trace_llm)
