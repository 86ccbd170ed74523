"""Affordances: SayCan App. C.1 calibration values, the kitchen's value affordance over states, and
the App. C.2 language-based simulator."""
from __future__ import annotations

import numpy as np
import pytest

from groundplan.core.errors import InvalidInputError
from groundplan.core.types import Observation, Task
from groundplan.envs.kitchen import KitchenEnv, task_by_id
from groundplan.envs.kitchen.skills import SKILLS
from groundplan.envs.kitchen.world import distance
from groundplan.grounding import AFFORDANCES
from groundplan.grounding.base import AffordanceSource
from groundplan.grounding.saycan import (
    DEFAULT_COMPLETED_CAP,
    PLACE_AFFORDANCE,
    TERMINATE_AFFORDANCE,
    KitchenValueAffordance,
    LanguageSimAffordance,
    cap_completed,
    distance_affordance,
    normalize_value,
)


# ------------------------------------------------------------------------ C.1 formulas
@pytest.mark.parametrize("v, p", [(0.35, 0.5), (0.1, 0.0), (0.2, 0.0), (0.5, 1.0), (0.6, 1.0), (0.26, 0.2)])
def test_pick_calibration(v, p):
    assert normalize_value(v) == pytest.approx(p)


@pytest.mark.parametrize("d, p", [(0.0, 1.0), (50.0, 0.5), (100.0, 0.0), (250.0, 0.0), (10.0, 0.9)])
def test_goto_calibration(d, p):
    assert distance_affordance(d) == pytest.approx(p)


def test_place_done_and_cap_constants():
    assert PLACE_AFFORDANCE == 1.0 and TERMINATE_AFFORDANCE == 0.1 and DEFAULT_COMPLETED_CAP == 0.05
    assert cap_completed(0.97) == 0.05 and cap_completed(0.01) == 0.01


def test_calibration_rejects_bad_input():
    with pytest.raises(ValueError):
        distance_affordance(-1.0)
    with pytest.raises(ValueError):
        normalize_value(0.3, v_min=0.5, v_max=0.2)


# ------------------------------------------------------------------ kitchen value affordance
def scores(affordance, obs: Observation) -> dict[str, float]:
    return dict(zip(obs.skills, affordance(obs, obs.skills, obs.state.history)))


@pytest.fixture
def env() -> KitchenEnv:
    return KitchenEnv(mode="language")


def test_registered_sources_satisfy_the_protocol_and_score_as_their_classes(env):
    """Each registered name builds a source that scores: its values on a known state (the value source) or
    a known step (the C.2 simulator), not only the protocol's method names."""
    value = AFFORDANCES.get("kitchen_value")()
    assert isinstance(value, AffordanceSource)
    obs = env.reset(task_by_id("kitchen/nl_single_primitive/01"), 0)  # at the close counter with the apple
    s = scores(value, obs)
    assert s["pick up the apple"] == 1.0 and s["pick up the coke can"] == 0.0 and s["done"] == pytest.approx(0.1)
    assert s == scores(KitchenValueAffordance(), obs)

    sim = AFFORDANCES.get("kitchen_language_sim")()
    assert isinstance(sim, AffordanceSource)
    task = task_by_id("kitchen/long_horizon/00")
    sim.reset(task, 11)
    p = sim(Observation(skills=list(SKILLS)), list(SKILLS), [])
    first = task.reference_plan[0]
    assert sim.last_target == first and p[SKILLS.index(first)] >= 0.8
    assert sum(v >= 0.8 for v in p) == 1 + len(sim.last_distractors)  # the target and its distractors only


def test_value_affordance_at_the_object_with_an_empty_gripper(env):
    obs = env.reset(task_by_id("kitchen/nl_single_primitive/01"), 0)  # robot at the close counter with the apple
    s = scores(KitchenValueAffordance(), obs)
    assert s["pick up the apple"] == 1.0  # every grasp value is ≥ 0.5 = v_max
    far = [o for o in env.state.placement if env.state.placement[o] != "close counter"]
    assert far and all(s[f"pick up the {o}"] == 0.0 for o in far)  # value 0.1 ≤ v_min
    assert s["go to the close counter"] == 0.05  # already there: capped
    assert s["find an apple"] == 0.05
    assert s["go to the table"] == pytest.approx(distance_affordance(distance("close counter", "table")))
    assert s["bring it to you"] == 0.05  # nothing to bring
    assert s["done"] == pytest.approx(0.1)
    assert all(s[f"put down the {o}"] == 1.0 for o in env.state.placement)  # C.1: place always possible
    assert set(s) == set(SKILLS) and all(0.0 <= p <= 1.0 for p in s.values())


def test_value_affordance_while_holding_and_after_completion(env):
    obs = env.reset(task_by_id("kitchen/embodiment/06"), 0)  # robot at the close counter holding the apple
    aff = KitchenValueAffordance(completed_cap=0.02)
    s = scores(aff, obs)
    assert s["pick up the apple"] <= 0.02  # already in hand: capped (and infeasible, so 0)
    assert s["bring it to you"] == pytest.approx(distance_affordance(distance("close counter", "user")))
    assert all(s[f"pick up the {o}"] == 0.0 for o in env.state.placement if o != "apple")  # gripper full
    env.execute("bring it to you")
    s = scores(aff, env.execute("put down the apple").observation)
    assert s["put down the apple"] == 0.02  # just done
    assert s["bring it to you"] == 0.02


def test_gripper_place_mode(env):
    obs = env.reset(task_by_id("kitchen/embodiment/06"), 0)
    s = scores(KitchenValueAffordance(place_affordance="gripper"), obs)
    assert s["put down the apple"] == 1.0 and s["put down the coke can"] == 0.0


def test_value_affordance_rejects_foreign_observations_and_bad_options():
    aff = KitchenValueAffordance()
    with pytest.raises(InvalidInputError, match="KitchenState"):
        aff(Observation(skills=["done"], state=None), ["done"], [])
    with pytest.raises(InvalidInputError, match="'completed_cap'"):
        KitchenValueAffordance(completed_cap=2)
    with pytest.raises(InvalidInputError, match="'nope'"):
        AFFORDANCES.get("kitchen_value")(nope=1)
    assert aff.score(KitchenEnv(mode="language").initial_state(task_by_id("kitchen/nl_nouns/00"), 0),
                     "pick up the coke") == 0.0


# ------------------------------------------------------------------ C.2 language simulator
def test_language_sim_ranks_the_next_solution_skill_first_among_non_distractors():
    task = task_by_id("kitchen/long_horizon/00")
    sim = LanguageSimAffordance(n_distractors=3)
    sim.reset(task, 11)
    history: list[str] = []
    obs = Observation(skills=list(SKILLS))
    for expected in task.reference_plan:
        p = sim(obs, obs.skills, history)
        assert sim.last_target == expected
        assert len(sim.last_distractors) == 3 and expected not in sim.last_distractors
        rest = [p[i] for i, s in enumerate(SKILLS) if s != expected and s not in sim.last_distractors]
        target = p[SKILLS.index(expected)]
        assert target >= 0.8 and target > max(rest) and max(rest) <= 0.1
        assert all(p[SKILLS.index(d)] >= 0.8 for d in sim.last_distractors)
        history.append(expected)
    sim(obs, obs.skills, history)
    assert sim.last_target == "done"


def test_language_sim_is_seeded():
    task = task_by_id("kitchen/nl_nouns/00")
    obs = Observation(skills=list(SKILLS))

    def draw(seed, history=()):
        sim = LanguageSimAffordance()
        sim.reset(task, seed)
        return sim(obs, obs.skills, list(history))

    np.testing.assert_array_equal(draw(3), draw(3))
    assert not np.array_equal(draw(3), draw(4))
    assert not np.array_equal(draw(3), draw(3, ["find an apple"]))  # fresh distractors each step


def test_language_sim_keeps_its_place_after_a_detour():
    task = task_by_id("kitchen/structured/02")  # bring me the apple
    sim = LanguageSimAffordance()
    sim.reset(task, 0)
    assert sim.next_solution_skill(["find an apple", "go to the table", "pick up the apple"]) == "bring it to you"


def test_greedy_planner_recovers_the_reference_plan_in_the_language_env():
    """With no distractors, following the affordance argmax replays the solution (C.2's check)."""
    env = KitchenEnv(mode="language")
    sim = AFFORDANCES.get("kitchen_language_sim")(n_distractors=0)
    for task in env.tasks(["long_horizon", "embodiment"]):
        obs = env.reset(task, 2)
        sim.reset(task, 2)
        history: list[str] = []
        while not history or history[-1] != "done":
            skill = obs.skills[int(np.argmax(sim(obs, obs.skills, history)))]
            obs = env.execute(skill).observation
            history.append(skill)
        assert tuple(history) == task.reference_plan and env.check_goal().success


def test_language_sim_needs_a_reference_plan_and_valid_options():
    with pytest.raises(InvalidInputError, match="reference plan"):
        LanguageSimAffordance().reset(Task("t", "do it", "x", goal=()), 0)
    with pytest.raises(InvalidInputError, match="n_distractors"):
        LanguageSimAffordance(n_distractors=-1)
    with pytest.raises(InvalidInputError):
        LanguageSimAffordance(low_max=0.9)
