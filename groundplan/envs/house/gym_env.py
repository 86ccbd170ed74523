"""Point-goal navigation in a generated house as a ``gymnasium.Env`` (SayNav Sec. 3.5's PointNav
sub-task), so RLlib and other RL code can train the low-level policy on the embedded simulator.

Observation (a flat ``Box`` of :data:`OBS_DIM` floats, see :func:`pointnav_features`): the goal as
(distance / 10 m, sin, cos of its bearing relative to the heading), the free distance along 24 rays
around the agent (a depth-like scan every 15°, clipped at 5 m so doorways show as gaps, divided by 5)
and the previous action one-hot.
Actions: 0 forward, 1 turn left, 2 turn right, 3 stop. Success: stop within ``success_radius`` of the
goal. Reward: progress in geodesic distance, +10 on success, -0.01 per step.

Goals are drawn at most ``max_goal_m`` (geodesic) from the start, as SayNav's planner asks for them:
furniture in the current room and points just past a door. :func:`expert_action` is the shortest-path
expert (the A* navigator's behaviour as one action at a time), used to label behaviour-cloning and
DAgger data.
"""
from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np

from groundplan.envs.house.layout import CELL, House, generate_house
from groundplan.envs.house.sim import (
    HouseSim,
    PerceptionParams,
    clearance_cost,
    distance_field,
    forward_target,
    nearest_free_cell,
)

FORWARD, LEFT, RIGHT, STOP = 0, 1, 2, 3
N_ACTIONS = 4
N_RAYS = 24
RAY_MAX_M = 5.0
OBS_DIM = 3 + N_RAYS + N_ACTIONS
TURN_DEG = 30.0


def ray_ranges(house: House, x: float, z: float, heading: float) -> list[float]:
    """Free distance (m) along :data:`N_RAYS` rays evenly spaced from the heading, clipped at
    :data:`RAY_MAX_M` (sampled every cell: a depth scan's resolution is enough for a policy input)."""
    out = []
    for k in range(N_RAYS):
        ang = math.radians(heading + 360.0 / N_RAYS * k)
        c, s = math.cos(ang), math.sin(ang)
        r = 0.0
        while r < RAY_MAX_M and house.free(int((x + r * c) // CELL), int((z + r * s) // CELL)):
            r += CELL
        out.append(min(r, RAY_MAX_M))
    return out


def pointnav_features(house: House, x: float, z: float, heading: float, goal: tuple[float, float],
                      prev_action: int | None) -> np.ndarray:
    """The policy's observation; shared by the gym env and the house env's learned navigator."""
    dx, dz = goal[0] - x, goal[1] - z
    rel = math.atan2(dz, dx) - math.radians(heading)
    prev = np.zeros(N_ACTIONS, np.float32)
    if prev_action is not None:
        prev[int(prev_action)] = 1.0
    head = np.array([min(math.hypot(dx, dz), 30.0) / 10.0, math.sin(rel), math.cos(rel)], np.float32)
    return np.concatenate([head, np.asarray(ray_ranges(house, x, z, heading), np.float32) / RAY_MAX_M, prev])


def expert_action(house: House, cost: np.ndarray, x: float, z: float, heading: float, goal: tuple[float, float],
                  stop_radius: float, lookahead: int = 3) -> int:
    """The shortest-path expert's next action: stop inside ``stop_radius``; otherwise aim at the cell
    ``lookahead`` steps down the cost field (a clearance-aware shortest path to the goal) and turn
    towards it by 30° steps, or move forward when facing it."""
    if math.hypot(goal[0] - x, goal[1] - z) <= stop_radius:
        return STOP
    W, H = cost.shape
    ci, cj = int(x // CELL), int(z // CELL)
    near_goal = 0 <= ci < W and 0 <= cj < H and cost[ci, cj] <= 2 * lookahead * CELL  # not across a wall
    for _ in range(lookahead):
        best, best_v = None, cost[ci, cj] if 0 <= ci < W and 0 <= cj < H else math.inf
        for di in (-1, 0, 1):
            for dj in (-1, 0, 1):
                ni, nj = ci + di, cj + dj
                if (di or dj) and 0 <= ni < W and 0 <= nj < H and cost[ni, nj] < best_v:
                    if di and dj and not (house.free(ci + di, cj) and house.free(ci, cj + dj)):
                        continue
                    best, best_v = (ni, nj), cost[ni, nj]
        if best is None:
            break
        ci, cj = best
    tx, tz = (ci + 0.5) * CELL, (cj + 0.5) * CELL
    if near_goal and math.hypot(goal[0] - x, goal[1] - z) < math.hypot(tx - x, tz - z):
        tx, tz = goal  # the last metre: aim at the goal itself, not at a cell centre past it
    # the heading whose forward step ends nearest the aim point (turns cost a little); turning does
    # not move the agent, so the choice stays the same until it faces that heading: no oscillation
    best_h, best_score = None, math.inf
    for k in range(int(360 / TURN_DEG)):
        nx, nz = forward_target(house, x, z, (heading + k * TURN_DEG) % 360.0)
        if nx is None:
            continue  # blocked that way
        turns = min(k, int(360 / TURN_DEG) - k)
        score = math.hypot(tx - nx, tz - nz) + 0.02 * turns
        if score < best_score:
            best_h, best_score = k, score
    if best_h is None or best_h == 0:
        return FORWARD if best_h == 0 else LEFT
    return LEFT if best_h <= int(180 / TURN_DEG) else RIGHT


class HousePointNavEnv(gym.Env):
    """See the module docstring. ``seeds`` is the half-open range of house seeds to draw from (train and
    evaluation use disjoint ranges)."""

    metadata = {"render_modes": []}

    def __init__(self, seeds: tuple[int, int] = (0, 1000), max_steps: int = 300, success_radius: float = 0.5,
                 max_goal_m: float = 10.0, min_goal_m: float = 1.0, min_rooms: int = 3, max_rooms: int = 10) -> None:
        self.seeds = tuple(seeds)
        self.max_steps = max_steps
        self.success_radius = success_radius
        self.max_goal_m = max_goal_m
        self.min_goal_m = min_goal_m
        self.rooms = (min_rooms, max_rooms)
        self.action_space = gym.spaces.Discrete(N_ACTIONS)
        low = np.array([0, -1, -1] + [0] * N_RAYS + [0] * N_ACTIONS, np.float32)
        high = np.array([3, 1, 1] + [1] * N_RAYS + [1] * N_ACTIONS, np.float32)
        self.observation_space = gym.spaces.Box(low=low, high=high, dtype=np.float32)
        self._houses: dict[int, tuple[House, np.ndarray]] = {}

    def _house(self, seed: int) -> tuple[House, np.ndarray]:
        if seed not in self._houses:
            if len(self._houses) > 32:
                self._houses.clear()
            house = generate_house(seed, *self.rooms)
            self._houses[seed] = (house, clearance_cost(house))
        return self._houses[seed]

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        rng = self.np_random
        while True:
            house, extra = self._house(int(rng.integers(*self.seeds)))
            free = np.argwhere((house.grid == 0) & (house.room_of_cell >= 0))
            si, sj = free[int(rng.integers(len(free)))]
            geo = distance_field(house, [(int(si), int(sj))])
            ok = np.argwhere((geo[free[:, 0], free[:, 1]] <= self.max_goal_m) & (geo[free[:, 0], free[:, 1]] >= self.min_goal_m))
            if len(ok):
                break
        gi, gj = free[ok[int(rng.integers(len(ok)))][0]]
        self.house = house
        self.goal = ((gi + 0.5) * CELL, (gj + 0.5) * CELL)
        goal_cell = nearest_free_cell(house, *self.goal)
        self.field = distance_field(house, [goal_cell])
        self.cost = distance_field(house, [goal_cell], extra)
        start = ((si + 0.5) * CELL, (sj + 0.5) * CELL, float(rng.choice([0, 90, 180, 270])))
        self.sim = HouseSim(house, start, PerceptionParams(), np.random.default_rng(0), turn_deg=TURN_DEG,
                            max_steps=10**9, perceive=False)
        self.steps = 0
        self.prev: int | None = None
        self.shortest = max(self._geo() - self.success_radius, CELL)  # L* of SPL: walk until inside the radius
        return self._obs(), {"shortest_m": self.shortest}

    def _geo(self) -> float:
        a = self.sim.agent
        return float(self.field[int(a.x // CELL), int(a.z // CELL)])

    def _obs(self) -> np.ndarray:
        a = self.sim.agent
        return pointnav_features(self.house, a.x, a.z, a.heading, self.goal, self.prev)

    def expert(self) -> int:
        """The expert's action in the current state (for behaviour cloning and DAgger labels)."""
        a = self.sim.agent
        return expert_action(self.house, self.cost, a.x, a.z, a.heading, self.goal, 0.75 * self.success_radius)

    def step(self, action: int):
        action = int(action)
        before = self._geo()
        self.steps += 1
        self.prev = action
        info: dict[str, Any] = {"success": False, "path_m": self.sim.agent.path_m, "shortest_m": self.shortest}
        if action == STOP:
            ok = math.hypot(self.goal[0] - self.sim.agent.x, self.goal[1] - self.sim.agent.z) <= self.success_radius
            info["success"] = ok
            return self._obs(), (10.0 if ok else 0.0), True, False, info
        if action == FORWARD:
            self.sim.forward()
        else:
            self.sim.turn(TURN_DEG if action == LEFT else -TURN_DEG)
        info["path_m"] = self.sim.agent.path_m
        reward = (before - self._geo()) - 0.01
        truncated = self.steps >= self.max_steps
        return self._obs(), float(reward), False, truncated, info

