"""The agent in a generated house: discrete motion, egocentric perception and an A* point-goal navigator.

Actions follow SayNav Sec. 3.1 / AI2-THOR's defaults: ``forward`` moves 0.25 m along the heading
(blocked by walls and furniture), ``left``/``right`` turn by ``turn_deg`` (30° or 90°), and a look
around is 6 turns of 60° with an observation after each. Every action is one simulator step; path
length is counted in metres of successful forward motion.

Perception is egocentric: an object is detected when it lies within range and the horizontal field
of view and no wall cell lies on the grid ray to it (furniture does not occlude: small objects stand
on it). Noise, when on, jitters positions, drops detections and hides instance ids, so the scene graph
must associate detections itself (SayNav's VO mode); off, detections carry exact positions and ids
(GT mode).
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from groundplan.envs.house.layout import CELL, DOOR, FREE, WALL, House

SQRT2 = math.sqrt(2.0)


@dataclass
class Detection:
    """One object or door seen in one view (metres, world frame)."""

    kind: str  # "large" | "small" | "door"
    category: str
    position: tuple[float, float]
    distance: float
    obj_id: int | None = None  # None in noisy mode
    room_id: int | None = None  # the room the agent was in when it saw it

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "category": self.category, "position": [round(self.position[0], 3),
                round(self.position[1], 3)], "distance": round(self.distance, 3), "obj_id": self.obj_id,
                "room_id": self.room_id}


@dataclass
class PerceptionParams:
    fov_deg: float = 90.0
    large_range: float = 6.0
    small_range: float = 3.0
    found_radius: float = 2.5
    position_noise: float = 0.0
    miss_prob: float = 0.0
    hide_ids: bool = False


@dataclass
class AgentState:
    x: float
    z: float
    heading: float  # degrees, 0 = +x, counter-clockwise towards +z
    steps: int = 0
    path_m: float = 0.0
    path: list[tuple[float, float]] = field(default_factory=list)


def line_of_sight(house: House, a: tuple[float, float], b: tuple[float, float]) -> bool:
    """No WALL cell on the segment a→b (sampled every quarter cell), endpoints' cells excluded."""
    dx, dz = b[0] - a[0], b[1] - a[1]
    n = max(1, int(math.hypot(dx, dz) / (CELL / 4)))
    end = (int(b[0] // CELL), int(b[1] // CELL))
    start = (int(a[0] // CELL), int(a[1] // CELL))
    grid = house.grid
    for k in range(1, n):
        c = (int((a[0] + dx * k / n) // CELL), int((a[1] + dz * k / n) // CELL))
        if c == end or c == start:
            continue
        if grid[c] == WALL:
            return False
    return True


def forward_target(house: House, x: float, z: float, heading: float, dist: float = CELL
                   ) -> tuple[float, float] | tuple[None, None]:
    """Where a forward move of ``dist`` along ``heading`` ends, or (None, None) when its midpoint or end
    lies on a wall or furniture: the simulator's motion rule, shared with the point-goal expert."""
    rad = math.radians(heading)
    nx, nz = x + dist * math.cos(rad), z + dist * math.sin(rad)
    for t in (0.5, 1.0):
        if not house.free(int((x + (nx - x) * t) // CELL), int((z + (nz - z) * t) // CELL)):
            return None, None
    return nx, nz


class HouseSim:
    """State and physics of one episode in one house."""

    def __init__(self, house: House, start: tuple[float, float, float], params: PerceptionParams,
                 rng: np.random.Generator, turn_deg: float = 30.0, max_steps: int = 1000, perceive: bool = True) -> None:
        self.house = house
        self.params = params
        self.rng = rng
        self.turn_deg = turn_deg
        self.max_steps = max_steps
        self.perceive = perceive  # False: motion only (point-goal training needs no detections)
        self.agent = AgentState(start[0], start[1], start[2], path=[(start[0], start[1])])
        #: obj_id -> simulator step at which each object was first seen within ``found_radius``
        self.seen_close: dict[int, int] = {}
        self.ever_seen: set[int] = set()
        self._door_cells = {c: d for d in house.doors for c in d.cells}

    # ------------------------------------------------------------------ motion
    @property
    def out_of_steps(self) -> bool:
        return self.agent.steps >= self.max_steps

    def room(self) -> int | None:
        return self.house.room_at(self.agent.x, self.agent.z)

    def turn(self, degrees: float) -> list[Detection]:
        self.agent.heading = (self.agent.heading + degrees) % 360.0
        self.agent.steps += 1
        return self.observe()

    def forward(self, dist: float = CELL) -> tuple[bool, list[Detection]]:
        """Move ``dist`` along the heading unless the segment hits a wall or furniture."""
        a = self.agent
        a.steps += 1
        nx, nz = forward_target(self.house, a.x, a.z, a.heading, dist)
        if nx is None:
            return False, self.observe()
        a.x, a.z = nx, nz
        a.path_m += dist
        a.path.append((nx, nz))
        return True, self.observe()

    def look_around(self) -> list[Detection]:
        """Six 60° turns with an observation after each (a full turn), SayNav Sec. 3.1."""
        out: list[Detection] = []
        for _ in range(6):
            if self.out_of_steps:
                break
            out += self.turn(60.0)
        return out

    # ------------------------------------------------------------------ perception
    def observe(self) -> list[Detection]:
        """Objects and doors in range, in the field of view and not behind a wall, from the current pose."""
        if not self.perceive:
            return []
        a, p = self.agent, self.params
        room = self.room()
        out: list[Detection] = []
        for obj in self.house.objects:
            limit = p.large_range if obj.large else p.small_range
            tx, tz = (self._nearest_cell_center(obj.cells, a.x, a.z) if obj.large else obj.position)
            d = math.hypot(tx - a.x, tz - a.z)
            if d > limit or not self._in_fov(tx, tz) or not line_of_sight(self.house, (a.x, a.z), (tx, tz)):
                continue
            if not obj.large and d <= p.found_radius and obj.obj_id not in self.seen_close:
                self.seen_close[obj.obj_id] = a.steps
            self.ever_seen.add(obj.obj_id)
            if p.miss_prob and self.rng.random() < p.miss_prob:
                continue
            out.append(Detection("large" if obj.large else "small", obj.category, self._noisy(obj.position, d), d,
                                 None if p.hide_ids else obj.obj_id, room))
        for door in self.house.doors:
            tx, tz = door.position
            d = math.hypot(tx - a.x, tz - a.z)
            if d > p.large_range or not self._in_fov(tx, tz) or not line_of_sight(self.house, (a.x, a.z), (tx, tz)):
                continue
            out.append(Detection("door", "Door", self._noisy(door.position, d), d,
                                 None if p.hide_ids else door.door_id, room))
        return out

    def _nearest_cell_center(self, cells: tuple[tuple[int, int], ...], x: float, z: float) -> tuple[float, float]:
        i, j = min(cells, key=lambda c: (c[0] + 0.5 - x / CELL) ** 2 + (c[1] + 0.5 - z / CELL) ** 2)
        return ((i + 0.5) * CELL, (j + 0.5) * CELL)

    def _in_fov(self, x: float, z: float) -> bool:
        a = self.agent
        if math.hypot(x - a.x, z - a.z) < 0.3:
            return True
        bearing = math.degrees(math.atan2(z - a.z, x - a.x))
        diff = (bearing - a.heading + 180.0) % 360.0 - 180.0
        return abs(diff) <= self.params.fov_deg / 2

    def _noisy(self, pos: tuple[float, float], dist: float) -> tuple[float, float]:
        s = self.params.position_noise
        if not s:
            return pos
        # depth error grows with distance, as from an RGB-D camera
        sd = s * (1.0 + dist / 3.0)
        return (pos[0] + float(self.rng.normal(0, sd)), pos[1] + float(self.rng.normal(0, sd)))


# ---------------------------------------------------------------------- A*
def nearest_free_cell(house: House, x: float, z: float, reachable: np.ndarray | None = None) -> tuple[int, int] | None:
    """The walkable (and, if given, reachable) cell nearest to (x, z)."""
    ci, cj = int(x // CELL), int(z // CELL)
    W, H = house.grid.shape
    best, best_d = None, float("inf")
    for r in range(0, max(W, H)):
        cand = [(i, j) for i in range(ci - r, ci + r + 1) for j in range(cj - r, cj + r + 1)
                if max(abs(i - ci), abs(j - cj)) == r]
        for i, j in cand:
            if house.free(i, j) and (reachable is None or reachable[i, j]):
                d = ((i + 0.5) * CELL - x) ** 2 + ((j + 0.5) * CELL - z) ** 2
                if d < best_d:
                    best, best_d = (i, j), d
        if best is not None:
            return best
    return None


def clearance_cost(house: House) -> np.ndarray:
    """Extra step cost next to obstacles, so planned paths keep off walls and furniture edges."""
    blocked = ~np.isin(house.grid, (FREE, DOOR))
    near = np.zeros_like(blocked)
    for di in (-1, 0, 1):
        for dj in (-1, 0, 1):
            near |= np.roll(np.roll(blocked, di, 0), dj, 1)
    return np.where(near, 0.6, 0.0)


#: the 8 grid moves and their costs in cells
MOVES = ((1, 0, 1.0), (-1, 0, 1.0), (0, 1, 1.0), (0, -1, 1.0),
         (1, 1, SQRT2), (1, -1, SQRT2), (-1, 1, SQRT2), (-1, -1, SQRT2))


def _walkable(house: House) -> np.ndarray:
    return np.isin(house.grid, (FREE, DOOR))


def _neighbours(walk: np.ndarray, ci: int, cj: int, extra: np.ndarray | None):
    """The walkable 8-neighbours of cell (ci, cj), each with the step's length in cells and the
    ``extra`` cost there (0 without it; kept apart so callers add them in one fixed order); a diagonal
    step needs both cells beside it free (no corner cutting)."""
    W, H = walk.shape
    for di, dj, c in MOVES:
        ni, nj = ci + di, cj + dj
        if not (0 <= ni < W and 0 <= nj < H) or not walk[ni, nj]:
            continue
        if di and dj and not (walk[ci + di, cj] and walk[ci, cj + dj]):
            continue
        yield ni, nj, c, (extra[ni, nj] if extra is not None else 0.0)


def astar(house: House, start: tuple[int, int], goal: tuple[int, int], extra: np.ndarray | None = None
          ) -> list[tuple[int, int]] | None:
    """8-connected A* over walkable cells (no corner cutting); None when unreachable."""
    if start == goal:
        return [start]
    walk = _walkable(house)
    g = {start: 0.0}
    parent: dict[tuple[int, int], tuple[int, int]] = {}
    heap = [(0.0, start)]
    gi, gj = goal
    closed = set()
    while heap:
        _, cur = heapq.heappop(heap)
        if cur == goal:
            path = [cur]
            while cur in parent:
                cur = parent[cur]
                path.append(cur)
            return path[::-1]
        if cur in closed:
            continue
        closed.add(cur)
        for ni, nj, c, e in _neighbours(walk, *cur, extra):
            ng = g[cur] + c + e
            if ng < g.get((ni, nj), float("inf")):
                g[(ni, nj)] = ng
                parent[(ni, nj)] = cur
                dx, dz = abs(ni - gi), abs(nj - gj)
                h = max(dx, dz) + (SQRT2 - 1) * min(dx, dz)
                heapq.heappush(heap, (ng + h, (ni, nj)))
    return None


def distance_field(house: House, sources: list[tuple[int, int]], extra: np.ndarray | None = None,
                   start_m: Sequence[float] | None = None) -> np.ndarray:
    """Geodesic distance in metres (8-connected, no corner cutting) from the nearest source cell; with
    ``extra`` (per-cell added cost in cells, e.g. :func:`clearance_cost`) a cost field rather than a distance.
    ``start_m`` gives each source a distance already travelled (metres), so the field is the shortest
    continuation of walks that end at the sources (the exact L* of :mod:`.metrics` chains hops this way)."""
    walk = _walkable(house)
    dist = np.full(walk.shape, np.inf)
    heap = []
    for k, s in enumerate(sources):
        d0 = 0.0 if start_m is None else float(start_m[k]) / CELL
        if d0 < dist[s]:
            dist[s] = d0
            heap.append((d0, s))
    heapq.heapify(heap)
    while heap:
        d, (ci, cj) = heapq.heappop(heap)
        if d > dist[ci, cj]:
            continue
        for ni, nj, c, e in _neighbours(walk, ci, cj, extra):
            nd = d + c + e
            if nd < dist[ni, nj]:
                dist[ni, nj] = nd
                heapq.heappush(heap, (nd, (ni, nj)))
    return dist * CELL


class AStarNavigator:
    """Point-goal navigation with the map: A* on the grid, then turn-and-forward along the path.

    This is SayNav's OrNav (Sec. 4.3): the shortest-path planner with access to the map. The agent
    aims at a look-ahead point on the path, turns in ``turn_deg`` steps to the nearest multiple of
    ``turn_deg``, and moves forward; a blocked move or drifting off the path triggers a re-plan.
    """

    name = "astar"

    def __init__(self, tolerance_m: float = 0.3, max_replans: int = 6) -> None:
        self.tolerance_m = tolerance_m
        self.max_replans = max_replans
        self._extra: dict[int, np.ndarray] = {}

    def navigate(self, sim: HouseSim, goal: tuple[float, float]) -> tuple[bool, list[Detection], str]:
        house = sim.house
        key = id(house)
        if key not in self._extra:
            self._extra = {key: clearance_cost(house)}
        extra = self._extra[key]
        a = sim.agent
        start = (int(a.x // CELL), int(a.z // CELL))
        target = nearest_free_cell(house, goal[0], goal[1])
        if target is None:
            return False, [], "no walkable cell near the goal"
        seen: list[Detection] = []
        for _replan in range(self.max_replans):
            start = (int(a.x // CELL), int(a.z // CELL))
            path = astar(house, start, target, extra)
            if path is None:
                return False, seen, "goal unreachable"
            pts = [((i + 0.5) * CELL, (j + 0.5) * CELL) for i, j in path]
            ok, det = self._follow(sim, pts)
            seen += det
            if ok:
                return True, seen, "reached"
            if sim.out_of_steps:
                return False, seen, "step limit reached"
        return False, seen, "blocked"

    def _follow(self, sim: HouseSim, pts: list[tuple[float, float]]) -> tuple[bool, list[Detection]]:
        a = sim.agent
        seen: list[Detection] = []
        k = 0
        blocked = 0
        while not sim.out_of_steps:
            gx, gz = pts[-1]
            if math.hypot(gx - a.x, gz - a.z) <= self.tolerance_m:
                return True, seen
            # progress along the path: nearest point ahead, aim two points further
            k = min(range(k, len(pts)), key=lambda q: math.hypot(pts[q][0] - a.x, pts[q][1] - a.z))
            if math.hypot(pts[k][0] - a.x, pts[k][1] - a.z) > 0.6:
                return False, seen  # drifted: re-plan
            tx, tz = pts[min(k + 2, len(pts) - 1)]
            want = math.degrees(math.atan2(tz - a.z, tx - a.x))
            step = sim.turn_deg
            diff = (want - a.heading + 180.0) % 360.0 - 180.0
            if abs(diff) > step / 2:
                seen += sim.turn(step if diff > 0 else -step)
                continue
            ok, det = sim.forward()
            seen += det
            if not ok:
                blocked += 1
                # sidestep: try the neighbouring headings once
                seen += sim.turn(step if diff > 0 else -step)
                ok2, det = sim.forward()
                seen += det
                if not ok2 or blocked > 3:
                    return False, seen
        return False, seen
