"""Procedural, seeded multi-room houses on a 0.25 m occupancy grid.

A house is a rectangle split by binary space partitioning into 3-10 rectangular rooms separated by
one-cell walls; a random spanning tree over wall-sharing rooms (plus a few extra links) gets 1 m
doors, so every room is reachable. Each room gets a type, furniture (large objects) from
:mod:`groundplan.envs.house.catalog` placed against its walls without blocking doors, and small
objects in free cells next to the furniture ("near", SayNav Sec. 3.3). The same seed always gives
the same house, so task ids name houses and thousands of distinct ones exist.

Coordinates: cell (i, j) has its centre at x = (i + 0.5) * CELL, z = (j + 0.5) * CELL metres.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from groundplan.core.errors import GroundplanError
from groundplan.envs.house.catalog import EXTRA_ROOM_WEIGHTS, ROOM_FURNITURE

CELL = 0.25  #: metres per grid cell (also the forward step of the agent, SayNav Sec. 3.1)
FREE, WALL, FURNITURE, DOOR = 0, 1, 2, 3
MIN_ROOM = 12  #: minimum room side in cells (3 m)
DOOR_CELLS = 4  #: door width in cells (1 m)


@dataclass(frozen=True)
class Room:
    """A rectangular room; ``bounds`` are the interior cells [i0, i1) x [j0, j1)."""

    room_id: int
    type: str
    bounds: tuple[int, int, int, int]

    @property
    def name(self) -> str:
        return f"{self.type}{self.room_id}"

    def bounds_m(self) -> tuple[float, float, float, float]:
        """(x_min, z_min, x_max, z_max) in metres."""
        i0, j0, i1, j1 = self.bounds
        return (i0 * CELL, j0 * CELL, i1 * CELL, j1 * CELL)

    def contains_cell(self, i: int, j: int) -> bool:
        i0, j0, i1, j1 = self.bounds
        return i0 <= i < i1 and j0 <= j < j1

    def center_m(self) -> tuple[float, float]:
        x0, z0, x1, z1 = self.bounds_m()
        return ((x0 + x1) / 2, (z0 + z1) / 2)


@dataclass(frozen=True)
class Door:
    """A 1 m opening between two rooms; ``cells`` are the wall cells it opens."""

    door_id: int
    rooms: tuple[int, int]
    cells: tuple[tuple[int, int], ...]
    #: "x": the wall runs along x (door crossed by moving in z); "z": the wall runs along z
    axis: str

    @property
    def position(self) -> tuple[float, float]:
        xs = [(i + 0.5) * CELL for i, _ in self.cells]
        zs = [(j + 0.5) * CELL for _, j in self.cells]
        return (float(np.mean(xs)), float(np.mean(zs)))


@dataclass(frozen=True)
class Obj:
    """A large (furniture) or small object; small ones name the large object they are near."""

    obj_id: int
    category: str
    position: tuple[float, float]
    room_id: int
    large: bool
    cells: tuple[tuple[int, int], ...] = ()
    near: int | None = None


@dataclass
class House:
    """A generated house: grid, rooms, doors and objects, plus the seed it came from."""

    seed: int
    grid: np.ndarray  # (W, H) uint8 of FREE/WALL/FURNITURE/DOOR
    rooms: list[Room]
    doors: list[Door]
    objects: list[Obj]
    room_of_cell: np.ndarray = field(repr=False, default=None)  # (W, H) int16, -1 outside rooms

    @property
    def size_m(self) -> tuple[float, float]:
        return (self.grid.shape[0] * CELL, self.grid.shape[1] * CELL)

    def free(self, i: int, j: int) -> bool:
        """Walkable: inside the grid and free floor or a door opening."""
        return 0 <= i < self.grid.shape[0] and 0 <= j < self.grid.shape[1] and self.grid[i, j] in (FREE, DOOR)

    def room_at(self, x: float, z: float) -> int | None:
        i, j = int(x // CELL), int(z // CELL)
        if 0 <= i < self.grid.shape[0] and 0 <= j < self.grid.shape[1]:
            r = int(self.room_of_cell[i, j])
            return r if r >= 0 else None
        return None

    def small_objects(self) -> list[Obj]:
        return [o for o in self.objects if not o.large]


def _split(rng: np.random.Generator, rects: list[tuple[int, int, int, int]], n: int) -> list[tuple[int, int, int, int]]:
    """BSP: split the largest splittable interior rect by a one-cell wall until there are ``n``."""
    while len(rects) < n:
        order = sorted(range(len(rects)), key=lambda k: -(rects[k][2] - rects[k][0]) * (rects[k][3] - rects[k][1]))
        for k in order:
            i0, j0, i1, j1 = rects[k]
            w, h = i1 - i0, j1 - j0
            vertical = w >= h if abs(w - h) > 4 else bool(rng.random() < 0.5)
            span = w if vertical else h
            if span < 2 * MIN_ROOM + 1:
                vertical = not vertical
                span = w if vertical else h
                if span < 2 * MIN_ROOM + 1:
                    continue
            lo = MIN_ROOM
            hi = span - MIN_ROOM - 1
            c = int(rng.integers(lo, hi + 1))
            if vertical:
                a, b = (i0, j0, i0 + c, j1), (i0 + c + 1, j0, i1, j1)
            else:
                a, b = (i0, j0, i1, j0 + c), (i0, j0 + c + 1, i1, j1)
            rects[k:k + 1] = [a, b]
            break
        else:
            raise GroundplanError("house too small to split into the requested rooms")
    return rects


def _adjacent(a: tuple[int, int, int, int], b: tuple[int, int, int, int]) -> tuple[str, int, int, int] | None:
    """Shared wall of two interior rects: (axis, wall coordinate, overlap lo, overlap hi) or None."""
    if a[2] + 1 == b[0] or b[2] + 1 == a[0]:  # wall along z at column between them
        col = a[2] if a[2] + 1 == b[0] else b[2]
        lo, hi = max(a[1], b[1]), min(a[3], b[3])
        return ("z", col, lo, hi) if hi - lo >= DOOR_CELLS + 2 else None
    if a[3] + 1 == b[1] or b[3] + 1 == a[1]:
        row = a[3] if a[3] + 1 == b[1] else b[3]
        lo, hi = max(a[0], b[0]), min(a[2], b[2])
        return ("x", row, lo, hi) if hi - lo >= DOOR_CELLS + 2 else None
    return None


def _room_types(rng: np.random.Generator, n: int) -> list[str]:
    types = ["LivingRoom", "Kitchen", "Bedroom", "Bathroom"][:n]
    names, weights = zip(*EXTRA_ROOM_WEIGHTS.items())
    p = np.array(weights) / sum(weights)
    types += [names[int(rng.choice(len(names), p=p))] for _ in range(n - len(types))]
    order = rng.permutation(n)
    return [types[int(k)] for k in order]


def _connected_free(grid: np.ndarray, cells: list[tuple[int, int]]) -> bool:
    """All FREE/DOOR cells in ``cells`` (a room plus its doors) form one 4-connected component."""
    cellset = {c for c in cells if grid[c] in (FREE, DOOR)}
    if not cellset:
        return False
    start = next(iter(cellset))
    seen = {start}
    queue = deque([start])
    while queue:
        i, j = queue.popleft()
        for d in ((1, 0), (-1, 0), (0, 1), (0, -1)):
            c = (i + d[0], j + d[1])
            if c in cellset and c not in seen:
                seen.add(c)
                queue.append(c)
    return len(seen) == len(cellset)


def _place_furniture(rng: np.random.Generator, grid: np.ndarray, room: Room, door_cells: list[tuple[int, int]],
                     next_id: int) -> list[Obj]:
    """Furniture of the room's type against its walls, keeping doors clear and the floor connected."""
    i0, j0, i1, j1 = room.bounds
    keep_clear = {(di + a, dj + b) for di, dj in door_cells for a in range(-3, 4) for b in range(-3, 4)}
    room_cells = [(i, j) for i in range(i0, i1) for j in range(j0, j1)] + door_cells
    out: list[Obj] = []
    for f in ROOM_FURNITURE[room.type]:
        if rng.random() >= f.prob:
            continue
        for _attempt in range(30):
            w, h = f.size if rng.random() < 0.5 else (f.size[1], f.size[0])
            if w > i1 - i0 - 2 or h > j1 - j0 - 2:
                continue
            side = int(rng.integers(5))  # 0-3 against a wall, 4 free-standing
            if side == 0:
                a, b = i0, int(rng.integers(j0, j1 - h + 1))
            elif side == 1:
                a, b = i1 - w, int(rng.integers(j0, j1 - h + 1))
            elif side == 2:
                a, b = int(rng.integers(i0, i1 - w + 1)), j0
            elif side == 3:
                a, b = int(rng.integers(i0, i1 - w + 1)), j1 - h
            else:
                if i1 - i0 - w - 4 < 1 or j1 - j0 - h - 4 < 1:
                    continue
                a, b = int(rng.integers(i0 + 2, i1 - w - 1)), int(rng.integers(j0 + 2, j1 - h - 1))
            cells = [(a + x, b + y) for x in range(w) for y in range(h)]
            halo = {(c[0] + dx, c[1] + dy) for c in cells for dx in (-1, 0, 1) for dy in (-1, 0, 1)}
            if any(grid[c] == FURNITURE for c in halo if 0 <= c[0] < grid.shape[0] and 0 <= c[1] < grid.shape[1]):
                continue
            if keep_clear.intersection(cells):
                continue
            for c in cells:
                grid[c] = FURNITURE
            if not _connected_free(grid, room_cells):
                for c in cells:
                    grid[c] = FREE
                continue
            pos = ((a + w / 2) * CELL, (b + h / 2) * CELL)
            out.append(Obj(next_id + len(out), f.name, pos, room.room_id, True, tuple(cells)))
            break
    return out


def _place_small(rng: np.random.Generator, grid: np.ndarray, large: list[Obj], room_types: dict[int, str],
                 next_id: int) -> list[Obj]:
    """0-2 small objects next to each piece of furniture, from the furniture's list (on or near it)."""
    by_name = {f.name: f for fs in ROOM_FURNITURE.values() for f in fs}
    out: list[Obj] = []
    used: set[tuple[int, int]] = set()
    for obj in large:
        spec = next((f for f in ROOM_FURNITURE[room_types[obj.room_id]] if f.name == obj.category), by_name[obj.category])
        cellset = set(obj.cells)
        rim = sorted({(c[0] + d[0], c[1] + d[1]) for c in obj.cells for d in ((1, 0), (-1, 0), (0, 1), (0, -1))}
                     - cellset)
        rim = [c for c in rim if 0 <= c[0] < grid.shape[0] and 0 <= c[1] < grid.shape[1] and grid[c] == FREE
               and c not in used]
        k = int(rng.integers(0, 3))
        cats = list(rng.permutation(spec.small))[:k]
        for cat in cats:
            if not rim:
                break
            cell = rim.pop(int(rng.integers(len(rim))))
            used.add(cell)
            inner = min(obj.cells, key=lambda c: abs(c[0] - cell[0]) + abs(c[1] - cell[1]))
            # "on" the furniture edge: halfway between the rim cell and the furniture cell
            pos = ((cell[0] + inner[0] + 1) / 2 * CELL, (cell[1] + inner[1] + 1) / 2 * CELL)
            out.append(Obj(next_id + len(out), str(cat), pos, obj.room_id, False, (cell,), near=obj.obj_id))
    return out


def generate_house(seed: int, min_rooms: int = 3, max_rooms: int = 10) -> House:
    """The house of ``seed``: 3-10 rooms (uniform in [min_rooms, max_rooms]), doors, furniture, small objects."""
    if not 2 <= min_rooms <= max_rooms <= 12:
        raise GroundplanError(f"need 2 <= min_rooms <= max_rooms <= 12, got {min_rooms}, {max_rooms}")
    for attempt in range(50):
        rng = np.random.default_rng([int(seed), attempt, 13])
        n = int(rng.integers(min_rooms, max_rooms + 1))
        house = _try_generate(rng, seed, n)
        if house is not None:
            return house
    raise GroundplanError(f"could not generate a connected house for seed {seed}")


def _try_generate(rng: np.random.Generator, seed: int, n: int) -> House | None:
    area = n * float(rng.uniform(14, 22)) / CELL**2
    aspect = float(rng.uniform(0.7, 1.4))
    W = max(2 * MIN_ROOM + 3, int(np.sqrt(area * aspect)))
    H = max(2 * MIN_ROOM + 3, int(area / W))
    try:
        rects = _split(rng, [(1, 1, W + 1, H + 1)], n)
    except GroundplanError:
        return None
    grid = np.full((W + 2, H + 2), WALL, dtype=np.uint8)
    types = _room_types(rng, n)
    rooms = [Room(k, types[k], r) for k, r in enumerate(rects)]
    room_of_cell = np.full(grid.shape, -1, dtype=np.int16)
    for room in rooms:
        i0, j0, i1, j1 = room.bounds
        grid[i0:i1, j0:j1] = FREE
        room_of_cell[i0:i1, j0:j1] = room.room_id
    # doors: random spanning tree over wall-sharing rooms, plus extra links with probability 0.25
    links = [(a, b, adj) for a in range(n) for b in range(a + 1, n) if (adj := _adjacent(rects[a], rects[b]))]
    order = rng.permutation(len(links))
    parent = list(range(n))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    chosen = []
    for k in order:
        a, b, adj = links[int(k)]
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[ra] = rb
            chosen.append(links[int(k)])
        elif rng.random() < 0.25:
            chosen.append(links[int(k)])
    if len({find(k) for k in range(n)}) != 1:
        return None
    doors = []
    for a, b, (axis, wall, lo, hi) in chosen:
        start = int(rng.integers(lo + 1, hi - DOOR_CELLS))
        cells = tuple((wall, t) if axis == "z" else (t, wall) for t in range(start, start + DOOR_CELLS))
        for c in cells:
            grid[c] = DOOR
        doors.append(Door(len(doors), (a, b), cells, "z" if axis == "z" else "x"))
    objects: list[Obj] = []
    for room in rooms:
        door_cells = [c for d in doors if room.room_id in d.rooms for c in d.cells]
        objects += _place_furniture(rng, grid, room, door_cells, len(objects))
    objects += _place_small(rng, grid, [o for o in objects if o.large], {r.room_id: r.type for r in rooms},
                           len(objects))
    return House(seed=seed, grid=grid, rooms=rooms, doors=doors, objects=objects, room_of_cell=room_of_cell)
