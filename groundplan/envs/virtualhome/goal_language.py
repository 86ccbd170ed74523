"""VirtualHome's goal language for task files (docs/tasks.md): node and edge goals, plus action goals.

The goal is the dataset's own (``task_state_LTL_formula_accurate.json``, :mod:`.dataset`) with objects
named by class instead of node id::

    start_state: {program: "11_1"}             # the initial graph of that dataset program
    goal:
      nodes: [{object: floor_lamp, state: ON}]                        # a node has a state
      edges: [{from: character, relation: FACING, to: computer}]      # a relation holds
      actions: [LOOKAT|WATCH]                  # executed in this order (any of A|B)

Each class is resolved to a node of the start graph (the lowest id; with the env's default
``goal_match: class`` any node of the class meets the goal), and ``id:``/``from_id:``/``to_id:`` pin
exact nodes. States and relations are the simulator's own enums. Parsing gives the dict that
:func:`groundplan.envs.virtualhome.simulator.check_goals` reads.
"""
from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from groundplan.envs.base import TaskSpecError
from groundplan.envs.virtualhome import dataset
from groundplan.envs.virtualhome.actions import TEMPLATES, ParseError
from groundplan.envs.virtualhome.scene import scene_action_space


@functools.lru_cache(maxsize=1)
def default_program() -> str:
    """The start graph used when a task file gives no ``start_state.program``: the dataset's first."""
    return dataset.load_programs()[0].program_id


@functools.lru_cache(maxsize=64)
def _graph(program_id: str) -> tuple[dict[int, str], dict[str, int]]:
    nodes = dataset.load_init_graph(program_id)["nodes"]
    by_id = {int(n["id"]): n["class_name"] for n in nodes}
    first: dict[str, int] = {}
    for i in sorted(by_id):
        first.setdefault(by_id[i], i)
    return by_id, first


def _enums() -> tuple[list[str], list[str]]:
    from virtualhome_eval.simulation.evolving_graph.environment import Relation, State

    return [s.name for s in State], [r.name for r in Relation]


def parse_start_state(data: Any) -> dict[str, Any]:
    """``{program: <dataset program id>}`` (default: :func:`default_program`)."""
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise TaskSpecError("a VirtualHome start_state is {program: <program id>}, the initial graph to start from")
    unknown = set(data) - {"program"}
    if unknown:
        raise TaskSpecError(f"unknown start_state key(s) {sorted(unknown)}; valid: program", (min(unknown),))
    program = str(data.get("program", default_program()))
    known = {p.program_id for p in dataset.load_programs()}
    if program not in known:
        raise TaskSpecError(f"start_state.program '{program}' is not a program of the dataset (e.g. "
                            f"{', '.join(sorted(known)[:5])}, ...)", ("program",))
    return {"program": program}


def _node(ref: Any, id_ref: Any, program: str, path: tuple[Any, ...]) -> int:
    by_id, first = _graph(program)
    if id_ref is not None:
        if not isinstance(id_ref, int) or id_ref not in by_id:
            raise TaskSpecError(f"node id {id_ref!r} is not in the start graph of program {program}", path)
        if ref is not None and by_id[id_ref] != ref:
            raise TaskSpecError(f"node {id_ref} is a {by_id[id_ref]}, not a {ref}", path)
        return id_ref
    if not isinstance(ref, str) or ref not in first:
        close = sorted(c for c in first if isinstance(ref, str) and (ref in c or c in ref))[:5]
        hint = f"; similar: {', '.join(close)}" if close else ""
        raise TaskSpecError(f"no object '{ref}' in the start graph of program {program}{hint}", path)
    return first[ref]


def parse_goal(data: Any, start_state: Mapping[str, Any] | None) -> dict[str, Any]:
    """``{nodes: [...], edges: [...], actions: [...]}`` → the env's goal dict (node ids resolved)."""
    if not isinstance(data, Mapping):
        raise TaskSpecError("a VirtualHome goal is a mapping with nodes, edges and/or actions")
    unknown = set(data) - {"nodes", "edges", "actions"}
    if unknown:
        raise TaskSpecError(f"unknown goal key(s) {sorted(unknown)}; valid: nodes, edges, actions", (min(unknown),))
    program = (start_state or {}).get("program") or default_program()
    by_id, _ = _graph(program)
    states, relations = _enums()
    goal: dict[str, Any] = {"node_goals": [], "edge_goals": [], "action_goals": []}
    for i, g in enumerate(data.get("nodes") or []):
        path = ("nodes", i)
        if not isinstance(g, Mapping) or "state" not in g or not ({"object", "id"} & set(g)):
            raise TaskSpecError("a node goal is {object: <class>, state: <STATE>} (or id: <node id>)", path)
        state = str(g["state"]).upper()
        if state not in states:
            raise TaskSpecError(f"unknown state '{g['state']}'; valid: {', '.join(states)}", path + ("state",))
        node = _node(g.get("object"), g.get("id"), program, path + ("object",))
        goal["node_goals"].append({"id": node, "class_name": by_id[node], "state": state})
    for i, g in enumerate(data.get("edges") or []):
        path = ("edges", i)
        if not isinstance(g, Mapping) or "relation" not in g:
            raise TaskSpecError("an edge goal is {from: <class>, relation: <RELATION>, to: <class>}", path)
        relation = str(g["relation"]).upper()
        if relation not in relations:
            raise TaskSpecError(f"unknown relation '{g['relation']}'; valid: {', '.join(relations)}", path + ("relation",))
        a = _node(g.get("from"), g.get("from_id"), program, path + ("from",))
        b = _node(g.get("to"), g.get("to_id"), program, path + ("to",))
        goal["edge_goals"].append({"from_id": a, "relation_type": relation, "to_id": b})
    for i, group in enumerate(data.get("actions") or []):
        options = [o.strip().upper().replace(" ", "") for o in str(group).split("|")]
        bad = [o for o in options if o not in TEMPLATES]
        if bad:
            raise TaskSpecError(f"unknown action(s) {bad} in '{group}'; valid: {', '.join(TEMPLATES)}", ("actions", i))
        goal["action_goals"].append("|".join(options))
    if not (goal["node_goals"] or goal["edge_goals"] or goal["action_goals"]):
        raise TaskSpecError("a VirtualHome goal needs at least one node, edge or action goal")
    return goal


def parse_reference_plan(steps: Any, start_state: Mapping[str, Any] | None = None) -> tuple[str, ...]:
    """Steps as labels (``walk to bedroom``) or script lines (``[WALK] <bedroom> (1)``); any step the
    simulator could be asked to run (:meth:`ActionSpace.parse` with ``strict=False``)."""

    if not isinstance(steps, (list, tuple)):
        raise TaskSpecError("reference_plan must be a list of steps")
    space = scene_action_space()
    out = []
    for i, step in enumerate(steps):
        try:
            out.append(space.parse(str(step), strict=False).text)
        except ParseError as exc:
            raise TaskSpecError(f"reference_plan step {i + 1}: {exc}", (i,)) from None
    return tuple(out)
