"""SayCanPay envs: each oracle reaches its goals, illegal actions fail with a reason, splits are
deterministic and disjoint (BabyAI, Tower of Hanoi, blocks in bowls, VirtualHome)."""
from __future__ import annotations

import pytest

from groundplan.envs import ENVS
from groundplan.envs.experts import EXPERTS
from groundplan.envs.splits import visible_signature


def solve(env, task, max_steps=30):
    """Run the registered expert; returns (plan, every step succeeded)."""
    expert = EXPERTS.get(env.name)(env)
    obs = env.reset(task, 0)
    plan, all_ok = [], True
    for _ in range(max_steps):
        a = expert.act(task, obs)
        plan.append(a)
        if a == env.done_skill:
            break
        r = env.execute(a)
        all_ok &= r.success
        obs = r.observation
    return plan, all_ok


# ------------------------------------------------------------------------------------ BabyAI
pytest.importorskip("minigrid")
SMALL = {"train_per_family": 3, "test_per_family": 2, "generalize_per_family": 2}


@pytest.mark.parametrize("split", ["train", "test", "test-generalize"])
def test_babyai_oracle_solves_every_family(split):
    env = ENVS.get("babyai")(split=split, **SMALL)
    tasks = env.tasks()
    assert {t.family for t in tasks} == {"pickup", "unlock_pickup", "blocked_unlock_pickup", "unlock_to_unlock"}
    for task in tasks:
        plan, ok = solve(env, task)
        assert ok and env.check_goal().success, (task.task_id, plan)
        assert plan[-1] == "done picking up"
        assert env.check_plan(task, 0, plan).success  # replay from the start state
        assert task.reference_plan == tuple(plan)  # the task carries the expert's plan (Table 4, Perfect-Say)


def test_babyai_text_and_skills():
    env = ENVS.get("babyai")(split="train", **SMALL)
    task = next(t for t in env.tasks() if t.family == "unlock_pickup")
    obs = env.reset(task, 0)
    assert obs.text.startswith("Room 1 has ") and "The " in obs.text and "door connecting Room 1 and Room 2 is locked" in obs.text
    assert "done picking up" in obs.skills and any(s.startswith("toggle ") for s in obs.skills)
    plan, _ = solve(env, task)
    assert plan[:3] == [plan[0], plan[1], "drop key in void"] and plan[0].startswith("pick up") and plan[0].endswith("key")


def test_babyai_infeasible_actions_fail_with_a_reason():
    env = ENVS.get("babyai")(split="train", **SMALL)
    task = next(t for t in env.tasks() if t.family == "unlock_pickup")
    obs = env.reset(task, 0)
    door = next(s for s in obs.skills if s.startswith("toggle "))
    before = dict(env.reset(task, 0).state)
    r = env.execute(door)  # locked, no key carried
    assert not r.success and "locked" in r.feedback and r.observation.state["agent_pos"] == before["agent_pos"]
    assert not env.execute("drop key in void").success  # carrying nothing
    r = env.execute("fly to the moon")
    assert not r.success and r.info["admissible"] is False
    key = next(s for s in obs.skills if s.startswith("pick up") and s.endswith("key"))
    assert env.execute(key).success
    ball = next((s for s in obs.skills if s.startswith("pick up") and s != key), None)
    if ball:
        r = env.execute(ball)
        assert not r.success and "already carries" in r.feedback
    assert not env.check_goal().success


def test_babyai_splits_deterministic_and_disjoint():
    envs = {s: ENVS.get("babyai")(split=s, **SMALL) for s in ("train", "test", "test-generalize")}
    a = {s: env.tasks() for s, env in envs.items()}
    b = ENVS.get("babyai")(split="test", **SMALL).tasks()
    assert [t.task_id for t in a["test"]] == [t.task_id for t in b]
    # disjoint in what the models read before acting (mission, first observation text), not only in layout
    sigs = {s: {visible_signature(t.instruction, envs[s].reset(t, 0).text) for t in ts}
            for s, ts in a.items()}
    assert not (sigs["train"] & sigs["test"]) and not (sigs["train"] & sigs["test-generalize"])
    ids = [t.task_id for ts in a.values() for t in ts]
    assert len(ids) == len(set(ids))


# ------------------------------------------------------------------------------------ Hanoi
def test_hanoi_solver_is_optimal():
    from groundplan.envs.tabletop.hanoi import legal_moves, solve as hsolve

    assert len(hsolve((0, 0, 0), {"kind": "tower", "rod": 2})) == 7
    assert len(hsolve((0, 0, 0, 0), {"kind": "tower", "rod": 1})) == 15
    assert len(hsolve((0, 0, 0), {"kind": "disk", "disk": 2, "rod": 1})) == 4  # move the largest: 3 + 1
    assert (1, 1) not in legal_moves((0, 0, 0))  # the middle disk is under the smallest


def test_hanoi_splits_deterministic_and_disjoint():
    pytest.importorskip("pybullet")
    from groundplan.envs.tabletop.hanoi import NOVEL_COLOURS, describe, split_tasks, start_stacks

    def seen(t):  # what the models read before acting: instruction, first observation text
        text = describe(t.start_state["colours"], start_stacks(tuple(t.start_state["rods"])))
        return visible_signature(t.instruction, text)

    train, test, gen = (split_tasks(s, 40, 40, 0.25) for s in ("train", "test", "test-generalize"))
    assert split_tasks("test", 40, 40, 0.25) == test
    assert not {seen(t) for t in train} & {seen(t) for t in test}
    assert all(len(t.start_state["colours"]) == 4 and set(t.start_state["colours"]) <= set(NOVEL_COLOURS) for t in gen)
    assert all(len(t.start_state["colours"]) == 3 for t in train + test)


def test_hanoi_oracle_and_illegal_moves_under_physics():
    pytest.importorskip("pybullet")
    env = ENVS.get("hanoi")(split="test", test_size=3, train_size=5)
    tower = next(t for t in env.tasks() if t.start_state["rods"].count(t.start_state["rods"][0]) == 3)
    env.reset(tower, 0)
    small, mid, big = tower.start_state["colours"]
    rod = tower.start_state["rods"][0] + 1
    other = 1 + (rod % 3)
    r = env.execute(f"put the {mid} disk in rod {other}")
    assert not r.success and "under the" in r.feedback
    assert not env.execute(f"put the {small} disk in rod {rod}").success  # already there
    assert env.execute(f"put the {small} disk in rod {other}").success
    r = env.execute(f"put the {mid} disk in rod {other}")
    assert not r.success and "smaller" in r.feedback
    assert env.stacks()[other - 1] == [0]
    task = env.tasks()[0]
    plan, ok = solve(env, task)
    assert ok and env.check_goal().success and len(plan) - 1 == len(task.reference_plan) - 1
    env.close()


# ------------------------------------------------------------------------------------ blocks in bowls
def test_blocks_bowls_oracle_illegal_and_splits():
    pytest.importorskip("pybullet")
    from groundplan.envs.tabletop.blocks_bowls import NOVEL_COLOURS, scene_text, split_tasks

    env = ENVS.get("blocks_bowls")(split="test", test_size=2, train_size=5)
    task = env.tasks()[0]
    obs = env.reset(task, 0)
    assert obs.text.startswith("There is a ") and not env.check_goal().success
    assert task.metadata["signature"] == visible_signature(task.instruction, obs.text)
    plan, ok = solve(env, task)
    assert ok and env.check_goal().success
    assert tuple(plan) == task.reference_plan  # the task carries the oracle's plan
    first = plan[0]
    r = env.execute(first)  # that block is in that bowl already
    assert not r.success and "already in" in r.feedback
    assert not env.execute("put the red bowl 1 in the green block 1").success
    env.close()
    def seen(t):  # what the models read before acting: instruction, first observation text (all on the table)
        text = scene_text(t.start_state["bowls"], t.start_state["blocks"], {})
        return visible_signature(t.instruction, text)

    train, test, gen = (split_tasks(s, 20, 20) for s in ("train", "test", "test-generalize"))
    assert not {seen(t) for t in train} & {seen(t) for t in test}
    assert all(b.split()[0] in NOVEL_COLOURS for t in gen for b in t.start_state["blocks"])


# ------------------------------------------------------------------------------------ VirtualHome
def test_virtualhome_reference_programs_and_splits():
    pytest.importorskip("virtualhome_eval")
    make = ENVS.get("virtualhome_scp")
    splits = {s: make(split=s).tasks() for s in ("train", "test", "test-generalize")}
    train_ids = {t.task_id for t in splits["train"]}
    assert not train_ids & {t.task_id for t in splits["test"]}
    assert not {t.family for t in splits["train"]} & {t.family for t in splits["test-generalize"]}  # unseen tasks
    env = make(split="train")
    task = splits["train"][0]
    obs = env.reset(task, 0)
    assert obs.text.startswith("The character is in the ")
    plan, ok = solve(env, task, max_steps=60)
    assert ok and env.check_goal().success and plan[:-1] == list(task.reference_plan)


def test_babyai_bot_lifted_or_oracle_fallback():
    from groundplan.envs.babyai.bot import BabyAIBotExpert, lifted_bot_plan

    env = ENVS.get("babyai")(split="train", **SMALL)
    tasks = {t.family: t for t in env.tasks()}
    plan = lifted_bot_plan(tasks["unlock_pickup"])
    assert plan[1].startswith("toggle ") and plan[2] == "drop key in void" and plan[-1] == "done picking up"
    expert = BabyAIBotExpert(env)
    for family, task in tasks.items():
        obs = env.reset(task, 0)
        for _ in range(30):
            a = expert.act(task, obs)
            if a == env.done_skill:
                break
            obs = env.execute(a).observation
        assert env.check_goal().success, family
        assert expert.source in ("babyai_bot", "babyai_oracle")


# ------------------------------------------------------------------------------------ symbolic models
@pytest.mark.parametrize("name", ["hanoi", "blocks_bowls"])
def test_symbolic_model_agrees_with_the_physics(name):
    """The rules the oracle Can checks (``Env.symbolic_model``) give the same verdict as the PyBullet
    execution, noise-free, on every step of random action sequences, and the same goal verdict."""
    pytest.importorskip("pybullet")
    import random

    env = ENVS.get(name)(split="test", test_size=3, train_size=5, place_noise_std=0.0)
    assert env.capabilities.symbolic_model
    rng = random.Random(0)
    verdicts = []
    for task in env.tasks()[:2]:
        rules = env.symbolic_model(task)
        obs, state = env.reset(task, 0), rules.initial()
        for _ in range(10):
            action = rng.choice([s for s in obs.skills if s != env.done_skill])
            result, after = env.execute(action), rules.step(state, action)
            verdicts.append(result.success)
            assert result.success == (after is not None), (task.task_id, action, result.feedback)
            state = after if after is not None else state
            obs = result.observation
            assert env.check_goal().success == rules.goal_holds(state)
        assert rules.step(state, "put the nothing in rod 9") is None
    env.close()
    assert any(verdicts) and not all(verdicts)  # both verdicts were exercised


def test_oracle_can_uses_the_declared_symbolic_model():
    pytest.importorskip("pybullet")
    from groundplan.core.errors import InvalidInputError
    from groundplan.grounding import AFFORDANCES

    oracle = AFFORDANCES.get("saycanpay_oracle")(env="hanoi", env_options={"test_size": 2, "train_size": 5})
    assert oracle.symbolic
    env = ENVS.get("hanoi")(split="test", test_size=2, train_size=5)
    task = env.tasks()[0]
    oracle.reset(task, 0)
    plan = list(task.reference_plan)
    items = [(plan[:t], plan[t]) for t in range(len(plan))] + [((), "done"), ((), plan[-2] if len(plan) > 2 else "x")]
    can = oracle.score_sequences(task.instruction, "", items).can
    assert list(can[: len(plan)]) == [1.0] * len(plan)  # the expert plan is feasible, done at its end too
    assert can[len(plan)] == 0.0  # done before the goal holds
    simulator = AFFORDANCES.get("saycanpay_oracle")(env="hanoi", feasibility="simulator",
                                                    env_options={"test_size": 2, "train_size": 5, "place_noise_std": 0.0})
    simulator.reset(task, 0)
    assert list(simulator.score_sequences(task.instruction, "", items).can) == list(can)
    with pytest.raises(InvalidInputError, match="no symbolic model"):
        AFFORDANCES.get("saycanpay_oracle")(env="kitchen", feasibility="symbolic")
    env.close()
