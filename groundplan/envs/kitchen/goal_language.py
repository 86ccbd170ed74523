"""The kitchen's goal language for task files (docs/tasks.md): predicates with any-of alternatives.

A goal is a list of clauses, all of which must hold; a clause is one predicate, or any-of
alternatives written ``{any: [p, q, ...]}`` (or a list of predicates). A predicate is written as text,
``"delivered(coke can)"``, or as a list whose first item is the bare kind, ``[delivered, coke can]``
(in a YAML flow list ``[...]`` quote text predicates that contain commas); :data:`PREDICATE_ARGS` lists the
kinds and their arguments (SayCan Sec. 5.2's goal predicates, :mod:`.tasks`). Parsing gives the
tuple form :func:`groundplan.envs.kitchen.tasks.evaluate_goal` reads, and every error names the
clause and alternative it is in (:class:`~groundplan.envs.base.TaskSpecError.path`).
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from groundplan.core.errors import InvalidInputError
from groundplan.core.types import Task
from groundplan.envs.base import TaskSpecError
from groundplan.envs.kitchen.skills import SKILLS
from groundplan.envs.kitchen.tasks import Clause, Goal, Predicate, validate_goal
from groundplan.envs.kitchen.world import CATEGORIES, LOCATION_NAMES, OBJECT_NAMES, initial_state

#: predicate kind → its argument names (for messages and docs)
PREDICATE_ARGS: dict[str, tuple[str, ...]] = {
    "at": ("object", "location"),
    "delivered": ("object",),
    "thrown_away": ("object",),
    "holding": ("object",),
    "gripper_empty": (),
    "near": ("object",),
    "robot_at": ("location",),
    "count_at": ("category", "location", "n"),
}
_TEXT = re.compile(r"^\s*(\w+)\s*(?:\((.*)\))?\s*$")


def _predicate(data: Any, path: tuple[Any, ...]) -> Predicate:
    if isinstance(data, str):
        m = _TEXT.match(data)
        if not m:
            raise TaskSpecError(f"'{data}' is not a predicate: write kind(arg, ...), e.g. delivered(coke can)", path)
        kind, inner = m.group(1), m.group(2)
        args: list[Any] = [a.strip() for a in inner.split(",")] if inner and inner.strip() else []
    elif isinstance(data, (list, tuple)) and data and isinstance(data[0], str):
        kind, args = data[0], [a.strip() if isinstance(a, str) else a for a in data[1:]]
    else:
        raise TaskSpecError(f"{data!r} is not a predicate: write kind(arg, ...) or [kind, arg, ...]", path)
    if kind not in PREDICATE_ARGS:
        raise TaskSpecError(f"unknown predicate '{kind}'; valid: "
                            + ", ".join(f"{k}({', '.join(a)})" for k, a in PREDICATE_ARGS.items()), path)
    want = PREDICATE_ARGS[kind]
    if len(args) != len(want):
        raise TaskSpecError(f"{kind} takes {len(want)} argument(s) ({', '.join(want) or 'none'}), got {len(args)}", path)
    if kind == "count_at":
        try:
            args[2] = int(args[2])
        except (TypeError, ValueError):
            raise TaskSpecError(f"count_at's n must be a whole number, got {args[2]!r}", path) from None
    for name, value in zip(want, args):
        valid = {"object": OBJECT_NAMES, "location": LOCATION_NAMES, "category": tuple(CATEGORIES)}.get(name)
        if valid is not None and value not in valid:
            raise TaskSpecError(f"{kind}: unknown {name} '{value}'; valid: {', '.join(valid)}", path)
    pred = (kind, *args)
    try:
        validate_goal(((pred,),))
    except InvalidInputError as exc:
        raise TaskSpecError(str(exc), path) from None
    return pred


def _is_list_predicate(data: Any) -> bool:
    """``[kind, arg, ...]`` (a bare kind first) rather than a list of predicates."""
    return isinstance(data, (list, tuple)) and bool(data) and isinstance(data[0], str) and data[0].strip() in PREDICATE_ARGS


def _clause(data: Any, i: int) -> Clause:
    if isinstance(data, Mapping):
        if set(data) != {"any"}:
            raise TaskSpecError(f"a clause mapping takes one key, 'any' (alternatives), got {sorted(data)}", (i,))
        alternatives = data["any"]
        if not isinstance(alternatives, (list, tuple)) or not alternatives:
            raise TaskSpecError("'any' needs a non-empty list of predicates", (i, "any"))
        return tuple(_predicate(p, (i, "any", j)) for j, p in enumerate(alternatives))
    if isinstance(data, (list, tuple)) and data and not _is_list_predicate(data):  # any of these predicates
        return tuple(_predicate(p, (i, j)) for j, p in enumerate(data))
    return (_predicate(data, (i,)),)


def parse_goal(data: Any, start_state: Mapping[str, Any] | None = None) -> Goal:
    """A task file's kitchen goal → the tuple-of-clauses form (predicates with any-of alternatives; the
    start state does not change what a goal may name); raises :class:`TaskSpecError`."""
    if isinstance(data, (str, Mapping)) or _is_list_predicate(data):
        data = [data]  # one clause
    if not isinstance(data, (list, tuple)) or not data:
        raise TaskSpecError("a kitchen goal is a non-empty list of clauses (predicates, or {any: [...]})")
    return tuple(_clause(c, i) for i, c in enumerate(data))


def parse_start_state(data: Any) -> dict[str, Any] | None:
    """``{robot: <location>, holding: <object>, placement: {<object>: <location>}}``, each optional, as
    :class:`~groundplan.envs.kitchen.start_state.KitchenStartState` (which ``Env.parse_start_state`` checks
    first) describes it; the data is kept as given."""
    if data is None:
        return None
    if not isinstance(data, Mapping):
        raise TaskSpecError("a kitchen start_state is a mapping with robot, holding and placement")

    state = dict(data)
    try:
        initial_state(Task("file", "file", "file", None, start_state=state), 0)
    except InvalidInputError as exc:
        key = next((k for k in ("placement", "robot", "holding") if k in str(exc)), None)
        raise TaskSpecError(str(exc).replace("task file: ", ""), (key,) if key else ()) from None
    return state


def parse_reference_plan(steps: Any, start_state: Mapping[str, Any] | None = None) -> tuple[str, ...]:
    """Skill labels of the kitchen (``find a coke can``, ``pick up the coke can``, ..., ``done``)."""
    if not isinstance(steps, (list, tuple)):
        raise TaskSpecError("reference_plan must be a list of skill labels")
    known = set(SKILLS)
    for i, step in enumerate(steps):
        if step not in known:
            raise TaskSpecError(f"reference_plan step {i + 1} '{step}' is not a kitchen skill", (i,))
    return tuple(steps)
