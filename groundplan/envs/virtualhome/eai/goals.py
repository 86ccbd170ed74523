"""EAI's goal check (Li et al. 2024, Sec. 3.3, "goal satisfaction"), by node id, in both readings.

A task's goal has node goals (``{id, class_name, state}``: the node has the state), edge goals
(``{from_id, relation_type, to_id}``: the edge exists) and action goals (``"A|B"`` groups that executed
actions must contain in this relative order). EAI's evaluator (``eval_utils.scene_evaluate_wID``)
counts the satisfied goals of each kind, and a task succeeds when every count is full. Two of its
choices are kept here as switches, because they change verdicts:

- ``every_edge=False`` is the evaluator's loop: it ``break``\\s after the first satisfied edge goal, so at
  most one edge goal is ever counted and a task with two or more edge goals can never succeed (nor
  pass the evaluator's own check of the dataset's final graph, which drops it from the scored set);
  ``every_edge=True`` counts each edge goal;
- the action goals are counted in the order given (the caller picks it: the evaluator's
  ``list(set(goals))``, whose order depends on ``PYTHONHASHSEED``, or the task file's order), by the
  package's own ``check_order_with_or_score`` over the executed script lines joined by spaces: the
  count of goal groups matched in order, stopping at the first unmatched group.

States are read through two small views, one over a graph dictionary (the dataset's final graph, what
the evaluator reads) and one over the executor's ``EnvironmentState`` (what a judge holds after the
last step; no ``to_dict`` copy of the graph).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, Sequence


class StateView(Protocol):
    def node_has_state(self, node_id: int, state: str) -> bool: ...

    def has_edge(self, from_id: int, relation: str, to_id: int) -> bool: ...


class DictView:
    """A graph dictionary (``{"nodes": [...], "edges": [...]}``), read as EAI's evaluator reads it:
    ``state in node["states"]`` and edge-dictionary membership."""

    def __init__(self, graph: dict) -> None:
        self._states = {n["id"]: set(n["states"]) for n in graph["nodes"]}
        self._edges = {(e["from_id"], e["relation_type"], e["to_id"]) for e in graph["edges"]}

    def node_has_state(self, node_id: int, state: str) -> bool:
        return state in self._states.get(node_id, ())

    def has_edge(self, from_id: int, relation: str, to_id: int) -> bool:
        return (from_id, relation, to_id) in self._edges


class StateObjectView:
    """The executor's ``EnvironmentState`` (immutable steps share the initial graph)."""

    def __init__(self, state: Any) -> None:
        self._state = state

    def node_has_state(self, node_id: int, state: str) -> bool:
        node = self._state.get_node(node_id)
        return node is not None and state in {s.name for s in node.states}

    def has_edge(self, from_id: int, relation: str, to_id: int) -> bool:
        from virtualhome_eval.simulation.evolving_graph.environment import Relation

        if relation not in Relation.__members__:
            return False
        return to_id in self._state.get_node_ids_from(from_id, Relation[relation])


@dataclass(frozen=True)
class GoalCount:
    """Satisfied goals of each kind and whether all of them are."""

    node: int
    edge: int
    action: int
    success: bool

    @property
    def satisfied(self) -> int:
        """Goals of every kind satisfied."""
        return self.node + self.edge + self.action


def count_goals(view: StateView, node_goals: Sequence[dict], edge_goals: Sequence[dict],
                action_goals: Sequence[str] = (), executed: Sequence[str] = (), *, every_edge: bool) -> GoalCount:
    """Count the satisfied goals of ``view`` (after the script lines ``executed``); see the module."""
    from virtualhome_eval.simulation.evolving_graph.eval_utils import check_order_with_or_score

    node = sum(view.node_has_state(g["id"], g["state"]) for g in node_goals)
    edge = 0
    for g in edge_goals:
        if view.has_edge(g["from_id"], g["relation_type"], g["to_id"]):
            edge += 1
            if not every_edge:
                break  # the evaluator's loop: the first satisfied edge goal ends the count
    action = check_order_with_or_score(list(action_goals), " ".join(executed))[0] if action_goals else 0
    success = node == len(node_goals) and edge == len(edge_goals) and action == len(action_goals)
    return GoalCount(node, edge, action, success)


def unsatisfied(view: StateView, node_goals: Sequence[dict], edge_goals: Sequence[dict]) -> list[str]:
    """The node and edge goals ``view`` misses, as text (``ON(light.245)``, ``ON(soap.1002, washer.1001)``)."""
    out = [f"{g['state']}({g.get('class_name', 'node')}.{g['id']})" for g in node_goals
           if not view.node_has_state(g["id"], g["state"])]
    out += [f"{g['relation_type']}({g['from_id']}, {g['to_id']})" for g in edge_goals
            if not view.has_edge(g["from_id"], g["relation_type"], g["to_id"])]
    return out
