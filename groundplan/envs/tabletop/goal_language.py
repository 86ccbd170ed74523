"""The tabletop's goal language for task files (docs/tasks.md): a task name and its parameters.

A goal names one of Inner Monologue's 8 task families (Sec. 4.1) with the parameters it needs::

    goal: {task: pick_and_place, pick: red block, target: blue bowl}
    goal: {task: put_blocks_in_bowl, target: green bowl}
    goal: {task: stack_blocks_on_location, target: top left corner}
    goal: {task: put_blocks_in_matching_bowls}

and optionally ``blocks: [...]``, the blocks the goal is about (default: every block of the scene).
The scene is the task's ``start_state`` (required here): ``blocks`` and ``bowls`` by colour or name,
with ``xy`` positions or a ``layout_seed`` that places them 15 cm apart (:func:`sample_layout`).
Parsing gives the goal dict :func:`groundplan.envs.tabletop.tasks.check` reads.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from groundplan.envs.base import TaskSpecError
from groundplan.envs.tabletop.skills import DONE, parse_skill, skill_label
from groundplan.envs.tabletop.tasks import FAMILIES, reference_subgoals
from groundplan.envs.tabletop.world import (
    COLOUR_NAMES,
    LOCATIONS,
    MAX_BLOCKS,
    MAX_BOWLS,
    X_RANGE,
    Y_RANGE,
    block_name,
    bowl_name,
    sample_layout,
)
from groundplan.perception.scene_description import subgoal_text

#: family → {parameter: what it must name}; "object": a block or bowl of the scene
PARAMETERS: dict[str, dict[str, str]] = {
    "pick_and_place": {"pick": "block", "target": "block, bowl or location"},
    "stack_all_blocks": {},
    "put_blocks_on_location": {"target": "location"},
    "put_blocks_in_bowl": {"target": "bowl"},
    "put_blocks_in_different_corners": {},
    "put_blocks_in_matching_bowls": {},
    "put_blocks_on_mismatched_bowls": {},
    "stack_blocks_on_location": {"target": "location"},
}
assert set(PARAMETERS) == set(FAMILIES)


def _names(data: Any, kind: str, make: Any, limit: int) -> list[str]:
    if not isinstance(data, (list, tuple)):
        raise TaskSpecError(f"start_state.{kind} must be a list of colours or names", (kind,))
    out = []
    for i, item in enumerate(data):
        text = str(item).strip().lower()
        suffix = " " + kind[:-1]  # " block", " bowl"
        colour = text[: -len(suffix)].strip() if text.endswith(suffix) else text
        if colour not in COLOUR_NAMES:
            raise TaskSpecError(f"start_state.{kind}: unknown colour '{colour}'; valid: {', '.join(COLOUR_NAMES)}",
                                (kind, i))
        out.append(make(colour))
    if len(set(out)) != len(out):
        raise TaskSpecError(f"start_state.{kind} repeats an object: {out}", (kind,))
    if len(out) > limit:
        raise TaskSpecError(f"start_state.{kind}: at most {limit}, got {len(out)}", (kind,))
    return out


def parse_start_state(data: Any) -> dict[str, Any]:
    """``{blocks, bowls, xy?, layout_seed?}`` → the start state the env's reset reads (always with xy)."""
    if data is None:
        raise TaskSpecError("a tabletop task needs start_state: {blocks: [...], bowls: [...]} (the scene)")
    if not isinstance(data, Mapping):
        raise TaskSpecError("start_state must be a mapping with blocks, bowls and optionally xy or layout_seed")
    unknown = set(data) - {"blocks", "bowls", "xy", "layout_seed"}
    if unknown:
        raise TaskSpecError(f"unknown start_state key(s) {sorted(unknown)}; valid: blocks, bowls, xy, layout_seed",
                            (min(unknown),))
    blocks = _names(data.get("blocks", []), "blocks", block_name, MAX_BLOCKS)
    bowls = _names(data.get("bowls", []), "bowls", bowl_name, MAX_BOWLS)
    if not blocks:
        raise TaskSpecError("start_state.blocks needs at least one block", ("blocks",))
    seed = data.get("layout_seed", 0)
    if isinstance(seed, float) and seed.is_integer():  # JSON's integer 3.0, as the schema allows
        seed = int(seed)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise TaskSpecError(f"layout_seed must be a non-negative integer, got {seed!r}", ("layout_seed",))
    if "xy" in data:
        xy_data = data["xy"]
        if not isinstance(xy_data, Mapping) or set(xy_data) != set(blocks) | set(bowls):
            raise TaskSpecError(f"start_state.xy must give [x, y] for exactly {blocks + bowls}", ("xy",))
        xy: dict[str, list[float]] = {}
        for name, point in xy_data.items():
            ok = isinstance(point, (list, tuple)) and len(point) == 2 and all(isinstance(v, (int, float)) for v in point)
            if not ok or not (X_RANGE[0] <= point[0] <= X_RANGE[1] and Y_RANGE[0] <= point[1] <= Y_RANGE[1]):
                raise TaskSpecError(f"start_state.xy['{name}'] must be [x, y] with x in {X_RANGE}, y in {Y_RANGE} "
                                    f"(metres), got {point!r}", ("xy", name))
            xy[name] = [float(point[0]), float(point[1])]
        names = list(xy)
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                if math.dist(xy[a], xy[b]) < 0.06:
                    raise TaskSpecError(f"start_state.xy: {a} and {b} overlap (closer than 6 cm)", ("xy", b))
    else:
        try:
            layout = sample_layout(np.random.default_rng(seed), len(blocks), len(bowls),
                                   [b.split()[0] for b in blocks], [b.split()[0] for b in bowls])
        except (ValueError, RuntimeError) as exc:
            raise TaskSpecError(f"start_state: {exc}") from None
        xy = {k: [float(v[0]), float(v[1])] for k, v in layout.xy.items()}
    return {"layout_seed": seed, "blocks": blocks, "bowls": bowls, "xy": xy}


def parse_goal(data: Any, start_state: Mapping[str, Any] | None) -> dict[str, Any]:
    """``{task: <family>, <parameter>: <object or location>, blocks?: [...]}`` → the env's goal dict."""
    if not isinstance(data, Mapping) or "task" not in data:
        raise TaskSpecError("a tabletop goal is a mapping {task: <family>, ...parameters}; families: "
                            + ", ".join(FAMILIES))
    family = data["task"]
    if family not in PARAMETERS:
        raise TaskSpecError(f"unknown tabletop task '{family}'; valid: {', '.join(FAMILIES)}", ("task",))
    if start_state is None:
        raise TaskSpecError("a tabletop goal needs the task's start_state (the scene)")
    scene_blocks, scene_bowls = list(start_state["blocks"]), list(start_state["bowls"])
    wanted = PARAMETERS[family]
    extra = set(data) - {"task", "blocks", *wanted}
    if extra:
        raise TaskSpecError(f"{family} takes parameters {sorted(wanted) or 'none'} (and blocks), got {sorted(extra)}",
                            (min(extra),))
    goal: dict[str, Any] = {"family": family, "blocks": scene_blocks, "bowls": scene_bowls}
    if "blocks" in data:
        chosen = data["blocks"]
        if not isinstance(chosen, (list, tuple)) or not chosen:
            raise TaskSpecError("goal.blocks must be a non-empty list of the scene's blocks", ("blocks",))
        for i, b in enumerate(chosen):
            if b not in scene_blocks:
                raise TaskSpecError(f"goal.blocks: '{b}' is not a block of the scene {scene_blocks}", ("blocks", i))
        goal["blocks"] = list(chosen)
    for param, kind in wanted.items():
        if param not in data:
            raise TaskSpecError(f"{family} needs '{param}' (a {kind})", ())
        value = str(data[param]).strip().lower()
        allowed = {"block": scene_blocks, "bowl": scene_bowls, "location": list(LOCATIONS),
                   "block, bowl or location": scene_blocks + scene_bowls + list(LOCATIONS)}[kind]
        if value not in allowed:
            raise TaskSpecError(f"{family}: {param} '{value}' is not a {kind} of this scene; valid: {', '.join(allowed)}",
                                (param,))
        goal[param] = value
    if family == "pick_and_place" and goal["pick"] == goal["target"]:
        raise TaskSpecError("pick_and_place: pick and target are the same object", ("target",))
    if family in ("put_blocks_in_matching_bowls",):
        missing = [b for b in goal["blocks"] if bowl_name(b.split()[0]) not in scene_bowls]
        if missing:
            raise TaskSpecError(f"put_blocks_in_matching_bowls: no bowl of the colour of {missing}", ("task",))
    if family == "put_blocks_on_mismatched_bowls" and not scene_bowls:
        raise TaskSpecError("put_blocks_on_mismatched_bowls needs bowls in the scene", ("task",))
    return goal


def parse_reference_plan(steps: Any, start_state: Mapping[str, Any] | None) -> tuple[str, ...]:
    """``pick the <block> and place it on the <block, bowl or location>`` labels, and ``done``."""

    if not isinstance(steps, (list, tuple)):
        raise TaskSpecError("reference_plan must be a list of skill labels")
    blocks = list((start_state or {}).get("blocks", []))
    targets = blocks + list((start_state or {}).get("bowls", [])) + list(LOCATIONS)
    out = []
    for i, step in enumerate(steps):
        if str(step).strip().lower().rstrip(".") == DONE:
            out.append(DONE)
            continue
        parsed = parse_skill(str(step))
        if parsed is None or parsed[0] not in blocks or parsed[1] not in targets or parsed[0] == parsed[1]:
            raise TaskSpecError(f"reference_plan step {i + 1} '{step}' is not 'pick the <block> and place it on the "
                                "<target>' with objects of this scene", (i,))
        out.append(skill_label(*parsed))
    return tuple(out)


def task_metadata(goal: Mapping[str, Any]) -> dict[str, Any]:
    """The reference sub-goals (for oracle options only: the scripted human, ``subgoal_fallback``)."""
    return {"subgoals": [subgoal_text(o, t) for o, t in reference_subgoals(goal)]}
