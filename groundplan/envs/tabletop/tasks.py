"""Inner Monologue's 8 simulated tabletop task families (Sec. 4.1, Table 1) and their ground-truth checkers.

Seen: ``pick_and_place``, ``stack_all_blocks``, ``put_blocks_on_location`` (the [x] corner/side),
``put_blocks_in_bowl``. Unseen: ``put_blocks_in_different_corners``, ``put_blocks_in_matching_bowls``,
``put_blocks_on_mismatched_bowls``, ``stack_blocks_on_location``.

A task's ``goal`` is a plain dict ``{"family", "blocks", "bowls", "target"?, "pick"?}``; checkers read
object positions only (``name → (x, y, z)``), so they are tested on hand-built states. Geometry
(configurable through the env config, defaults below):

* "X on block Y": 2-D distance < ``stack_radius`` (3 cm: the centre over the 4 cm block) and X higher
  than Y by at least half a block;
* "X in bowl B": 2-D distance < the bowl's inner radius (7.5 cm) and X below the bowl's rim;
* "X on location L": 2-D distance < ``location_radius`` (10 cm) of the location's point;
* a stack: the blocks sorted by height each sit on the one below, the lowest on the table.

The scene description / success feedback the planner gets uses IM's 4 cm success detector instead
(:mod:`groundplan.perception.success_detector`); the checkers here are the episode's reward.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from groundplan.core.types import GoalResult, Task
from groundplan.envs.tabletop.world import (
    BLOCK_HALF,
    BOWL_FLOOR,
    BOWL_RADIUS,
    BOWL_WALL_HEIGHT,
    COLOUR_NAMES,
    CORNERS,
    LOCATIONS,
    SIDES,
    Layout,
    block_name,
    bowl_name,
    sample_layout,
)
from groundplan.perception.scene_description import subgoal_text

SEEN: tuple[str, ...] = ("pick_and_place", "stack_all_blocks", "put_blocks_on_location", "put_blocks_in_bowl")
UNSEEN: tuple[str, ...] = (
    "put_blocks_in_different_corners",
    "put_blocks_in_matching_bowls",
    "put_blocks_on_mismatched_bowls",
    "stack_blocks_on_location",
)
FAMILIES: tuple[str, ...] = SEEN + UNSEEN
CORNERS_AND_SIDES: tuple[str, ...] = CORNERS + SIDES

Positions = Mapping[str, Sequence[float]]


@dataclass(frozen=True)
class Geometry:
    stack_radius: float = 0.03
    location_radius: float = 0.10
    bowl_radius: float = BOWL_RADIUS


# ------------------------------------------------------------------------------------ relations
def on_block(p: Sequence[float], q: Sequence[float], geo: Geometry = Geometry()) -> bool:
    return math.dist(p[:2], q[:2]) < geo.stack_radius and p[2] - q[2] > BLOCK_HALF


def in_bowl(p: Sequence[float], bowl: Sequence[float], geo: Geometry = Geometry()) -> bool:
    return math.dist(p[:2], bowl[:2]) < geo.bowl_radius and p[2] - bowl[2] < BOWL_FLOOR + BOWL_WALL_HEIGHT + 4 * BLOCK_HALF


def at_location(p: Sequence[float], location: str, geo: Geometry = Geometry()) -> bool:
    return math.dist(p[:2], LOCATIONS[location]) < geo.location_radius


def on_table(p: Sequence[float]) -> bool:
    return p[2] < BLOCK_HALF * 1.5


def is_stack(blocks: Sequence[str], pos: Positions, geo: Geometry = Geometry()) -> bool:
    order = sorted(blocks, key=lambda b: pos[b][2])
    if not order or not on_table(pos[order[0]]):
        return False
    return all(on_block(pos[a], pos[b], geo) for b, a in zip(order, order[1:]))


def placed(obj: str, target: str, pos: Positions, geo: Geometry = Geometry()) -> bool:
    """``obj`` on ``target`` by the ground-truth geometry (block, bowl or location)."""
    if target in LOCATIONS:
        return at_location(pos[obj], target, geo)
    if target.endswith(" bowl"):
        return in_bowl(pos[obj], pos[target], geo)
    return on_block(pos[obj], pos[target], geo)


# ------------------------------------------------------------------------------------ checking
def check(goal: Mapping[str, Any], pos: Positions, geo: Geometry = Geometry()) -> GoalResult:
    """Ground-truth reward of a task family on object positions."""
    fam = goal["family"]
    blocks: list[str] = list(goal["blocks"])
    bowls: list[str] = list(goal.get("bowls", ()))
    sat: list[str] = []
    unsat: list[str] = []

    def note(ok: bool, text: str) -> None:
        (sat if ok else unsat).append(text)

    if fam == "pick_and_place":
        note(placed(goal["pick"], goal["target"], pos, geo), subgoal_text(goal["pick"], goal["target"]))
    elif fam in ("put_blocks_on_location", "put_blocks_in_bowl"):
        for b in blocks:
            note(placed(b, goal["target"], pos, geo), subgoal_text(b, goal["target"]))
    elif fam in ("stack_all_blocks", "stack_blocks_on_location"):
        note(is_stack(blocks, pos, geo), "all the blocks are in one stack")
        if fam == "stack_blocks_on_location":
            lowest = min(blocks, key=lambda b: pos[b][2])
            note(at_location(pos[lowest], goal["target"], geo), f"the stack is on the {goal['target']}")
    elif fam == "put_blocks_in_different_corners":
        corners = {}
        for b in blocks:
            c = next((c for c in CORNERS if at_location(pos[b], c, geo)), None)
            note(c is not None, f"{b} is on a corner")
            if c is not None:
                corners.setdefault(c, []).append(b)
        note(all(len(v) == 1 for v in corners.values()), "no two blocks share a corner")
    elif fam == "put_blocks_in_matching_bowls":
        for b in blocks:
            bowl = bowl_name(b.split()[0])
            note(bowl in pos and in_bowl(pos[b], pos[bowl], geo), subgoal_text(b, bowl))
    elif fam == "put_blocks_on_mismatched_bowls":
        for b in blocks:
            inside = [w for w in bowls if in_bowl(pos[b], pos[w], geo)]
            ok = bool(inside) and all(w.split()[0] != b.split()[0] for w in inside)
            note(ok, f"{b} is in a bowl of another colour")
    else:
        raise ValueError(f"unknown tabletop task family '{fam}'")
    return GoalResult(success=not unsat, satisfied=sat, unsatisfied=unsat)


def reference_subgoals(goal: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Ground-truth (object, target) sub-goals in IM's "[x] is on [y]" form, used by the scripted human
    and as the scene-description fallback. Families whose goal is not a fixed list (different corners,
    mismatched bowls) get one valid assignment."""
    fam, blocks, bowls = goal["family"], list(goal["blocks"]), list(goal.get("bowls", ()))
    if fam == "pick_and_place":
        return [(goal["pick"], goal["target"])]
    if fam in ("put_blocks_on_location", "put_blocks_in_bowl"):
        return [(b, goal["target"]) for b in blocks]
    if fam == "stack_all_blocks":
        return [(a, b) for b, a in zip(blocks, blocks[1:])]
    if fam == "stack_blocks_on_location":
        return [(blocks[0], goal["target"])] + [(a, b) for b, a in zip(blocks, blocks[1:])]
    if fam == "put_blocks_in_different_corners":
        return list(zip(blocks, CORNERS))
    if fam == "put_blocks_in_matching_bowls":
        return [(b, bowl_name(b.split()[0])) for b in blocks]
    if fam == "put_blocks_on_mismatched_bowls":
        return [(b, next(w for w in bowls if w.split()[0] != b.split()[0])) for b in blocks]
    raise ValueError(f"unknown tabletop task family '{fam}'")


# ------------------------------------------------------------------------------------ task set
def _scene_for(fam: str, rng: np.random.Generator) -> tuple[dict[str, Any], str, Layout]:
    """(goal, instruction, layout) for one seeded task of ``fam``."""
    colours = list(rng.permutation(COLOUR_NAMES))
    if fam == "put_blocks_in_matching_bowls":
        n_blocks = int(rng.integers(2, 4))
        block_c = colours[:n_blocks]
        bowl_c = list(block_c) + colours[n_blocks:n_blocks + (3 - n_blocks) * int(rng.integers(0, 2))]
        bowl_c = list(rng.permutation(bowl_c))
    elif fam == "put_blocks_on_mismatched_bowls":
        n_blocks = int(rng.integers(2, 4))
        block_c = colours[:n_blocks]
        bowl_c = list(rng.permutation(list(block_c[:2]) + [colours[n_blocks]]))[: int(rng.integers(2, 4))]
    elif fam in ("put_blocks_in_different_corners",):
        n_blocks = int(rng.integers(2, 5))
        block_c, bowl_c = colours[:n_blocks], colours[n_blocks:n_blocks + int(rng.integers(0, 2))]
    elif fam in ("stack_all_blocks", "stack_blocks_on_location"):
        n_blocks = int(rng.integers(2, 5))
        block_c, bowl_c = colours[:n_blocks], colours[n_blocks:n_blocks + int(rng.integers(0, 3))]
    elif fam == "put_blocks_in_bowl":
        n_blocks = int(rng.integers(2, 4))
        block_c, bowl_c = colours[:n_blocks], colours[n_blocks:n_blocks + int(rng.integers(1, 4))]
    else:  # pick_and_place, put_blocks_on_location
        n_blocks = int(rng.integers(2, 5))
        block_c = colours[:n_blocks]
        bowl_c = colours[n_blocks:n_blocks + int(rng.integers(1 if fam == "pick_and_place" else 0, 4))]
    layout = sample_layout(rng, len(block_c), len(bowl_c), block_c, bowl_c)
    blocks, bowls = list(layout.blocks), list(layout.bowls)
    goal: dict[str, Any] = {"family": fam, "blocks": blocks, "bowls": bowls}
    if fam == "pick_and_place":
        pick = blocks[int(rng.integers(len(blocks)))]
        targets = [b for b in blocks if b != pick] + bowls
        goal.update(pick=pick, target=str(targets[int(rng.integers(len(targets)))]))
        instruction = f"Pick up the {pick} and place it on the {goal['target']}."
    elif fam == "stack_all_blocks":
        instruction = "Stack all the blocks."
    elif fam == "put_blocks_on_location":
        goal["target"] = str(CORNERS_AND_SIDES[int(rng.integers(len(CORNERS_AND_SIDES)))])
        instruction = f"Put all the blocks on the {goal['target']}."
    elif fam == "put_blocks_in_bowl":
        goal["target"] = str(bowls[int(rng.integers(len(bowls)))])
        instruction = f"Put all the blocks in the {goal['target']}."
    elif fam == "put_blocks_in_different_corners":
        instruction = "Put the blocks in different corners."
    elif fam == "put_blocks_in_matching_bowls":
        instruction = "Put the blocks in their matching bowls."
    elif fam == "put_blocks_on_mismatched_bowls":
        instruction = "Put the blocks on mismatched bowls."
    elif fam == "stack_blocks_on_location":
        goal["target"] = str(CORNERS_AND_SIDES[int(rng.integers(len(CORNERS_AND_SIDES)))])
        instruction = f"Stack all the blocks on the {goal['target']}."
    else:
        raise ValueError(f"unknown tabletop task family '{fam}'")
    return goal, instruction, layout


def layout_seed(family: str, index: int) -> int:
    return 10_000 * (FAMILIES.index(family) + 1) + index


def make_task(family: str, index: int) -> Task:
    """Task ``index`` of ``family``: ``task_id="tabletop/<family>/<index:02d>"``; ``start_state`` pins the
    layout (``layout_seed``, plus the layout itself for inspection)."""
    seed = layout_seed(family, index)
    goal, instruction, layout = _scene_for(family, np.random.default_rng(seed))
    subgoals = [subgoal_text(o, t) for o, t in reference_subgoals(goal)]
    return Task(
        task_id=f"tabletop/{family}/{index:02d}",
        instruction=instruction,
        family=family,
        goal=goal,
        start_state={"layout_seed": seed, "blocks": list(layout.blocks), "bowls": list(layout.bowls),
                     "xy": {k: list(v) for k, v in layout.xy.items()}},
        metadata={"split": "seen" if family in SEEN else "unseen", "subgoals": subgoals},
    )


def layout_of(task: Task) -> Layout:
    s = task.start_state or {}
    if "xy" in s:
        return Layout(tuple(s["blocks"]), tuple(s["bowls"]), {k: (float(v[0]), float(v[1])) for k, v in s["xy"].items()})
    _, _, layout = _scene_for(task.family, np.random.default_rng(int(s["layout_seed"])))
    return layout


def tasks_for(families: Sequence[str] | None = None, per_family: int = 10) -> list[Task]:
    fams = list(FAMILIES) if families is None else [f for f in FAMILIES if f in families]
    return [make_task(f, i) for f in fams for i in range(per_family)]


__all__ = ["FAMILIES", "SEEN", "UNSEEN", "Geometry", "check", "reference_subgoals", "make_task", "tasks_for",
           "layout_of", "placed", "is_stack", "block_name"]
