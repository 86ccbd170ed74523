"""Tabletop env (PyBullet, Panda): real physics pick-and-place, isolation, task checkers."""
from __future__ import annotations

import math

import pytest

pytest.importorskip("pybullet")

import pybullet as pb  # noqa: E402

from groundplan.core.errors import InvalidInputError  # noqa: E402
from groundplan.core.types import Task  # noqa: E402
from groundplan.envs.tabletop import tasks as T  # noqa: E402
from groundplan.envs.tabletop.env import TabletopEnv  # noqa: E402
from groundplan.envs.tabletop.world import BLOCK_HALF, LOCATIONS  # noqa: E402

QUIET = dict(pick_noise_std=0.0, place_noise_std=0.0, disturbance_prob=0.0, cameras=["top"], image_width=80, image_height=60)


def _task(family: str, i: int = 0) -> Task:
    return T.make_task(family, i)


def test_pick_and_place_moves_block_by_physics_without_teleport(monkeypatch):
    env = TabletopEnv(**QUIET)
    task = _task("put_blocks_on_location")
    env.reset(task, seed=0)
    calls = []
    real = pb.resetBasePositionAndOrientation
    monkeypatch.setattr(pb, "resetBasePositionAndOrientation", lambda *a, **k: calls.append(a) or real(*a, **k))
    block = task.goal["blocks"][0]
    target = task.goal["target"]
    before = env.state.positions[block]
    trajectory = []
    step = env.world.step
    monkeypatch.setattr(env.world, "step", lambda n=1: (step(n), trajectory.append(env.world.position(block))))
    result = env.execute(f"pick the {block} and place it on the {target}")
    after = env.state.positions[block]
    assert calls == []  # nothing teleported after the layout
    assert result.info["grasped"]
    assert math.dist(before[:2], after[:2]) > 0.05
    assert math.dist(after[:2], LOCATIONS[target]) < 0.03  # within a few cm of the target (no noise)
    assert abs(after[2] - BLOCK_HALF) < 0.005  # resting on the table
    # the pose changed gradually under physics: many small displacements, lifted in between
    moves = [math.dist(a, b) for a, b in zip(trajectory, trajectory[1:])]
    assert len(trajectory) > 200 and max(moves) < 0.02 and max(p[2] for p in trajectory) > 0.1
    assert result.success and env.check_goal().satisfied


def test_two_envs_side_by_side_do_not_interfere():
    a, b = TabletopEnv(**QUIET), TabletopEnv(**QUIET)
    assert a.world.cid != b.world.cid
    ta, tb = _task("stack_all_blocks", 0), _task("put_blocks_in_bowl", 0)
    a.reset(ta, 0)
    b.reset(tb, 0)
    b_before = dict(b.state.positions)
    x, y = ta.goal["blocks"][:2]
    ra = a.execute(f"pick the {y} and place it on the {x}")
    assert ra.info["grasped"]
    b.world.step(1)
    assert all(math.dist(b.world.position(n), p) < 1e-3 for n, p in b_before.items())
    assert a.check_goal().success == (len(ta.goal["blocks"]) == 2)


def test_inadmissible_and_done_do_not_move_anything():
    env = TabletopEnv(**QUIET)
    env.reset(_task("pick_and_place"), 0)
    before = dict(env.state.positions)
    r = env.execute("juggle the bowls")
    assert not r.success and "not an admissible" in r.feedback
    assert env.execute("done").success
    assert env.state.positions == before


def test_config_errors_name_the_field():
    with pytest.raises(InvalidInputError, match="place_noise_std"):
        TabletopEnv(place_noise_std=-1)
    with pytest.raises(InvalidInputError, match="unknown option 'nosie'"):
        TabletopEnv(nosie=0.1)


def test_task_set_is_fixed_and_seeded():
    env_tasks = T.tasks_for(per_family=3)
    assert len(env_tasks) == 24 and len({t.family for t in env_tasks}) == 8
    assert [t.task_id for t in env_tasks][:2] == ["tabletop/pick_and_place/00", "tabletop/pick_and_place/01"]
    again = T.tasks_for(per_family=3)
    assert [(t.instruction, t.start_state) for t in env_tasks] == [(t.instruction, t.start_state) for t in again]
    for t in env_tasks:
        xy = list(t.start_state["xy"].values())
        assert all(math.dist(p, q) >= 0.15 for i, p in enumerate(xy) for q in xy[i + 1:])
        assert len(t.goal["blocks"]) <= 4 and len(t.goal["bowls"]) <= 3


# ---------------------------------------------------------------------------- checkers on hand-built states
def _on_table(xy):
    return (xy[0], xy[1], BLOCK_HALF)


def _above(p, k=1):
    return (p[0], p[1], p[2] + 2 * BLOCK_HALF * k)


TL, TR, BL, BR = (LOCATIONS[c] for c in ("top left corner", "top right corner", "bottom left corner", "bottom right corner"))
BOWL_R, BOWL_G, BOWL_B = (0.45, 0.2, 0.0), (0.45, -0.2, 0.0), (0.3, 0.0, 0.0)


def _goal(family, blocks, bowls=(), **kw):
    return {"family": family, "blocks": list(blocks), "bowls": list(bowls), **kw}


CASES = [
    ("pick_and_place", _goal("pick_and_place", ["red block", "blue block"], ["green bowl"], pick="red block", target="green bowl"),
     {"red block": (0.46, 0.21, 0.03), "blue block": _on_table(TL), "green bowl": BOWL_R},
     {"red block": _on_table((0.6, 0.0)), "blue block": _on_table(TL), "green bowl": BOWL_R}),
    ("stack_all_blocks", _goal("stack_all_blocks", ["red block", "blue block", "green block"]),
     {"red block": _on_table(TL), "blue block": _above(_on_table(TL)), "green block": _above(_on_table(TL), 2)},
     {"red block": _on_table(TL), "blue block": _above(_on_table(TL)), "green block": _on_table(BR)}),
    ("put_blocks_on_location", _goal("put_blocks_on_location", ["red block", "blue block"], target="top left corner"),
     {"red block": _on_table(TL), "blue block": _on_table((TL[0] - 0.05, TL[1]))},
     {"red block": _on_table(TL), "blue block": _on_table(BR)}),
    ("put_blocks_in_bowl", _goal("put_blocks_in_bowl", ["red block", "blue block"], ["green bowl"], target="green bowl"),
     {"red block": (0.45, 0.2, 0.03), "blue block": (0.47, 0.18, 0.07), "green bowl": BOWL_R},
     {"red block": (0.45, 0.2, 0.03), "blue block": _on_table(BR), "green bowl": BOWL_R}),
    ("put_blocks_in_different_corners", _goal("put_blocks_in_different_corners", ["red block", "blue block", "green block"]),
     {"red block": _on_table(TL), "blue block": _on_table(TR), "green block": _on_table(BL)},
     {"red block": _on_table(TL), "blue block": _on_table(TR), "green block": _above(_on_table(TL))}),
    ("put_blocks_in_matching_bowls", _goal("put_blocks_in_matching_bowls", ["red block", "green block"], ["red bowl", "green bowl"]),
     {"red block": (0.45, 0.2, 0.03), "green block": (0.45, -0.2, 0.03), "red bowl": BOWL_R, "green bowl": BOWL_G},
     {"red block": (0.45, -0.2, 0.03), "green block": (0.45, 0.2, 0.03), "red bowl": BOWL_R, "green bowl": BOWL_G}),
    ("put_blocks_on_mismatched_bowls", _goal("put_blocks_on_mismatched_bowls", ["red block", "green block"], ["red bowl", "green bowl"]),
     {"red block": (0.45, -0.2, 0.03), "green block": (0.45, 0.2, 0.03), "red bowl": BOWL_R, "green bowl": BOWL_G},
     {"red block": (0.45, 0.2, 0.03), "green block": (0.45, 0.2, 0.07), "red bowl": BOWL_R, "green bowl": BOWL_G}),
    ("stack_blocks_on_location", _goal("stack_blocks_on_location", ["red block", "blue block"], target="bottom left corner"),
     {"red block": _on_table(BL), "blue block": _above(_on_table(BL))},
     {"red block": _on_table(TL), "blue block": _above(_on_table(TL))}),
]


@pytest.mark.parametrize("family,goal,good,bad", CASES, ids=[c[0] for c in CASES])
def test_task_checkers_true_and_false(family, goal, good, bad):
    assert family in T.FAMILIES
    ok = T.check(goal, good)
    assert ok.success and not ok.unsatisfied, ok
    no = T.check(goal, bad)
    assert not no.success and no.unsatisfied, no


def test_all_families_covered_by_checker_cases():
    assert {c[0] for c in CASES} == set(T.FAMILIES)
