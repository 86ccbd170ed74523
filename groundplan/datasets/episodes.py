"""One episode → one trajectory row (:data:`~groundplan.datasets.schema.TRAJECTORY_SCHEMA`), chosen by
an expert oracle or by a registered planner (on-policy data: SayCanPay's Can/Pay learn from expert
trajectories, Sec. 4; the planner's own rollouts add its mistakes as feasibility labels).

Rewards follow the paper's sparse convention (Sec. 4, "r = 1 for all expert trajectories"): 1.0 on the
last step when the goal holds at the end, else 0; the Pay trainer discounts backwards from it.
The done decision is recorded as the last action (the paper's plans end with it, e.g. "done picking
up") and is not executed.
"""
from __future__ import annotations

import logging
from typing import Any

from groundplan.core.types import Observation, Task
from groundplan.envs.base import Env

log = logging.getLogger(__name__)


def admissible_of(obs: Observation) -> list[str]:
    """The admissible action labels of an observation (``skills`` masked by ``admissible`` if set)."""
    if obs.admissible is None:
        return list(obs.skills)
    return [s for s, ok in zip(obs.skills, obs.admissible) if ok]


def run_trajectory(env: Env, task: Task, seed: int, make_chooser: Any, *, source: str, split: str,
                   traj_id: str, max_steps: int = 30, max_admissible: int | None = None) -> dict[str, Any]:
    """Run ``task`` and return the row; ``make_chooser(first_obs)`` gives ``choose(obs, last_result) ->
    (action, done)`` (see :func:`expert_chooser`, :func:`planner_chooser`). A step that admits more than
    ``max_admissible`` actions records an empty admissible list (VirtualHome admits thousands per
    scene; the env, not the dataset, is their source)."""
    obs = env.reset(task, seed)
    init_obs = obs.text
    choose = make_chooser(obs)
    actions: list[str] = []
    observations: list[str] = []
    feasible: list[bool] = []
    admissible: list[list[str]] = []
    last = None
    for _ in range(max_steps):
        action, done = choose(obs, last)
        actions.append(action)
        observations.append(obs.text)
        allowed = admissible_of(obs)
        admissible.append(allowed if max_admissible is None or len(allowed) <= max_admissible else [])
        if done:
            feasible.append(True)
            break
        last = env.execute(action)
        feasible.append(bool(last.success))
        obs = last.observation
    success = bool(env.check_goal().success)
    rewards = [0.0] * len(actions)
    if success and rewards:
        rewards[-1] = 1.0
    return {
        "traj_id": traj_id, "env": env.name, "split": split, "task_id": task.task_id, "goal": task.instruction,
        "init_obs": init_obs, "actions": actions, "observations": observations, "feasible": feasible,
        "rewards": rewards, "success": success, "source": source, "admissible": admissible,
    }


def expert_chooser(env: Env, expert: Any, task: Task) -> Any:
    """``make_chooser`` for :func:`run_trajectory` from an expert (``act(task, obs) -> label``)."""
    done_label = env.done_skill

    def choose(obs: Observation, last: Any) -> tuple[str, bool]:
        action = expert.act(task, obs)
        return action, action == done_label

    return lambda first: choose


def planner_chooser(env: Env, planner: Any, task: Task, seed: int) -> Any:
    """``make_chooser`` from a planner (reset on the episode's first observation)."""

    def choose(obs: Observation, last: Any) -> tuple[str, bool]:
        decision = planner.next_step(obs, last)
        return (env.done_skill if decision.done else decision.skill), bool(decision.done)

    def make(first: Observation) -> Any:
        planner.reset(task, first, seed=seed)
        return choose

    return make
