"""No ground truth inside a planner unless its config names an oracle (issue 10, item 3).

Every registered planner runs a few steps on a Task whose ``goal``, ``reference_plan`` and ``metadata``
raise on any use. Planner configurations that turn an oracle on must say so in ``planner.oracles``
and in their label; the others must never touch those fields.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from groundplan.core.types import Observation, StepResult, Task
from groundplan.planners import PLANNERS
from groundplan.planners.base import labelled
from tests.fakes import FakeLM, ToyAffordance, ToyEnv


class GroundTruthRead(AssertionError):
    pass


class Guard:
    """Stands in for ground truth: any use (truth value, item, attribute, iteration, length) raises."""

    def __init__(self, name: str) -> None:
        object.__setattr__(self, "_name", name)

    def _fail(self, *_: Any, **__: Any) -> Any:
        raise GroundTruthRead(f"the planner read task.{object.__getattribute__(self, '_name')}")

    __bool__ = __len__ = __iter__ = __getitem__ = __contains__ = __eq__ = _fail

    def __getattr__(self, item: str) -> Any:
        self._fail()

    def __repr__(self) -> str:
        return f"<guarded task.{object.__getattribute__(self, '_name')}>"


def guarded(task: Task) -> Task:
    return Task(task.task_id, task.instruction, task.family, goal=Guard("goal"), start_state=task.start_state,
                reference_plan=Guard("reference_plan"), metadata=Guard("metadata"))  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------ episodes
TABLETOP_SKILLS = ["pick the red block and place it on the blue bowl", "pick the red block and place it on the middle", "done"]
TABLETOP_TASK = Task("t/0", "Put the red block in the blue bowl.", "pick_and_place",
                     goal={"family": "pick_and_place", "blocks": ["red block"], "bowls": ["blue bowl"],
                           "pick": "red block", "target": "blue bowl"},
                     metadata={"subgoals": ["Red block is on the blue bowl."]})


@dataclass
class TabletopLikeState:
    blocks: list = field(default_factory=lambda: ["red block"])
    bowls: list = field(default_factory=lambda: ["blue bowl"])
    positions: dict = field(default_factory=lambda: {"red block": (0.4, 0.1, 0.02), "blue bowl": (0.5, -0.1, 0.0)})
    locations: dict = field(default_factory=lambda: {"middle": (0.45, 0.0)})
    detected: list = field(default_factory=lambda: ["red block", "blue bowl"])


def _play(planner: Any, task: Task, obs: Observation, execute: Any, steps: int) -> list[str]:
    """The planner's skills over at most ``steps`` decisions, each executed by ``execute(skill)``."""
    planner.reset(task, obs, seed=0)
    last, chosen = None, []
    for _ in range(steps):
        d = planner.next_step(obs, last)
        chosen.append(d.skill)
        if d.done:
            break
        last = execute(d.skill)
        obs = last.observation
    return chosen


def _toy_episode(planner: Any, task: Task, steps: int = 4) -> list[str]:
    env = ToyEnv()
    return _play(planner, task, env.reset(task, 0), env.execute, steps)


def _tabletop_episode(planner: Any, task: Task, steps: int = 3) -> list[str]:
    obs = Observation(skills=list(TABLETOP_SKILLS), state=TabletopLikeState())
    return _play(planner, task, obs, lambda skill: StepResult(False, "failure", obs), steps)


def _house_env() -> Any:
    from groundplan.envs import ENVS

    return ENVS.get("house")(houses_per_split=1, splits=["test"])


HOUSE_TASK = _house_env().tasks()[0]


def _house_episode(planner: Any, task: Task, steps: int = 4) -> list[str]:
    """The env reads the real task; the planner gets ``task`` (the guard in the clean cases)."""
    env = _house_env()
    obs = env.reset(HOUSE_TASK, 0)
    planner.reset(task, obs, seed=0)
    chosen = []
    for _ in range(steps):
        d = planner.next_step(obs, None)
        chosen.append(d.skill)
        if d.done:
            break
        obs = env.execute(d.skill).observation
    return chosen


TOY_TASK = ToyEnv().tasks()[0]
DEMOS = [("Bring coke", ["find a coke can", "pick up the coke can"])]
IM_THOUGHTS = ["I am not sure.", "Pick the red block and place it on the blue bowl.", "blah", "Robot ask: what next?",
               "Pick the red block and place it on the middle."] * 3


@dataclass
class Case:
    planner: str
    options: dict
    make_lm: Callable[[], FakeLM]
    episode: Callable[[Any, Task], list[str]]
    task: Task
    affordance: Callable[[], Any] | None = None
    oracles: tuple[str, ...] = ()


def _following() -> FakeLM:
    return FakeLM.following(list(ToyEnv.REFERENCE) + ["done"])


CASES: list[Case] = [
    Case("saycan", {}, _following, _toy_episode, TOY_TASK, ToyAffordance),
    Case("saycan", {}, _following, _toy_episode, TOY_TASK,
         lambda: __import__("groundplan.grounding.saycan", fromlist=["x"]).LanguageSimAffordance(),
         oracles=("reference-plan affordances",)),
    Case("saycan_novf", {}, _following, _toy_episode, TOY_TASK),
    Case("generative", {}, lambda: FakeLM(generations=["find a coke can", "pick up the coke", "done"]), _toy_episode, TOY_TASK),
    Case("zeroshot", {"demonstrations": DEMOS, "num_samples": 2},
         lambda: FakeLM(generations=["find a coke can", "pick up the coke can", ""]), _toy_episode, TOY_TASK),
    Case("zeroshot_vanilla", {"demonstrations": DEMOS, "num_samples": 2},
         lambda: FakeLM(generations=["find a coke can\nStep 2: pick up the coke can"]), _toy_episode, TOY_TASK),
    *[Case("inner_monologue", {"feedback": fb}, lambda: FakeLM(generations=IM_THOUGHTS), _tabletop_episode, TABLETOP_TASK)
      for fb in ([], ["success"], ["scene"], ["object", "scene"])],
    Case("inner_monologue", {"feedback": ["scene"], "subgoal_fallback": True}, lambda: FakeLM(generations=IM_THOUGHTS),
         _tabletop_episode, TABLETOP_TASK, oracles=("sub-goals",)),
    Case("inner_monologue", {"feedback": ["human"]}, lambda: FakeLM(generations=IM_THOUGHTS), _tabletop_episode,
         TABLETOP_TASK, oracles=("scripted human",)),
    Case("saynav", {"plan_mode": "score"}, FakeLM, _house_episode, HOUSE_TASK),
    Case("saycanpay", {"decoding": "greedy_token", "score": "say"},
         lambda: FakeLM(generations=["find a coke can\n", "pick up the coke can\n", "done\n"]), _toy_episode, TOY_TASK),
    Case("saycanpay", {"decoding": "greedy_token", "score": "say"},
         lambda: FakeLM(generations=["find a coke can\n", "pick up the coke can\n", "done\n"]), _toy_episode, TOY_TASK),
    Case("house_explore", {}, FakeLM, _house_episode, HOUSE_TASK),
    Case("house_oracle", {}, FakeLM, _house_episode, HOUSE_TASK, oracles=("target positions",)),
]


def _build(case: Case) -> Any:
    options = dict(case.options)
    demos = options.pop("demonstrations", None)
    kwargs = {"demonstrations": demos} if demos is not None else {}
    affordance = case.affordance() if case.affordance else None
    return PLANNERS.get(case.planner)(lm=case.make_lm(), affordance=affordance, **kwargs, **options)


def _id(case: Case) -> str:
    return f"{case.planner}-{case.options.get('feedback', '')}-{'oracle' if case.oracles else 'clean'}"


def test_every_registered_planner_has_a_case():
    assert set(PLANNERS.names()) <= {c.planner for c in CASES}, "add a case for the new planner"


@pytest.mark.parametrize("case", [c for c in CASES if not c.oracles], ids=_id)
def test_planners_without_an_oracle_never_read_ground_truth(case):
    planner = _build(case)
    assert planner.oracles == ()
    assert "oracle" not in planner.name
    chosen = case.episode(planner, guarded(case.task))
    assert chosen  # it planned


@pytest.mark.parametrize("case", [c for c in CASES if c.oracles], ids=_id)
def test_oracle_configurations_say_so(case):
    planner = _build(case)
    assert planner.oracles == case.oracles
    assert planner.name.endswith(f"(oracle {', '.join(case.oracles)})")
    assert labelled("+Scene", planner.oracles) == f"+Scene (oracle {', '.join(case.oracles)})"
    assert labelled(labelled("x", planner.oracles), planner.oracles) == labelled("x", planner.oracles)
    case.episode(_build(case), case.task)  # with real ground truth it runs


def test_the_guard_catches_a_leak():
    """The sub-goal oracle does read the task: with the guard in place it is caught."""
    case = next(c for c in CASES if c.oracles == ("sub-goals",))
    with pytest.raises(GroundTruthRead, match="task.metadata"):
        case.episode(_build(case), guarded(case.task))


def test_subgoal_fallback_is_off_by_default_and_recorded_when_on():
    from groundplan.planners.inner_monologue import (
        InnerMonologueConfig,
        make_inner_monologue,
    )

    assert InnerMonologueConfig().subgoal_fallback is False
    planner = make_inner_monologue(FakeLM(generations=IM_THOUGHTS), feedback=["scene"], subgoal_fallback=True)
    planner.reset(TABLETOP_TASK, Observation(skills=list(TABLETOP_SKILLS), state=TabletopLikeState()))
    d = planner.next_step(Observation(skills=list(TABLETOP_SKILLS), state=TabletopLikeState()), None)
    assert d.info["subgoals_source"] == "task" and d.info["oracles"] == ["sub-goals"]
    assert d.info["subgoals"] == ["Red block is on the blue bowl."]
    off = make_inner_monologue(FakeLM(generations=IM_THOUGHTS), feedback=["scene"])
    off.reset(guarded(TABLETOP_TASK), Observation(skills=list(TABLETOP_SKILLS), state=TabletopLikeState()))
    d = off.next_step(Observation(skills=list(TABLETOP_SKILLS), state=TabletopLikeState()), None)
    assert d.info["subgoals"] == [] and d.info["subgoals_source"] == "generated" and "oracles" not in d.info
