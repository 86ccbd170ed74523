"""The episode runner: the loop, its stopping rules, error recording and trace round trips."""
from __future__ import annotations

import math

import pytest
from fakes import FakeLM, ToyAffordance, ToyEnv

from groundplan.core.errors import InvalidInputError
from groundplan.core.types import Task
from groundplan.planners import PLANNERS
from groundplan.planners.saycan import SayCanPlanner, load_prompt
from groundplan.rollout.episode import run_episode
from groundplan.rollout.traces import read_traces, write_traces

PLAN = (*ToyEnv.REFERENCE, "done")


def saycan(lm: FakeLM | None = None, **options) -> tuple[SayCanPlanner, ToyAffordance]:
    affordance = ToyAffordance()
    return SayCanPlanner(lm or FakeLM.following(PLAN), affordance, **options), affordance


def test_stops_on_done_without_executing_it() -> None:
    env, (planner, affordance) = ToyEnv(), saycan()
    task = env.tasks()[0]
    trace = run_episode(planner, env, task, seed=3, llm_name="fake-lm")
    assert [s.chosen for s in trace.steps] == list(PLAN)
    assert trace.terminated and trace.error is None
    assert trace.steps[-1].done and trace.steps[-1].success is None and "exec_s" not in trace.steps[-1].timings
    assert env.executed == list(ToyEnv.REFERENCE)  # "done" was not executed
    assert all(s.success and set(s.timings) == {"plan_s", "exec_s"} for s in trace.steps[:-1])
    assert trace.execution_success and trace.plan_success
    assert trace.goal_details["satisfied"] == ["coke at user"]
    assert trace.plan == list(ToyEnv.REFERENCE)
    assert trace.prompt == load_prompt("saycan_kitchen") + (
        "Human: bring me a coke can\nRobot: 1. find a coke can, 2. pick up the coke can, 3. bring it to you, "
        "4. put down the coke can, 5. done."
    )
    assert "".join(s.prompt_delta for s in trace.steps) == trace.prompt.rsplit("Robot: 1.", 1)[1]
    assert trace.episode_id == "saycan|toy|toy-coke|3" and trace.llm == "fake-lm" and trace.seed == 3
    assert affordance.resets == [("toy-coke", 3)]  # the runner passes the seed to planner.reset


def test_stops_at_max_steps() -> None:
    env, (planner, _) = ToyEnv(), saycan(FakeLM({"bring it to you": 0.0}))  # never chooses done
    trace = run_episode(planner, env, env.tasks()[0], seed=0, max_steps=3)
    assert len(trace.steps) == 3 and not trace.terminated and trace.error is None
    assert not trace.execution_success and trace.plan_success is False


def test_default_cap_comes_from_the_planner_config() -> None:
    env, (planner, _) = ToyEnv(), saycan(FakeLM({"bring it to you": 0.0}), max_steps=4)
    assert len(run_episode(planner, env, env.tasks()[0], seed=0).steps) == 4


def test_noisy_execution_fails_while_the_plan_succeeds() -> None:
    env = ToyEnv(fail_skills={"pick up the coke can"})
    planner = PLANNERS.get("saycan_novf")(lm=FakeLM.following(PLAN))
    trace = run_episode(planner, env, env.tasks()[0], seed=0)
    assert trace.steps[1].success is False and trace.steps[1].info["env"] == {"noise": True}
    assert not trace.execution_success and trace.plan_success
    assert trace.goal_details["unsatisfied"] == ["coke at user"]


def test_planner_exception_is_recorded_not_raised() -> None:
    class BrokenLM(FakeLM):
        def score(self, prompt, options):
            raise RuntimeError("scorer actor died")

    env, (planner, _) = ToyEnv(), saycan(BrokenLM())
    trace = run_episode(planner, env, env.tasks()[0], seed=0)
    assert trace.error.startswith("RuntimeError: scorer actor died")
    assert "planner.next_step" in trace.error
    assert trace.steps == [] and not trace.execution_success and trace.plan_success is False


def test_env_exception_is_recorded_not_raised() -> None:
    env, (planner, _) = ToyEnv(raise_on="pick up the coke can"), saycan()
    trace = run_episode(planner, env, env.tasks()[0], seed=0)
    assert trace.error.startswith("RuntimeError: the toy robot broke")
    assert [s.chosen for s in trace.steps] == ["find a coke can", "pick up the coke can"]
    assert not trace.execution_success


def test_bad_instruction_propagates() -> None:
    env, (planner, _) = ToyEnv(), saycan()
    with pytest.raises(InvalidInputError, match="empty"):
        run_episode(planner, env, Task("blank", "  ", "nl_nouns", goal={"coke": "user"}), seed=0)


def test_generative_planner_runs_an_episode() -> None:
    lm = FakeLM(generations=[" find coke", " pick up coke", " bring it to you", " put down coke", " done."])
    env = ToyEnv()
    trace = run_episode(PLANNERS.get("generative")(lm), env, env.tasks()[0], seed=0)
    assert [s.chosen for s in trace.steps] == list(PLAN)
    assert trace.execution_success and trace.plan_success and trace.terminated


def test_trace_round_trips_through_jsonl(tmp_path) -> None:
    env, (planner, _) = ToyEnv(), saycan()
    trace = run_episode(planner, env, env.tasks()[0], seed=1, config_hash="abc123")
    assert any(c.combined == -math.inf for c in trace.steps[0].candidates)  # infeasible skills survive JSON
    path = tmp_path / "traces.jsonl"
    write_traces(path, [trace])
    (back,) = list(read_traces(path))
    assert back.to_dict() == trace.to_dict()
    assert back.plan == trace.plan and back.config_hash == "abc123"
