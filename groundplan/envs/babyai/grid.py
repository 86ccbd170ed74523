"""Grid geometry for the BabyAI env: a BFS path planner over agent poses that compiles one high-level
action into minigrid primitives, a cost-weighted route finder for the oracle, and the textual scene
description (SayCanPay Fig. 1 / Fig. 4: "Room 1 has yellow key, agent. The door connecting Room 1 and
Room 2 is locked.").

Poses are ``(x, y, dir)`` with minigrid's directions (0 right, 1 down, 2 left, 3 up); primitives are
minigrid's ``left`` (0), ``right`` (1) and ``forward`` (2).
"""
from __future__ import annotations

import heapq
from collections import deque
from typing import Any, Collection, Iterable

LEFT, RIGHT, FORWARD, PICKUP, DROP, TOGGLE = 0, 1, 2, 3, 4, 5
DIR_VEC = ((1, 0), (0, 1), (-1, 0), (0, -1))
OBJECT_TYPES = ("key", "ball", "box")
Pos = tuple[int, int]


def passable(cell: Any) -> bool:
    """Whether the agent may stand on a cell: empty floor or an open door."""
    return cell is None or (cell.type == "door" and cell.is_open) or cell.can_overlap()


def plan_to_face(env: Any, targets: Iterable[Pos]) -> list[int] | None:
    """Shortest primitive sequence (turns and forward moves, BFS over poses) after which the agent
    faces one of ``targets``; None when no target can be faced from a reachable cell."""
    goal = set(map(tuple, targets))
    if not goal:
        return None
    start = (int(env.agent_pos[0]), int(env.agent_pos[1]), int(env.agent_dir))
    prev: dict[tuple[int, int, int], tuple[tuple[int, int, int], int] | None] = {start: None}
    queue = deque([start])
    grid = env.grid
    while queue:
        pose = queue.popleft()
        x, y, d = pose
        dx, dy = DIR_VEC[d]
        if (x + dx, y + dy) in goal:
            actions: list[int] = []
            node = pose
            while prev[node] is not None:
                node, act = prev[node]  # type: ignore[misc]
                actions.append(act)
            return actions[::-1]
        nxt = [((x, y, (d - 1) % 4), LEFT), ((x, y, (d + 1) % 4), RIGHT)]
        fx, fy = x + dx, y + dy
        if 0 <= fx < grid.width and 0 <= fy < grid.height and passable(grid.get(fx, fy)):
            nxt.append(((fx, fy, d), FORWARD))
        for p, act in nxt:
            if p not in prev:
                prev[p] = (pose, act)
                queue.append(p)
    return None


def cells(env: Any, types: Collection[str]) -> list[tuple[Pos, Any]]:
    """Every grid cell holding an object of one of ``types``, with its position (row by row)."""
    grid = env.grid
    return [((x, y), c) for y in range(grid.height) for x in range(grid.width)
            if (c := grid.get(x, y)) is not None and c.type in types]


def objects(env: Any) -> list[tuple[Pos, Any]]:
    """Every key, ball and box on the grid (not the carried one) with its position."""
    return cells(env, OBJECT_TYPES)


def doors(env: Any) -> list[tuple[Pos, Any]]:
    return cells(env, ("door",))


def neighbours(p: Pos) -> list[Pos]:
    return [(p[0] + dx, p[1] + dy) for dx, dy in DIR_VEC]


#: Dijkstra cell costs of the oracle's route finder: going through an obstacle is allowed but dear
ROUTE_COST = {"free": 1, "closed": 10, "object": 50, "locked": 100}


def route(env: Any, targets: Iterable[Pos], walls: Iterable[Pos] = ()) -> tuple[list[Pos], list[tuple[Pos, str]]] | None:
    """Cheapest cell path from the agent to one of ``targets`` counting obstacles (closed door, locked
    door, object) by :data:`ROUTE_COST` and treating ``walls`` as walls; returns ``(path, obstacles
    along it in order)`` or None."""
    goal = set(map(tuple, targets))
    walls = set(walls)
    grid = env.grid
    start = (int(env.agent_pos[0]), int(env.agent_pos[1]))
    dist = {start: 0}
    prev: dict[Pos, Pos | None] = {start: None}
    heap = [(0, start)]
    while heap:
        d, p = heapq.heappop(heap)
        if d > dist[p]:
            continue
        if p in goal:
            path = [p]
            while prev[path[-1]] is not None:
                path.append(prev[path[-1]])  # type: ignore[arg-type]
            path.reverse()
            obstacles = [(q, kind) for q in path[1:-1] if (kind := cell_kind(grid.get(*q))) != "free"]
            return path, obstacles
        for q in neighbours(p):
            if not (0 <= q[0] < grid.width and 0 <= q[1] < grid.height):
                continue
            kind = "free" if q in goal else cell_kind(grid.get(*q))
            if kind == "wall" or q in walls:
                continue
            nd = d + ROUTE_COST[kind]
            if nd < dist.get(q, 1 << 30):
                dist[q], prev[q] = nd, p
                heapq.heappush(heap, (nd, q))
    return None


def cell_kind(cell: Any) -> str:
    if passable(cell):
        return "free"
    if cell.type == "door":
        return "locked" if cell.is_locked else "closed"
    if cell.type in OBJECT_TYPES:
        return "object"
    return "wall"


def name(obj: Any) -> str:
    return f"{obj.color} {obj.type}"


def describe(env: Any) -> str:
    """The textual observation: objects and the agent per room, each door's state, objects blocking a
    door and what the agent carries (SayCanPay Fig. 4's format; rooms numbered row by row from 1)."""
    number: dict[int, int] = {}
    for j in range(env.num_rows):
        for i in range(env.num_cols):
            number[id(env.room_grid[j][i])] = len(number) + 1

    def room_no(p: Pos) -> int:
        return number[id(env.room_from_pos(*p))]

    contents: dict[int, list[str]] = {k: [] for k in number.values()}
    agent = (int(env.agent_pos[0]), int(env.agent_pos[1]))
    for p, obj in objects(env):
        contents[room_no(p)].append(name(obj))
    contents[room_no(agent)].append("agent")
    parts = [f"Room {k} has {', '.join(v)}." if v else f"Room {k} is empty." for k, v in contents.items()]
    grid = env.grid
    blocking = []
    for p, door in doors(env):
        sides = sorted({room_no(q) for q in neighbours(p) if 0 <= q[0] < grid.width and 0 <= q[1] < grid.height
                        and cell_kind(grid.get(*q)) != "wall"})
        state = "locked" if door.is_locked else ("open" if door.is_open else "closed")
        rooms = " and ".join(f"Room {k}" for k in sides)
        parts.append(f"The {door.color} door connecting {rooms} is {state}.")
        for q in neighbours(p):
            c = grid.get(*q) if 0 <= q[0] < grid.width and 0 <= q[1] < grid.height else None
            if c is not None and c.type in OBJECT_TYPES:
                blocking.append(f"The {name(c)} is blocking the {door.color} door.")
    parts.extend(blocking)
    if env.carrying is not None:
        parts.append(f"The agent carries the {name(env.carrying)}.")
    return " ".join(parts)
