"""The learned point-goal navigator: an RLlib policy (trained by ``groundplan train
configs/train_pointnav_house.yaml``) that executes ``navigate to (x, z)`` in the house env instead of A*.

SayNav Sec. 3.5 trains its low-level PointNav policy by imitation of a shortest-path expert (DAgger);
ours is trained the same way with RLlib's behaviour cloning (:mod:`groundplan.pipelines.train.pointnav`).
The policy sees only what a robot with a depth scan and odometry has: the goal's distance and bearing
and 24 free-space ranges (:func:`~groundplan.envs.house.gym_env.pointnav_features`), never the map. It
acts until it chooses *stop*, greedily or by sampling its action distribution (``action`` in
``pointnav.json``: a memoryless policy that acts greedily can repeat the same few moves forever where
its view is ambiguous, and sampling breaks such loops; measured by the trainer on held-out houses).

The navigator never reads the map either. The policy was trained on goals at the centres of walkable
cells, while a planner's goal may lie inside furniture (SayNav's plans navigate to objects' positions,
Sec. 3.3). So the navigator remembers the cells its own scans have shown free (:class:`ScanMemory`: along
each of the 24 rays, every cell short of the measured range, from every pose of the episode's
navigations) and steers to the goal's cell when a scan has shown it free, else to the scanned-free cell
nearest the goal, re-chosen after every scan as more is seen. The step succeeds when the policy stopped
within the radius it was trained for of that cell. The model is an RLlib ``RLModule`` saved with
``save_to_path`` next to ``pointnav.json`` (its training settings and scores), loaded by MLflow URI
(``models:/pointnav-house/1``) or folder.
"""
from __future__ import annotations

import json
import math
import threading
from pathlib import Path
from typing import Any

import numpy as np

from groundplan.core.errors import MissingModelError
from groundplan.envs.house.gym_env import N_RAYS, STOP, TURN_DEG, pointnav_features, ray_ranges
from groundplan.envs.house.layout import CELL
from groundplan.envs.house.sim import Detection, HouseSim

META = "pointnav.json"
MODULE_DIR = "rl_module"

_LOADED: dict[tuple[str, str | None], tuple[Any, dict[str, Any]]] = {}
_LOCK = threading.Lock()


def load_policy(uri: str, tracking_uri: str | None = None) -> tuple[Any, dict[str, Any]]:
    """(RLModule, metadata) for ``uri``, once per process."""
    key = (uri, tracking_uri)
    with _LOCK:
        if key not in _LOADED:
            from groundplan.core.model_uri import resolve_model_folder

            folder = resolve_model_folder(uri, tracking_uri, marker=META, what="point-goal policy", cache="pointnav")
            meta = json.loads((folder / META).read_text())
            try:
                from ray.rllib.core.rl_module.rl_module import RLModule

                module = RLModule.from_checkpoint(str(Path(folder) / MODULE_DIR))
            except Exception as e:  # RLlib raises several types for a damaged checkpoint
                raise MissingModelError(f"{uri}: cannot load the RLlib module in {folder / MODULE_DIR}: {e}") from e
            module.eval()
            _LOADED[key] = (module, meta)
        return _LOADED[key]


def choose_action(module: Any, features: Any, rng: Any = None) -> int:
    """The policy's action for one observation: the most likely, or drawn from its distribution with
    ``rng`` (a ``numpy.random.Generator``)."""
    import torch

    with torch.no_grad():
        logits = module.forward_inference({"obs": torch.as_tensor(features)[None]})["action_dist_inputs"][0]
    if rng is None:
        return int(torch.argmax(logits))
    p = torch.softmax(logits.double(), 0).numpy()
    return int(rng.choice(len(p), p=p / p.sum()))


class ScanMemory:
    """The cells a robot's own depth scans have shown free in one episode (no map): a scan's ray k, at
    ``heading + k·360°/N_RAYS``, measured free range r (:func:`~groundplan.envs.house.gym_env.ray_ranges`,
    sampled every cell), so the cells at 0, 1, ... cells along it, short of r, are free."""

    def __init__(self) -> None:
        self.cells: set[tuple[int, int]] = set()
        self._array: np.ndarray | None = None

    def add_scan(self, x: float, z: float, heading: float, ranges: list[float]) -> None:
        before = len(self.cells)
        for k, r in enumerate(ranges):
            ang = math.radians(heading + 360.0 / N_RAYS * k)
            c, s = math.cos(ang), math.sin(ang)
            for step in range(int(round(r / CELL))):
                d = step * CELL
                self.cells.add((int((x + d * c) // CELL), int((z + d * s) // CELL)))
        if len(self.cells) != before:
            self._array = None

    def goal_cell(self, goal: tuple[float, float]) -> tuple[int, int] | None:
        """The goal's cell if a scan showed it free, else the scanned-free cell whose centre is nearest the
        goal (first found on ties); None before any scan."""
        if not self.cells:
            return None
        cell = (int(goal[0] // CELL), int(goal[1] // CELL))
        if cell in self.cells:
            return cell
        if self._array is None:
            self._array = np.array(sorted(self.cells), dtype=float)
        d2 = ((self._array + 0.5) * CELL - np.asarray(goal, dtype=float)) ** 2
        i, j = self._array[int(np.argmin(d2.sum(1)))]
        return int(i), int(j)


class LearnedNavigator:
    """``navigate(sim, goal)`` with the learned policy; same contract as
    :class:`~groundplan.envs.house.sim.AStarNavigator` (ok, detections on the way, reason), without its map
    (module doc)."""

    name = "learned"

    def __init__(self, model_uri: str, tracking_uri: str | None = None, max_policy_steps: int = 400) -> None:
        self.module, self.meta = load_policy(model_uri, tracking_uri)
        self.success_radius = float(self.meta["success_radius"])
        self.sample = self.meta.get("action", "greedy") == "sample"
        self.max_policy_steps = max_policy_steps
        self._memory = ScanMemory()
        self._episode: HouseSim | None = None

    def act(self, features: Any, rng: Any = None) -> int:
        return choose_action(self.module, features, rng if self.sample else None)

    def memory(self, sim: HouseSim) -> ScanMemory:
        """The scan memory of ``sim``'s episode (a new one for a new episode)."""
        if self._episode is not sim:
            self._episode, self._memory = sim, ScanMemory()
        return self._memory

    def navigate(self, sim: HouseSim, goal: tuple[float, float]) -> tuple[bool, list[Detection], str]:
        a = sim.agent
        memory = self.memory(sim)
        seen: list[Detection] = []
        prev: int | None = None
        gx, gz = goal
        for _ in range(self.max_policy_steps):
            if sim.out_of_steps:
                return False, seen, "step limit reached"
            memory.add_scan(a.x, a.z, a.heading, ray_ranges(sim.house, a.x, a.z, a.heading))
            cell = memory.goal_cell(goal)
            if cell is not None:
                gx, gz = (cell[0] + 0.5) * CELL, (cell[1] + 0.5) * CELL
            action = self.act(pointnav_features(sim.house, a.x, a.z, a.heading, (gx, gz), prev), sim.rng)
            if action == STOP:
                d = math.hypot(gx - a.x, gz - a.z)
                if d <= self.success_radius:
                    return True, seen, "reached"
                return False, seen, f"stopped {d:.2f} m from the goal"
            if action == 0:
                seen += sim.forward()[1]
            else:
                seen += sim.turn(TURN_DEG if action == 1 else -TURN_DEG)
            prev = action
        return False, seen, f"no stop within {self.max_policy_steps} policy steps"
