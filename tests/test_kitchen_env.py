"""The kitchen simulator: reference plans reach their goals, wrong plans do not, failures are
infeasible-with-a-reason or seeded noise at the configured rates, and config errors name the field."""
from __future__ import annotations

import pytest

from groundplan.core.errors import GroundplanError, InvalidInputError
from groundplan.envs import ENVS
from groundplan.envs.kitchen import KitchenEnv, task_by_id
from groundplan.envs.kitchen.tasks import fetch, move, throw
from groundplan.envs.kitchen.world import GRIPPER, OBJECT_BY_NAME, KitchenState

NOISELESS = dict(pick_failure_scale=0.0, nav_failure_prob=0.0, place_failure_prob=0.0)


def run_plan(env: KitchenEnv, task, seed: int, plan) -> list:
    env.reset(task, seed)
    return [env.execute(step) for step in plan]


# ------------------------------------------------------------------------- reference plans
@pytest.mark.parametrize("options", [dict(mode="language"), NOISELESS, dict(NOISELESS, robot_start="random")],
                         ids=["language", "physical-noiseless", "random-start"])
def test_every_reference_plan_passes_check_plan_and_executes_to_goal(options):
    env = KitchenEnv(**options)
    for task in env.tasks():
        for seed in (0, 1, 2):
            assert env.check_plan(task, seed, task.reference_plan).success, (task.task_id, seed)
            results = run_plan(env, task, seed, task.reference_plan)
            assert all(r.success for r in results), (task.task_id, seed, [r.feedback for r in results])
            goal = env.check_goal()
            assert goal.success, (task.task_id, seed, goal.unsatisfied)
            assert not goal.unsatisfied and goal.satisfied


def test_registered_under_kitchen():
    """The registered name builds the kitchen with its options applied: in language mode (no noise) the
    reference plan of a task reaches its goal on every seed, and a bad option is refused."""
    env = ENVS.get("kitchen")(mode="language")
    assert isinstance(env, KitchenEnv) and env.name == "kitchen"
    task = task_by_id("kitchen/nl_nouns/00")
    assert len(env.tasks()) == len(KitchenEnv().tasks()) and len(env.reset(task, 0).skills) == 51
    for seed in range(3):
        assert all(r.success for r in run_plan(env, task, seed, task.reference_plan))
        assert env.check_goal().success
    with pytest.raises(GroundplanError, match="mode"):
        ENVS.get("kitchen")(mode="telepathic")


# ----------------------------------------------------------------------------- wrong plans
@pytest.mark.parametrize("plan, missing", [
    (fetch("energy bar"), "apple delivered to the user"),               # wrong object
    (fetch("apple")[:3], "apple delivered to the user"),                # brought but never put down
    (throw("apple"), "apple delivered to the user"),                    # thrown away instead of delivered
    (move("apple", "table"), "apple delivered to the user"),            # left on the table
    ([], "apple delivered to the user"),                                # nothing at all
])
def test_wrong_plans_fail_the_goal(plan, missing):
    env = KitchenEnv(mode="language")
    task = task_by_id("kitchen/structured/02")  # "How would you bring me the apple?"
    assert "bring me the apple" in task.instruction
    result = env.check_plan(task, 0, list(plan) + ["done"])
    assert not result.success
    assert result.unsatisfied == [missing]


def test_category_goals_accept_any_member_and_count_distinct_objects():
    env = KitchenEnv(mode="language")
    soda = task_by_id("kitchen/nl_nouns/01")  # "bring me a soda"
    assert env.check_plan(soda, 4, fetch("grapefruit soda") + ["done"]).success
    assert not env.check_plan(soda, 4, fetch("redbull can") + ["done"]).success  # an energy drink, not a soda
    two = task_by_id("kitchen/long_horizon/00")  # "bring me two different sodas"
    assert not env.check_plan(two, 0, fetch("coke can") + ["done"]).success
    assert not env.check_plan(two, 0, fetch("coke can") + fetch("coke can") + ["done"]).success
    assert env.check_plan(two, 0, fetch("7up can") + fetch("lime soda") + ["done"]).success


def test_long_horizon_partial_plan_reports_which_clauses_hold():
    env = KitchenEnv(mode="language")
    task = task_by_id("kitchen/long_horizon/01")  # spilled coke: throw it away, bring something to clean
    result = env.check_plan(task, 0, throw("coke can") + ["done"])
    assert not result.success
    assert result.satisfied == ["coke can thrown away"]
    assert len(result.unsatisfied) == 1 and result.unsatisfied[0].startswith("any of:")
    assert env.check_plan(task, 0, throw("coke can") + fetch("paper towel") + ["done"]).success


# ------------------------------------------------------------------- infeasible and unknown
def test_infeasible_pick_fails_with_reason_and_leaves_state_unchanged():
    env = KitchenEnv(mode="language")
    task = task_by_id("kitchen/embodiment/00")  # coke can pinned on the table, robot at the user
    env.reset(task, 0)
    env.execute("go to the far counter")
    before = env.state
    result = env.execute("pick up the coke can")
    assert not result.success
    assert result.feedback == "cannot pick up the coke can: it is on the table and the robot is at the far counter"
    assert result.info["reason"] == "infeasible"
    assert env.state == before


@pytest.mark.parametrize("label, fragment", [
    ("put down the apple", "cannot put down the apple: the robot is not holding it"),
    ("bring it to you", "cannot bring it to you: the robot is not holding anything"),
])
def test_other_infeasible_skills_explain_why(label, fragment):
    env = KitchenEnv()
    env.reset(task_by_id("kitchen/nl_nouns/00"), 0)
    result = env.execute(label)
    assert not result.success and fragment in result.feedback


def test_cannot_pick_with_full_gripper_or_from_the_trash():
    env = KitchenEnv(mode="language")
    env.reset(task_by_id("kitchen/embodiment/10"), 0)  # robot at the trash can holding the sponge
    assert "already holding the sponge" in env.execute("pick up the apple").feedback
    assert env.execute("put down the sponge").success
    assert env.execute("pick up the sponge").feedback == (
        "cannot pick up the sponge: it has been thrown away in the trash can")


@pytest.mark.parametrize("label", ["pick up the unicorn", "pick up the coke", "pick up the coke can please",
                                   "", "go to the user", "find coke can"])
def test_unknown_label_is_a_failed_step_not_an_exception(label):
    env = KitchenEnv()
    env.reset(task_by_id("kitchen/nl_nouns/00"), 0)
    before = env.state
    result = env.execute(label)
    assert not result.success
    assert result.feedback.startswith("unknown skill") and result.info["reason"] == "unknown"
    assert env.state == before


def test_check_plan_skips_infeasible_steps_stops_at_done_and_leaves_episode_alone():
    env = KitchenEnv(mode="language")
    task = task_by_id("kitchen/structured/02")  # bring me the apple
    env.reset(task, 5)
    env.execute("go to the trash can")
    episode = env.state
    noisy_plan = ["pick up the apple", "bogus"] + fetch("apple") + ["done"]
    assert env.check_plan(task, 5, noisy_plan).success
    assert not env.check_plan(task, 5, ["done"] + fetch("apple")).success  # nothing after "done" counts
    assert env.state == episode


def test_execute_before_reset_raises():
    with pytest.raises(GroundplanError, match="reset"):
        KitchenEnv().execute("done")


def test_negative_seed_is_refused():
    with pytest.raises(InvalidInputError, match="seed"):
        KitchenEnv().reset(task_by_id("kitchen/nl_nouns/00"), -1)


# ------------------------------------------------------------------------- state and seeds
def test_start_state_pins_and_seeded_layouts():
    env = KitchenEnv()
    task = task_by_id("kitchen/embodiment/02")  # robot at the table holding the coke can
    state = env.reset(task, 0).state
    assert state.robot == "table" and state.holding == "coke can" and state.placement["coke can"] == GRIPPER
    layouts = {tuple(sorted(env.reset(task, s).state.placement.items())) for s in range(10)}
    assert len(layouts) > 1  # the other objects move with the seed
    assert env.reset(task, 3).state == env.reset(task, 3).state


def test_robot_start_option():
    task = task_by_id("kitchen/nl_nouns/00")
    assert {KitchenEnv().reset(task, s).state.robot for s in range(10)} == {"user"}
    assert len({KitchenEnv(robot_start="random").reset(task, s).state.robot for s in range(30)}) > 2


def test_observation_carries_all_skills_a_state_copy_and_a_description():
    env = KitchenEnv()
    obs = env.reset(task_by_id("kitchen/embodiment/02"), 0)
    assert obs.skills == env.skills and len(obs.skills) == 51
    assert isinstance(obs.state, KitchenState) and obs.state == env.state and obs.state is not env.state
    assert (obs.state.robot, obs.state.holding) == ("table", "coke can")
    obs.state.placement["coke can"] = "table"
    assert env.state.holding == "coke can"
    assert obs.text.startswith("The robot is at the table, holding the coke can.")


def test_delivery_and_history_are_recorded():
    env = KitchenEnv(mode="language")
    results = run_plan(env, task_by_id("kitchen/structured/02"), 0, fetch("apple"))
    assert results[-1].feedback == "handed the apple to the user"
    assert env.state.delivered == ["apple"] and env.state.history == fetch("apple")


# ------------------------------------------------------------------- noise: seeded and rated
def test_execution_is_reproducible_per_seed():
    task = task_by_id("kitchen/long_horizon/05")  # bring all three bags of chips: many picks
    env = KitchenEnv(pick_failure_scale=1.0, nav_failure_prob=0.3)

    def outcomes(seed):
        return [(r.success, r.feedback) for r in run_plan(env, task, seed, task.reference_plan * 2)]

    assert outcomes(7) == outcomes(7)
    assert any(outcomes(7) != outcomes(s) for s in range(8, 12))


def _rate(successes: list[bool]) -> float:
    return 1.0 - sum(successes) / len(successes)


def test_navigation_failures_happen_at_the_configured_rate():
    task = task_by_id("kitchen/nl_single_primitive/03")
    for prob, n in ((0.02, 4000), (0.3, 2000)):
        env = KitchenEnv(nav_failure_prob=prob)
        results = []
        for seed in range(n // 20):
            env.reset(task, seed)
            for _ in range(20):  # always somewhere else: going where the robot already is cannot fail
                target = "far counter" if env.state.robot == "table" else "table"
                results.append(env.execute(f"go to the {target}").success)
        assert abs(_rate(results) - prob) < 4 * (prob * (1 - prob) / n) ** 0.5 + 0.005


@pytest.mark.parametrize("scale", [1.0, 0.5])
def test_pick_succeeds_with_the_value_estimate(scale):
    task = task_by_id("kitchen/nl_single_primitive/01")  # robot at the apple, gripper empty
    env = KitchenEnv(pick_failure_scale=scale)
    picks = []
    for seed in range(1500):
        env.reset(task, seed)
        picks.append(env.execute("pick up the apple").success)
    expected_fail = scale * (1 - OBJECT_BY_NAME["apple"].grasp_value)
    assert abs(_rate(picks) - expected_fail) < 0.04


def test_place_failures_keep_the_object_in_the_gripper():
    task = task_by_id("kitchen/nl_single_primitive/00")  # robot at the table holding the coke can
    env = KitchenEnv(place_failure_prob=0.5)
    outcomes = []
    for seed in range(1000):
        env.reset(task, seed)
        result = env.execute("put down the coke can")
        outcomes.append(result.success)
        assert (env.state.placement["coke can"] == "table") == result.success
    assert abs(_rate(outcomes) - 0.5) < 0.06


def test_language_mode_never_fails_a_feasible_skill():
    env = KitchenEnv(mode="language", pick_failure_scale=1.0, nav_failure_prob=1.0, place_failure_prob=1.0)
    task = task_by_id("kitchen/long_horizon/05")
    for seed in range(20):
        assert all(r.success for r in run_plan(env, task, seed, task.reference_plan))


# ---------------------------------------------------------------------------------- config
@pytest.mark.parametrize("options, field", [
    (dict(bogus=1), "bogus"),
    (dict(nav_failure_prob=1.5), "nav_failure_prob"),
    (dict(mode="physics"), "mode"),
    (dict(pick_failure_scale=-1), "pick_failure_scale"),
    (dict(robot_start="kitchen"), "robot_start"),
])
def test_bad_config_field_raises_an_error_naming_it(options, field):
    with pytest.raises(InvalidInputError, match=f"'{field}'"):
        KitchenEnv(**options)


def test_default_affordance_matches_mode():
    assert KitchenEnv().default_affordance() == "kitchen_value"
    assert KitchenEnv(mode="language").default_affordance() == "kitchen_language_sim"
