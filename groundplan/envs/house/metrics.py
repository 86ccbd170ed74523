"""MultiON measures (SayNav Sec. 4.2): SR, SPL with the shortest path over all target orders, and
Kendall tau between the found order and the optimal order.

The shortest path visits, for each target, a *viewpoint*: a walkable cell within the found radius
(2.5 m) with a clear line of sight to it, since a target counts as found when it is seen from there.
For each of the 3! orders the path chains geodesic hops start → viewpoint(t1) → viewpoint(t2) →
viewpoint(t3), each hop to the nearest viewpoint of the next target; the minimum over orders is L*.
(The greedy choice of viewpoint per hop makes L* an upper bound of the true optimum by at most the
slack inside a 2.5 m disc; the paper runs A* over target positions the same way, Sec. 4.1.)
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Sequence

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
    """L* and the order that achieves it (SayNav's ``shortest_path_targets_order``, Sec. 4.1)."""
    vps = {t.obj_id: viewpoints(house, t, radius) for t in targets}
    fields = {t.obj_id: distance_field(house, vps[t.obj_id]) if vps[t.obj_id] else None for t in targets}
    start_cell = (int(start[0] // CELL), int(start[1] // CELL))
    best = ShortestTour(float("inf"), tuple(t.category for t in targets))
    for perm in itertools.permutations(targets):
        cell, total = start_cell, 0.0
        for t in perm:
            f = fields[t.obj_id]
            if f is None or not np.isfinite(f[cell]):
                total = float("inf")
                break
            total += float(f[cell])
            # arrive at the viewpoint of t nearest to where we are: follow the field downhill
            cell = _descend(f, cell)
        if total < best.length_m:
            best = ShortestTour(total, tuple(t.category for t in perm))
    return best


def _descend(field: np.ndarray, cell: tuple[int, int]) -> tuple[int, int]:
    """Walk steepest-descent on a distance field to the source cell it measures to."""
    W, H = field.shape
    while field[cell] > 0:
        i, j = cell
        nbrs = [(i + a, j + b) for a in (-1, 0, 1) for b in (-1, 0, 1) if (a or b) and 0 <= i + a < W and 0 <= j + b < H]
        nxt = min(nbrs, key=lambda c: field[c])
        if field[nxt] >= field[cell]:
            break
        cell = nxt
    return cell


def spl(success: bool, shortest_m: float, path_m: float) -> float:
    """Success weighted by path length (Anderson et al. 2018): S * L* / max(L, L*)."""
    if not success or not np.isfinite(shortest_m):
        return 0.0
    return float(shortest_m / max(path_m, shortest_m, 1e-9))


def kendall_tau(found: Sequence[str], optimal: Sequence[str]) -> float:
    """Kendall's tau between two rankings of the same items: (concordant - discordant) / pairs."""
    common = [x for x in optimal if x in found]
    if len(common) < 2:
        return 1.0
    rank = {x: k for k, x in enumerate(found)}
    conc = disc = 0
    for a, b in itertools.combinations(common, 2):  # a before b in the optimal order
        if rank[a] < rank[b]:
            conc += 1
        else:
            disc += 1
    return (conc - disc) / (conc + disc)


