"""The sim-worker actor: owns one environment instance (DESIGN.md, "Runtime").

A plain class with the Env operations as methods; ``make_sim_worker`` wraps it as a Ray actor. It holds
no episode logic: the coordinator's planner loop drives it through :class:`~groundplan.actors.remote.RemoteEnv`.
Each worker builds its own env from (name, options), so workers share nothing; the episode's start
state comes from ``reset(task, seed)``, as in-process.
"""
from __future__ import annotations

import os
from typing import Any, Sequence

from groundplan.core.types import GoalResult, Observation, StepResult, Task
from groundplan.envs import ENVS
from groundplan.envs.base import Env


class SimWorker:
    def __init__(self, env_name: str, env_options: dict[str, Any] | None = None, worker_id: int = 0) -> None:
        self.env: Env = ENVS.get(env_name)(**(env_options or {}))
        self.worker_id = worker_id
        self.episodes = 0

    def info(self) -> dict[str, Any]:
        env = self.env
        return {
            "name": env.name,
            "done_skill": env.done_skill,
            "capabilities": env.capabilities,
            "worker_id": self.worker_id,
            "pid": os.getpid(),
            "episodes": self.episodes,
        }

    def tasks(self, families: Sequence[str] | None = None) -> list[Task]:
        return self.env.tasks(families)

    def reset(self, task: Task, seed: int) -> Observation:
        self.episodes += 1
        return self.env.reset(task, seed)

    def execute(self, skill: str) -> StepResult:
        return self.env.execute(skill)

    def check_goal(self) -> GoalResult:
        return self.env.check_goal()

    def check_plan(self, task: Task, seed: int, plan: Sequence[str]) -> GoalResult:
        return self.env.check_plan(task, seed, list(plan))

    def episode_metrics(self, task: Task, trace: Any) -> dict[str, float]:
        return self.env.episode_metrics(task, trace)

    def frames(self) -> list[Any]:
        """The env's recent camera frames (envs that render keep a few; others have none)."""
        return list(self.env.frames())


def make_sim_worker(env_name: str, env_options: dict[str, Any] | None = None, worker_id: int = 0, *,
                    num_cpus: float = 1, resources: dict[str, float] | None = None, max_restarts: int = 3):
    """Start one SimWorker actor. A dead worker is restarted (up to ``max_restarts``) with a fresh env;
    its in-flight calls are *not* retried: the coordinator reruns the whole episode from scratch."""
    import ray

    opts: dict[str, Any] = dict(num_cpus=num_cpus, max_restarts=max_restarts, max_task_retries=0)
    if resources:
        opts["resources"] = resources
    return ray.remote(SimWorker).options(**opts).remote(env_name, env_options, worker_id)
