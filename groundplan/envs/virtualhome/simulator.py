"""Thin layer over the evolving-graph simulator shipped by ``virtualhome-eval``.

Nothing here re-implements VirtualHome's transition rules: a task is loaded with the package's
``eval_utils.construct_planner`` (one ``MotionPlanner`` per task, cached and rewound with its
``reset()``), and a step runs through the package's ``ScriptExecutor.call_action_method`` exactly as
``MotionPlanner.my_execute_primitive_action_eval`` does, returning success and the executor's
``ExecutionInfo`` with the failure reason. Two things are done differently from the package's own
evaluator, on purpose:

- states are kept as the executor's immutable ``EnvironmentState`` objects (each step returns a new
  one), instead of deep-copying the whole graph dictionary after every step (~1 ms vs ~30 ms a step);
- goals are checked here (:func:`check_goals`): every node goal, every edge goal and the ordered
  action goals, against the final state. The package's ``scene_evaluate_wID`` stops counting edge
  goals after the first match, so it cannot be used to decide success.

Object instances. A step names object classes (Zero-Shot Planners, Sec. 2.1: ids are left to the
environment). :func:`candidate_ids` orders the nodes of a class by how reachable they are (held by
the character, then close to it, then in its room, then the rest; ties by id) and :func:`run_step`
executes the first assignment whose preconditions hold; when none does, the reason reported is the
one of the most reachable assignment.
"""
from __future__ import annotations

import functools
import itertools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from groundplan.envs.virtualhome.actions import Step

#: at most this many instance assignments are tried for one step (two-object steps multiply)
MAX_ASSIGNMENTS = 64

HOLD_RELATIONS = ("HOLDS_RH", "HOLDS_LH")

#: the executor's error type for a step whose effect already holds ("already on", "not sitting",
#: "already grabbed"): ``ExecutionInfo.assign_error_type("satisfied")``, which the package's own
#: action-sequence evaluator counts as an "additional step" and steps over instead of failing the plan
REDUNDANT_ERROR_TYPE = 4
#: the executor's error type -> EAI's runtime error name (``ExecutionInfo.assign_error_type``); EAI's judge
#: and its closed-loop env name a failed step by it
EXECUTOR_ERRORS = {0: "wrong_order", 1: "missing_step", 2: "affordance", 3: "unseen_object",
                   REDUNDANT_ERROR_TYPE: "additional_step", 5: "unknown"}


def package_root() -> Path:
    """Folder of the installed ``virtualhome_eval`` package (raises ImportError when missing)."""
    import virtualhome_eval

    return Path(os.path.dirname(virtualhome_eval.__file__))


def dataset_root() -> Path:
    return package_root() / "dataset" / "programs_processed_precond_nograb_morepreconds"


@functools.lru_cache(maxsize=1)
def _resources() -> tuple[Any, Any, Any]:
    from virtualhome_eval.simulation.evolving_graph import utils

    return utils.load_name_equivalence(), utils.load_properties_data(), utils.load_object_placing()


def construct_planner(script_id: str, scene: int = 1) -> tuple[Any, list[int], list[str], str, str]:
    """Everything the package's ``construct_planner`` returns for one program (~100 ms): the
    ``MotionPlanner``, the ids its script names, the script with ids (``[WALK] <bedroom> (67)``, the
    form EAI's evaluator compares a prediction with), the task name and description."""
    from virtualhome_eval.simulation.evolving_graph import eval_utils

    names, props, placing = _resources()
    return eval_utils.construct_planner(
        names, props, placing, scenegraph_id=scene, script_id=script_id, dataset_root=str(dataset_root())
    )


def construct(script_id: str, scene: int = 1) -> Any:
    """A ``MotionPlanner`` for one program, through the package's ``construct_planner`` (~100 ms)."""
    return construct_planner(script_id, scene)[0]


@dataclass
class StepOutcome:
    """Result of one step: success, the new state (the old one on failure), the reason, the ids used."""

    success: bool
    state: Any
    reason: str = ""
    script: str = ""
    ids: tuple[int, ...] = ()
    tried: int = 0
    #: the executor's error type of the reported failure (see :data:`REDUNDANT_ERROR_TYPE`), None on success
    error_type: int | None = None

    @property
    def redundant(self) -> bool:
        """Failed only because the step's effect already holds (the simulator's own verdict)."""
        return not self.success and self.error_type == REDUNDANT_ERROR_TYPE


def _relation(name: str) -> Any:
    from virtualhome_eval.simulation.evolving_graph.environment import Relation

    return Relation[name]


def character_id(state: Any) -> int:
    for node in state.get_nodes():
        if node.class_name == "character":
            return node.id
    raise RuntimeError("the scene has no character")


def candidate_ids(state: Any, class_name: str, char_id: int) -> list[int]:
    """Node ids of ``class_name``, most reachable first (held, close, same room, other; then id)."""
    nodes = [n.id for n in state.get_nodes() if n.class_name == class_name]
    held = set().union(*(state.get_node_ids_from(char_id, _relation(r)) for r in HOLD_RELATIONS))
    close = set(state.get_node_ids_from(char_id, _relation("CLOSE")))
    rooms = {n.id for n in state.get_nodes() if n.category == "Rooms"}
    char_room = set(state.get_node_ids_from(char_id, _relation("INSIDE"))) & rooms
    inside = _relation("INSIDE")

    def rank(i: int) -> tuple[int, int]:
        if i in held:
            return (0, i)
        if i in close:
            return (1, i)
        if i in char_room or set(state.get_node_ids_from(i, inside)) & char_room:
            return (2, i)
        return (3, i)

    return sorted(nodes, key=rank)


def execute_line_info(state: Any, line: str) -> tuple[Any, Any, Exception | None]:
    """One id-level script line on ``state`` (not modified): (next state or None, the executor's
    ``ExecutionInfo``, the exception the package raised or None). The info keeps what a judge needs
    beyond success: the error type and the missing preconditions (EAI's ``TemporalOrderChecker``
    reads them to tell a wrong order from a missing step)."""
    from virtualhome_eval.simulation.evolving_graph.execution import (
        ExecutionInfo,
        ScriptExecutor,
    )
    from virtualhome_eval.simulation.evolving_graph.scripts import (
        Script,
        parse_script_line,
    )

    info = ExecutionInfo(eval_mode=True)
    try:
        script = Script([parse_script_line(line, 1)])
        return next(ScriptExecutor.call_action_method(script, state, info, 0), None), info, None
    except Exception as exc:  # the package raises on unknown ids and unsupported actions
        return None, info, exc


def execute_line(state: Any, line: str) -> tuple[bool, Any, str, int | None]:
    """One id-level script line on ``state`` (not modified): (success, next state, reason, error type).

    The same calls as ``MotionPlanner.my_execute_primitive_action_eval``; an exception from the
    package (an unknown id, an action without executor) becomes a failure with its message. The error
    type is the executor's ``ExecutionInfo.get_error_type()`` (4: the effect already holds).
    """
    next_state, info, exc = execute_line_info(state, line)
    if exc is not None:  # the package raises on unknown ids and unsupported actions
        return False, state, f"{type(exc).__name__}: {exc}", None
    if next_state is None:
        reason = info.get_error_string() or f"the preconditions of {line} do not hold"
        return False, state, reason, info.get_error_type()
    return True, next_state, "", None


def run_step(state: Any, step: Step, char_id: int | None = None, ids: Sequence[int] | None = None) -> StepOutcome:
    """Execute ``step`` on ``state`` (not modified), assigning instances unless ``ids`` are given."""
    if char_id is None:
        char_id = character_id(state)
    if ids is not None:
        line = step.script_with_ids(ids)
        ok, new, reason, error_type = execute_line(state, line)
        return StepOutcome(ok, new, reason, line, tuple(ids), 1, error_type)
    pools = [candidate_ids(state, a, char_id) for a in step.args]
    missing = [a for a, p in zip(step.args, pools) if not p]
    if missing:
        return StepOutcome(False, state, f"no {', '.join(missing)} in the scene", step.script)
    first: StepOutcome | None = None
    tried = 0
    for combo in itertools.islice(
        (c for c in itertools.product(*pools) if len(set(c)) == len(c)), MAX_ASSIGNMENTS
    ):
        tried += 1
        line = step.script_with_ids(combo)
        ok, new, reason, error_type = execute_line(state, line)
        if ok:
            return StepOutcome(True, new, "", line, tuple(combo), tried)
        if first is None:
            first = StepOutcome(False, state, reason, line, tuple(combo), error_type=error_type)
    if first is None:  # zero-argument steps have exactly one (empty) assignment, so only on no combos
        return StepOutcome(False, state, f"no assignment of objects for {step.script}", step.script)
    first.tried = tried
    return first


@dataclass
class GoalCheck:
    success: bool
    satisfied: list[str] = field(default_factory=list)
    unsatisfied: list[str] = field(default_factory=list)


def _node_goal_text(g: dict) -> str:
    return f"{g['state']}({g.get('class_name', 'node')}.{g['id']})"


def _edge_goal_text(g: dict, names: dict[int, str]) -> str:
    a, b = g["from_id"], g["to_id"]
    return f"{g['relation_type']}({names.get(a, 'node')}.{a}, {names.get(b, 'node')}.{b})"


def check_goals(state: Any, goal: dict, executed_actions: Sequence[str], match: str = "class") -> GoalCheck:
    """Every node goal (``state in node.states``), every edge goal (the edge exists) and the action
    goals in order (each ``"A|B"`` group matched by a later executed action than the previous one).

    ``match="id"`` checks the goal's node ids exactly; ``match="class"`` (default) accepts any node of
    the same class as the goal's node (the character stays itself), which is the goal that a plan
    naming object classes, with instances assigned by the environment, can be held to.
    """
    if match not in ("id", "class"):
        raise ValueError(f"unknown goal match {match!r}; valid: id, class")
    out = GoalCheck(True)
    nodes = list(state.get_nodes())
    names = {n.id: n.class_name for n in nodes}
    by_class: dict[str, list[int]] = {}
    for n in nodes:
        by_class.setdefault(n.class_name, []).append(n.id)

    def same(node_id: int) -> list[int]:
        if match == "id" or names.get(node_id) in (None, "character"):
            return [node_id]
        return by_class[names[node_id]]

    def has_state(node_id: int, wanted: str) -> bool:
        try:
            node = state.get_node(node_id)
        except Exception:
            return False
        return node is not None and wanted in {getattr(s, "name", str(s)) for s in node.states}

    for g in goal.get("node_goals", []):
        ok = any(has_state(i, g["state"]) for i in same(g["id"]))
        (out.satisfied if ok else out.unsatisfied).append(_node_goal_text(g))
    for g in goal.get("edge_goals", []):
        relation = _relation(g["relation_type"])
        targets = set(same(g["to_id"]))
        ok = any(targets & set(state.get_node_ids_from(i, relation)) for i in same(g["from_id"]))
        (out.satisfied if ok else out.unsatisfied).append(_edge_goal_text(g, names))
    position = 0
    actions = [a.upper() for a in executed_actions]
    for group in goal.get("action_goals", []):
        options = {o.strip().upper().replace(" ", "") for o in group.split("|")}
        hit = next((i for i in range(position, len(actions)) if actions[i] in options), None)
        if hit is None:
            out.unsatisfied.append(f"action {group}")
        else:
            out.satisfied.append(f"action {group}")
            position = hit + 1
    out.success = not out.unsatisfied
    return out
