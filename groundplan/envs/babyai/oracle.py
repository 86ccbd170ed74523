"""The BabyAI expert: a closed-loop planner over the high-level actions (used when minigrid's own
BabyAIBot does not fit; see :mod:`groundplan.envs.experts`).

At each step it finds the cheapest cell route to an object matching the mission, counting closed doors,
locked doors and blocking objects as obstacles (:func:`~groundplan.envs.babyai.grid.route`), and acts on
the first obstacle: toggle a closed door; for a locked door, fetch its key first (recursively, since that
key may itself sit behind a locked door, as in UnlockToUnlock), toggle, and drop the key in the void;
pick up a blocking object and drop it in the void. With a free route it drops whatever it carries and
picks up the target, then says "done picking up".
"""
from __future__ import annotations

from typing import Any

from groundplan.envs.babyai import grid as G
from groundplan.envs.babyai.rules import DONE

MAX_DEPTH = 4


def _matches(obj: Any, kind: str | None, colour: str | None) -> bool:
    return (kind is None or obj.type == kind) and (colour is None or obj.color == colour)


def next_action(env: Any, goal: dict[str, Any]) -> str:
    """The expert's next high-level action for the minigrid level ``env`` and the task goal."""
    c = env.carrying
    if c is not None and _matches(c, goal["type"], goal["color"]):
        return DONE
    targets = [p for p, o in G.objects(env) if _matches(o, goal["type"], goal["color"])]
    return _toward(env, targets, 0) or DONE


def _toward(env: Any, targets: list[G.Pos], depth: int, walls: frozenset = frozenset()) -> str | None:
    """Next action toward picking up one of ``targets``; ``walls`` are the locked doors whose keys are
    being fetched (a key behind its own door does not count)."""
    if depth > MAX_DEPTH or not targets:
        return None
    found = G.route(env, targets, walls)
    if found is None:
        return None
    path, obstacles = found
    carried = env.carrying
    if not obstacles:
        if carried is not None:
            return f"drop {carried.type} in void"
        return f"pick up {G.name(env.grid.get(*path[-1]))}"
    pos, kind = obstacles[0]
    cell = env.grid.get(*pos)
    if kind == "closed":
        return f"toggle {cell.color} door"
    if kind == "locked":
        if carried is not None and carried.type == "key" and carried.color == cell.color:
            return f"toggle {cell.color} door"
        keys = [p for p, o in G.objects(env) if o.type == "key" and o.color == cell.color]
        return _toward(env, keys, depth + 1, walls | {pos})
    # a blocking object
    if carried is not None:
        return f"drop {carried.type} in void"
    return f"pick up {G.name(cell)}"


class BabyAIOracle:
    """Expert policy for :class:`~groundplan.envs.babyai.env.BabyAIEnv` (reads the minigrid state)."""

    name = "babyai_oracle"

    def __init__(self, env: Any) -> None:
        self.env = env

    def act(self, task: Any, obs: Any) -> str:
        return next_action(self.env.level, task.goal)
