"""MultiON measures (SayNav Sec. 4.2): the shortest path over all target orders that SPL divides by, and
Kendall tau between the found order and the optimal order. SR and SPL themselves are defined once, in
:mod:`groundplan.core.measures` (:func:`~groundplan.core.measures.spl`), for the point-goal trainer too.

The shortest path visits, for each target, a *viewpoint*: a walkable cell within the found radius
(2.5 m) with a clear line of sight to it, since a target counts as found when it is seen from there.
L* is the exact minimum, over the target orders and over the viewpoint of each target, of the chained
geodesic hops start → viewpoint(t1) → viewpoint(t2) → viewpoint(t3) on the simulator's grid. Choosing
each hop's nearest viewpoint instead is not even a bound: that viewpoint can be a poor start for the
next hop (too long), and steepest descent on a distance field can end at a viewpoint other than the
nearest (too short). The paper runs A* over target positions (Sec. 4.1).
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from groundplan.envs.house.layout import CELL, House, Obj
from groundplan.envs.house.sim import distance_field, line_of_sight


def viewpoints(house: House, obj: Obj, radius: float) -> list[tuple[int, int]]:
    """Walkable cells within ``radius`` (minus half a cell) of ``obj`` that see it past every wall."""
    x, z = obj.position
    r = int(math.ceil(radius / CELL))
    ci, cj = int(x // CELL), int(z // CELL)
    out = []
    for i in range(ci - r, ci + r + 1):
        for j in range(cj - r, cj + r + 1):
            cx, cz = (i + 0.5) * CELL, (j + 0.5) * CELL
            if house.free(i, j) and math.hypot(cx - x, cz - z) <= radius - CELL / 2 and line_of_sight(house, (cx, cz), (x, z)):
                out.append((i, j))
    return out


@dataclass(frozen=True)
class ShortestTour:
    length_m: float
    order: tuple[str, ...]


def shortest_tour(house: House, start: tuple[float, float], targets: Sequence[Obj], radius: float = 2.5) -> ShortestTour:
    """L* and the order that achieves it (SayNav's ``shortest_path_targets_order``, Sec. 4.1), exact.

    ``walks[prefix]`` is the field of the shortest walks from the start that see the prefix's targets in
    its order (each from one of its viewpoints) and then end at a cell: a distance field seeded at the
    last target's viewpoints with the walk so far. The last hop needs no such field: the distance to a
    target's nearest viewpoint is the same field from every cell. For three targets that is 7 Dijkstra
    runs (start, three targets, three one-target prefixes), each prefix shared by the orders that begin
    with it."""
    vps = {t.obj_id: viewpoints(house, t, radius) for t in targets}
    categories = tuple(t.category for t in targets)
    if not targets or not all(vps.values()):
        return ShortestTour(0.0 if not targets else float("inf"), categories)
    start_cell = (int(start[0] // CELL), int(start[1] // CELL))
    to_target = {t.obj_id: distance_field(house, vps[t.obj_id]) for t in targets}
    walks: dict[tuple[int, ...], np.ndarray] = {(): distance_field(house, [start_cell])}

    def walk(prefix: tuple[int, ...]) -> np.ndarray:
        if prefix not in walks:
            before = walk(prefix[:-1])
            seeds = [c for c in vps[prefix[-1]] if np.isfinite(before[c])]
            walks[prefix] = (distance_field(house, seeds, start_m=[float(before[c]) for c in seeds]) if seeds
                             else np.full(house.grid.shape, np.inf))
        return walks[prefix]

    best = ShortestTour(float("inf"), categories)
    for perm in itertools.permutations(targets):
        ids = tuple(t.obj_id for t in perm)
        if len(ids) == 1:
            total = float(to_target[ids[0]][start_cell])
        else:  # the walk through all but the last two, to a viewpoint of the one before last, then the last hop
            before, last = walk(ids[:-2]), to_target[ids[-1]]
            total = min(float(before[c] + last[c]) for c in vps[ids[-2]])
        if total < best.length_m:
            best = ShortestTour(total, tuple(t.category for t in perm))
    return best


def kendall_tau_b(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Kendall's tau-b of paired ranks (Kendall 1945, "The treatment of ties in ranking problems",
    Biometrika 33(3)): ``(n_c - n_d) / sqrt((n_0 - n_1) (n_0 - n_2))`` with n_0 = n(n-1)/2 pairs, n_c / n_d
    the concordant / discordant pairs, and n_1 / n_2 the pairs tied in ``x`` / in ``y``. A pair tied in
    either ranking counts as neither concordant nor discordant, and the denominator shrinks so that a
    perfect agreement with ties is still 1. ``None`` where it is undefined: fewer than two items, or
    every item tied in one ranking (a zero denominator). This is what ``scipy.stats.kendalltau`` computes
    by default; it is written out because scipy is no dependency of groundplan."""
    if len(x) != len(y):
        raise ValueError(f"kendall_tau_b: {len(x)} ranks against {len(y)}")
    n0 = len(x) * (len(x) - 1) // 2
    conc = disc = tied_x = tied_y = 0
    for i, j in itertools.combinations(range(len(x)), 2):
        dx, dy = x[i] - x[j], y[i] - y[j]
        tied_x += dx == 0
        tied_y += dy == 0
        if dx * dy > 0:
            conc += 1
        elif dx * dy < 0:
            disc += 1
    denom = math.sqrt((n0 - tied_x) * (n0 - tied_y))
    return None if denom == 0 else (conc - disc) / denom


def kendall_tau(found_at: Mapping[str, float], optimal: Sequence[str]) -> float | None:
    """Kendall tau between the order the targets were found in and the optimal order (SayNav Sec. 4.2).

    ``found_at`` maps each found target to when it was found (the simulator step). Targets first seen
    at the same step were found together, with no order between them: they are ties, so this is tau-b
    (:func:`kendall_tau_b`), not an order invented by breaking the tie. Targets absent from either side
    are left out; ``None`` where tau is undefined (fewer than two common targets, or all found at once)."""
    common = [x for x in optimal if x in found_at]
    return kendall_tau_b([float(found_at[x]) for x in common], [float(k) for k in range(len(common))])
