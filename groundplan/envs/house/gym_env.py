"""Point-goal navigation in a generated house as a ``gymnasium.Env`` (SayNav Sec. 3.5's PointNav
sub-task), so RLlib and other RL code can train the low-level policy on the embedded simulator.

Observation: ``goal`` = (distance, sin, cos of the bearing relative to the heading) and ``ranges`` =
free distance along 12 rays around the agent (a depth-like scan, clipped at 3 m). Actions: 0 forward,
1 turn left, 2 turn right, 3 stop. Success: stop within 1.5 m of the goal (the paper's radius).
Reward: progress in geodesic distance, +10 on success, -0.01 per step.
"""
from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np

from groundplan.envs.house.layout import CELL, generate_house
from groundplan.envs.house.sim import (
    HouseSim,
    PerceptionParams,
    distance_field,
    nearest_free_cell,
)


class HousePointNavEnv(gym.Env):
    metadata = {"render_modes": []}

    def __init__(self, seeds: tuple[int, int] = (0, 1000), max_steps: int = 300, success_radius: float = 1.5) -> None:
        self.seeds = seeds
        self.max_steps = max_steps
        self.success_radius = success_radius
        self.action_space = gym.spaces.Discrete(4)
        self.observation_space = gym.spaces.Dict({
            "goal": gym.spaces.Box(low=np.array([0, -1, -1], np.float32), high=np.array([100, 1, 1], np.float32)),
            "ranges": gym.spaces.Box(low=0.0, high=3.0, shape=(12,), dtype=np.float32)})

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        rng = self.np_random
        house = generate_house(int(rng.integers(*self.seeds)), 3, 6)
        free = np.argwhere((house.grid == 0) & (house.room_of_cell >= 0))
        (si, sj), (gi, gj) = free[rng.choice(len(free), size=2, replace=False)]
        self.goal = ((gi + 0.5) * CELL, (gj + 0.5) * CELL)
        self.field = distance_field(house, [nearest_free_cell(house, *self.goal)])
        self.sim = HouseSim(house, ((si + 0.5) * CELL, (sj + 0.5) * CELL, float(rng.choice([0, 90, 180, 270]))),
                            PerceptionParams(), np.random.default_rng(0), max_steps=10**9)
        self.steps = 0
        self.shortest = self._geo()
        return self._obs(), {"shortest_m": self.shortest}

    def _geo(self) -> float:
        a = self.sim.agent
        return float(self.field[int(a.x // CELL), int(a.z // CELL)])

    def _obs(self) -> dict[str, np.ndarray]:
        a, house = self.sim.agent, self.sim.house
        dx, dz = self.goal[0] - a.x, self.goal[1] - a.z
        rel = math.atan2(dz, dx) - math.radians(a.heading)
        ranges = []
        for k in range(12):
            ang = math.radians(a.heading + 30 * k)
            r = 0.0
            while r < 3.0 and house.free(int((a.x + r * math.cos(ang)) // CELL), int((a.z + r * math.sin(ang)) // CELL)):
                r += CELL / 2
            ranges.append(min(r, 3.0))
        return {"goal": np.array([math.hypot(dx, dz), math.sin(rel), math.cos(rel)], np.float32),
                "ranges": np.array(ranges, np.float32)}

    def step(self, action: int):
        before = self._geo()
        self.steps += 1
        if action == 3:
            ok = math.hypot(self.goal[0] - self.sim.agent.x, self.goal[1] - self.sim.agent.z) <= self.success_radius
            return self._obs(), (10.0 if ok else 0.0), True, False, {"success": ok, "path_m": self.sim.agent.path_m,
                                                                   "shortest_m": self.shortest}
        if action == 0:
            self.sim.forward()
        else:
            self.sim.turn(30.0 if action == 1 else -30.0)
        reward = (before - self._geo()) - 0.01
        truncated = self.steps >= self.max_steps
        return self._obs(), float(reward), False, truncated, {"success": False, "path_m": self.sim.agent.path_m,
                                                              "shortest_m": self.shortest}
