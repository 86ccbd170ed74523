"""Collection's trajectory rows, played by ``run_episode`` (:mod:`groundplan.rollout.trajectory`), equal the
rows of the plain decide/execute loop written out below, field for field: the contract of the collect schema
(per step the observation shown, the action, its feasibility; the done skill last; reward 1.0 on the last step
iff the goal holds at the end). Errors are raised as they were; the collector pays for no plan replay."""
from __future__ import annotations

from typing import Any

import pytest

from groundplan.core.errors import InfrastructureError
from groundplan.core.types import Decision, Observation, Task
from groundplan.envs.base import Env, listed_actions
from groundplan.envs.experts import EXPERTS, ReferencePlanExpert
from groundplan.envs.kitchen import KitchenEnv
from groundplan.planners.base import Planner
from groundplan.rollout.trajectory import EpisodeFailed, ExpertPlanner, run_trajectory
from tests.fakes import FakeLM, ToyEnv


def loop_row(env: Env, task: Task, seed: int, choose: Any, *, source: str, split: str, traj_id: str,
             max_steps: int, max_admissible: int | None = None) -> dict[str, Any]:
    """The row as the collect schema defines it, from a loop of its own: ``choose(obs, last) -> (action, done)``."""
    obs = env.reset(task, seed)
    row: dict[str, Any] = {"traj_id": traj_id, "env": env.name, "split": split, "task_id": task.task_id,
                           "goal": task.instruction, "init_obs": obs.text, "actions": [], "observations": [],
                           "feasible": [], "source": source, "admissible": []}
    last = None
    for _ in range(max_steps):
        action, done = choose(obs, last)
        allowed = listed_actions(obs)
        row["actions"].append(env.done_skill if done else action)
        row["observations"].append(obs.text)
        row["admissible"].append(allowed if max_admissible is None or len(allowed) <= max_admissible else [])
        if done:
            row["feasible"].append(True)
            break
        last = env.execute(action)
        row["feasible"].append(bool(last.success))
        obs = last.observation
    row["success"] = bool(env.check_goal().success)
    row["rewards"] = [0.0] * (len(row["actions"]) - 1) + [1.0 if row["success"] else 0.0]
    return row


def expert_choose(env: Env, expert: Any, task: Task) -> Any:
    def choose(obs: Observation, last: Any) -> tuple[str, bool]:
        action = expert.act(task, obs)
        return action, action == env.done_skill

    return choose


def planner_choose(planner: Planner) -> Any:
    def choose(obs: Observation, last: Any) -> tuple[str, bool]:
        decision = planner.next_step(obs, last)
        return decision.skill, decision.done

    return choose


@pytest.mark.parametrize("mode", ["language", "physical"])  # physical: failed steps, some goals unmet
def test_kitchen_expert_rows_equal_the_plain_loop(mode):
    env = KitchenEnv(mode=mode, nav_failure_prob=0.3)
    expert = EXPERTS.get("kitchen")(env)
    planner = ExpertPlanner(expert, env.done_skill)
    rows = []
    for task in KitchenEnv(split="test").tasks()[::5]:
        for seed in (0, 1):
            kw = {"source": expert.name, "split": "test", "traj_id": f"{task.task_id}|{seed}", "max_steps": 30}
            got = run_trajectory(env, task, seed, planner, **kw)
            assert got == loop_row(env, task, seed, expert_choose(env, expert, task), **kw)
            rows.append(got)
    assert all(r["actions"][-1] == "done" and r["source"] == "reference_plan" for r in rows)
    assert (mode == "language") == all(r["success"] and all(r["feasible"]) for r in rows)


def test_babyai_expert_rows_equal_the_plain_loop():
    pytest.importorskip("minigrid")
    from groundplan.envs import ENVS

    env = ENVS.get("babyai")(split="train", train_per_family=1)
    expert = EXPERTS.get("babyai")(env)
    planner = ExpertPlanner(expert, env.done_skill)
    for task in env.tasks():
        kw = {"source": "babyai_oracle", "split": "train", "traj_id": task.task_id, "max_steps": 30, "max_admissible": 4}
        got = run_trajectory(env, task, 0, planner, **kw)
        assert got == loop_row(env, task, 0, expert_choose(env, expert, task), **kw)
        assert got["success"] and got["actions"][-1] == "done picking up"


class Scripted(Planner):
    """Plays a fixed list of labels (the last one done when it is ``done``)."""

    name = "scripted"

    def __init__(self, plan: list[str], done: str = "done") -> None:
        self.plan, self.done = plan, done

    def reset(self, task: Task, observation: Observation, seed: int = 0) -> None:
        self.i = 0

    def next_step(self, observation: Observation, last: Any) -> Decision:
        self.i += 1
        skill = self.plan[min(self.i, len(self.plan)) - 1]
        return Decision(skill=skill, done=skill == self.done)


def test_planner_rows_equal_the_plain_loop_including_a_step_cap():
    env = KitchenEnv(mode="language")
    task = KitchenEnv().tasks()[0]
    plan = ["find a coke can", "pick up the sponge", "pick up the coke can", "done"]  # one infeasible step
    for cap in (10, 2):
        kw = {"source": "scripted", "split": "train", "traj_id": "t", "max_steps": cap}
        got = run_trajectory(env, task, 0, Scripted(plan), **kw)
        p = Scripted(plan)
        p.reset(task, env.reset(task, 0))
        assert got == loop_row(env, task, 0, planner_choose(p), **kw)
        assert len(got["actions"]) == min(cap, 4) and got["feasible"][1] is False


def test_saycan_planner_row_ends_with_the_env_done_skill():
    from groundplan.planners import PLANNERS
    from tests.fakes import ToyAffordance

    env = ToyEnv()
    planner = PLANNERS.get("saycan")(lm=FakeLM(), affordance=ToyAffordance())
    row = run_trajectory(env, env.tasks()[0], 0, planner, source="saycan", split="train", traj_id="t")
    assert row["actions"][-1] == "done" and row["rewards"][-1] == float(row["success"])


class CountingToy(ToyEnv):
    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.replays = self.measured = 0

    def check_plan(self, task, seed, plan):
        self.replays += 1
        return super().check_plan(task, seed, plan)

    def episode_metrics(self, task, trace):
        self.measured += 1
        return {}


def test_collection_pays_for_no_replay_and_no_measures():
    env = CountingToy()
    row = run_trajectory(env, env.tasks()[0], 0, ExpertPlanner(ReferencePlanExpert(env), env.done_skill),
                         source="reference_plan", split="train", traj_id="t")
    assert row["success"] and row["actions"] == list(ToyEnv.REFERENCE) + ["done"]
    assert env.replays == env.measured == 0


def test_an_env_error_is_raised_and_infrastructure_stays_infrastructure():
    env = ToyEnv(raise_on="pick up the coke can")
    planner = ExpertPlanner(ReferencePlanExpert(env), env.done_skill)
    with pytest.raises(EpisodeFailed, match=r"RuntimeError: the toy robot broke .*env.execute\('pick up the coke can'\)"):
        run_trajectory(env, env.tasks()[0], 0, planner, source="x", split="train", traj_id="t")

    class Down(Scripted):
        def next_step(self, observation, last):
            raise InfrastructureError("the LLM server kept failing")

    with pytest.raises(InfrastructureError, match="infrastructure failed: .*the LLM server kept failing"):
        run_trajectory(ToyEnv(), ToyEnv().tasks()[0], 0, Down([]), source="x", split="train", traj_id="t")


def test_reference_plan_expert_replays_the_whole_plan_for_every_seed():
    env = KitchenEnv(mode="language")
    expert = ReferencePlanExpert(env)
    planner = ExpertPlanner(expert, env.done_skill)
    task = KitchenEnv(split="train").tasks()[-1]
    rows = [run_trajectory(env, task, seed, planner, source="r", split="train", traj_id=str(seed)) for seed in range(3)]
    assert all(r["actions"] == list(task.reference_plan) and r["success"] for r in rows)
