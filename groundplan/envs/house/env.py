"""MultiON in procedural houses as a groundplan :class:`~groundplan.envs.base.Env` (SayNav Sec. 3.1, 4).

A task is a generated house with ``num_targets`` small-object categories to find, in any order; each
split (val/test/train) draws house seeds from its own range, so splits are disjoint and deterministic.
The episode seed picks the start pose. Skills are text:

* ``navigate to (x, z)``: point-goal navigation by the configured navigator (A*: SayNav's OrNav),
  observing at every simulator step on the way;
* ``look around``: six 60° turns, observing after each;
* ``turn left`` / ``turn right`` / ``move forward``: single low-level actions;
* ``done``: ends the episode.

The observation's ``state`` holds what the agent perceives and knows of itself: its pose, the room it
is in (id and bounds, from the walls and floor around it), the detections of the last skill and the
target categories (from the instruction). A target is *found* once it was in view within 2.5 m; the
episode succeeds when all targets were found, and the step limit counts simulator steps.
"""
from __future__ import annotations

import functools
import logging
import re
from typing import Any, Sequence

import numpy as np

from groundplan.core.errors import InvalidInputError
from groundplan.core.measures import register_measure, spl
from groundplan.core.types import GoalResult, Observation, StepResult, Task
from groundplan.core.validation import validate_options
from groundplan.envs.base import Env, EnvCapabilities
from groundplan.envs.house.layout import CELL, House, generate_house
from groundplan.envs.house.metrics import kendall_tau, shortest_tour
from groundplan.envs.house.options import HouseConfig
from groundplan.envs.house.render import render_topdown
from groundplan.envs.house.start_state import HouseStartState
from groundplan.envs.house.sim import (
    AStarNavigator,
    Detection,
    HouseSim,
    PerceptionParams,
)

logger = logging.getLogger(__name__)

register_measure("sr", "MultiON success: every target seen within 2.5 m before the step limit (SayNav Sec. 4.2)",
                 proportion=True)
register_measure("spl", "success weighted by path length, L* the shortest path over all target orders (SayNav Sec. 4.2)")
register_measure("kendall_tau", "Kendall tau-b of the found order vs the optimal order, targets found at the same "
                 "step tied; successful episodes that found them at different steps (SayNav Sec. 4.2)", partial=True)
register_measure("path_m", "metres walked", higher_is_better=False)
register_measure("targets_found", "fraction of the targets found")

SPLIT_BASE = {"train": 0, "val": 100000, "test": 200000}
NAVIGATE_RE = re.compile(r"^\s*navigate to \(\s*(-?\d+(?:\.\d+)?)\s*,\s*(-?\d+(?:\.\d+)?)\s*\)\s*$", re.I)
SKILLS = ["navigate to (x, z)", "look around", "turn left", "turn right", "move forward", "done"]


@functools.lru_cache(maxsize=64)
def cached_house(seed: int, min_rooms: int, max_rooms: int) -> House:
    """Houses are pure functions of their seed; workers re-running a house reuse it."""
    return generate_house(seed, min_rooms, max_rooms)


def parse_targets(instruction: str) -> list[str]:
    """Target categories from "Find a X, a Y and a Z." (what a planner is told; no ground truth)."""
    m = re.match(r"\s*find\s+(.*?)\.?\s*$", instruction, re.I)
    if not m:
        raise InvalidInputError(f"not a MultiON instruction (expected 'Find a X, a Y and a Z.'): {instruction!r}")
    parts = re.split(r",\s*(?:and\s+)?|\s+and\s+", m.group(1))
    out = [re.sub(r"^(?:an?|the)\s+", "", p.strip(), flags=re.I) for p in parts if p.strip()]
    if not out:
        raise InvalidInputError(f"no targets in instruction {instruction!r}")
    return out


def make_instruction(targets: Sequence[str]) -> str:
    arts = [("an " if t[0].lower() in "aeiou" else "a ") + t for t in targets]
    return "Find " + (", ".join(arts[:-1]) + " and " + arts[-1] if len(arts) > 1 else arts[0]) + "."


def choose_targets(house: House, n: int, rng: np.random.Generator) -> list[int] | None:
    """``n`` small objects whose categories occur once in the house (so "found" is unambiguous)."""
    counts: dict[str, int] = {}
    for o in house.small_objects():
        counts[o.category] = counts.get(o.category, 0) + 1
    unique = [o for o in house.small_objects() if counts[o.category] == 1]
    if len(unique) < n:
        return None
    return [unique[int(k)].obj_id for k in rng.choice(len(unique), size=n, replace=False)]


class HouseEnv(Env):
    """Procedural multi-room houses with MultiON episodes; see the module docstring."""

    name = "house"
    start_state_schema = HouseStartState
    capabilities = EnvCapabilities(
        measures=("sr", "spl", "kendall_tau", "path_m", "targets_found"),
        table_measures=("sr", "spl", "kendall_tau", "path_m"),
        cameras=("topdown",),
    )

    def __init__(self, **options: Any) -> None:
        self.config = validate_options(HouseConfig, options, "house options")
        c = self.config
        self.params = PerceptionParams(
            fov_deg=c.fov_deg, large_range=c.large_range, small_range=c.small_range, found_radius=c.found_radius,
            position_noise=c.position_noise if c.perception == "noisy" else 0.0,
            miss_prob=c.miss_prob if c.perception == "noisy" else 0.0, hide_ids=c.perception == "noisy")
        if c.navigator == "learned":
            from groundplan.envs.house.learned_nav import LearnedNavigator

            self.navigator: Any = LearnedNavigator(str(c.navigator_model), c.navigator_tracking_uri)
        else:
            self.navigator = AStarNavigator(tolerance_m=c.nav_tolerance)
        self._tasks: list[Task] | None = None
        self.sim: HouseSim | None = None
        self.task: Task | None = None
        self._targets: list[int] = []
        self._tour_cache: dict[tuple[int, float, float], Any] = {}

    # ------------------------------------------------------------------ tasks
    def house(self, seed: int) -> House:
        return cached_house(int(seed), self.config.min_rooms, self.config.max_rooms)

    def tasks(self, families: Sequence[str] | None = None) -> list[Task]:
        if self._tasks is None:
            self._tasks = [t for split in self.config.splits for t in self._split_tasks(split)]
        if families:
            unknown = set(families) - set(self.config.splits)
            if unknown:
                raise InvalidInputError(f"unknown house splits {sorted(unknown)}; valid: {list(self.config.splits)}")
            return [t for t in self._tasks if t.family in families]
        return list(self._tasks)

    def _split_tasks(self, split: str) -> list[Task]:
        out: list[Task] = []
        seed = SPLIT_BASE[split]
        while len(out) < self.config.houses_per_split:
            house = generate_house(seed, self.config.min_rooms, self.config.max_rooms)
            targets = choose_targets(house, self.config.num_targets, np.random.default_rng([seed, 7]))
            if targets is not None:
                objs = {o.obj_id: o for o in house.objects}
                cats = [objs[t].category for t in targets]
                out.append(Task(
                    task_id=f"house-{split}-{len(out):04d}",
                    instruction=make_instruction(cats),
                    family=split,
                    goal={"targets": cats, "target_ids": targets,
                          "positions": {objs[t].category: list(objs[t].position) for t in targets}},
                    metadata={"house_seed": seed, "num_rooms": len(house.rooms), "min_rooms": self.config.min_rooms,
                              "max_rooms": self.config.max_rooms},
                ))
            seed += 1
        return out

    # ------------------------------------------------------------------ episode
    def reset(self, task: Task, seed: int) -> Observation:
        if not isinstance(task.goal, dict) or "target_ids" not in task.goal or "house_seed" not in task.metadata:
            raise InvalidInputError(f"task {task.task_id} is not a house MultiON task")
        house = self.house(task.metadata["house_seed"])
        rng = np.random.default_rng([int(seed), int(task.metadata["house_seed"]), 11])
        free = np.argwhere((house.grid == 0) & (house.room_of_cell >= 0))
        i, j = free[int(rng.integers(len(free)))]
        heading = float(rng.choice([0.0, 90.0, 180.0, 270.0]))
        self.sim = HouseSim(house, ((i + 0.5) * CELL, (j + 0.5) * CELL, heading), self.params, rng,
                            turn_deg=float(self.config.turn_deg), max_steps=self.config.max_sim_steps)
        self.task = task
        self._targets = list(task.goal["target_ids"])
        return self._observation(self.sim.observe())

    def _require_sim(self) -> HouseSim:
        if self.sim is None:
            raise InvalidInputError("call reset before execute")
        return self.sim

    def execute(self, skill: str) -> StepResult:
        sim = self._require_sim()
        label = skill.strip()
        low = label.lower()
        if low == "done":
            return StepResult(True, "done", self._observation([]), self._info())
        if sim.out_of_steps:
            return StepResult(False, f"step limit reached ({sim.max_steps} simulator steps)", self._observation([]),
                              self._info())
        m = NAVIGATE_RE.match(label)
        if m:
            goal = (float(m.group(1)), float(m.group(2)))
            ok, dets, why = self.navigator.navigate(sim, goal)
            fb = f"reached ({goal[0]:.2f}, {goal[1]:.2f})" if ok else f"could not reach ({goal[0]:.2f}, {goal[1]:.2f}): {why}"
            return StepResult(ok, fb, self._observation(dets), self._info())
        if low == "look around":
            return StepResult(True, "looked around", self._observation(sim.look_around()), self._info())
        if low in ("turn left", "turn right"):
            d = sim.turn(sim.turn_deg if low == "turn left" else -sim.turn_deg)
            return StepResult(True, low, self._observation(d), self._info())
        if low == "move forward":
            ok, d = sim.forward()
            return StepResult(ok, "moved forward" if ok else "blocked", self._observation(d), self._info())
        return StepResult(False, f"unknown skill {skill!r}; skills: {', '.join(SKILLS)}", self._observation([]),
                          self._info())

    def _info(self) -> dict[str, Any]:
        sim = self._require_sim()
        return {"sim_steps": sim.agent.steps, "path_m": round(sim.agent.path_m, 3), "room": sim.room()}

    def _observation(self, detections: list[Detection]) -> Observation:
        sim = self._require_sim()
        house, a = sim.house, sim.agent
        room_id = sim.room()
        room = None
        if room_id is not None:
            r = house.rooms[room_id]
            room = {"id": room_id, "bounds": [round(v, 3) for v in r.bounds_m()]}
        unique: dict[Any, Detection] = {}
        for d in detections:  # one entry per instance (GT) or per rough position (noisy), the closest sighting
            key = (d.kind, d.obj_id) if d.obj_id is not None else (d.kind, d.category, round(d.position[0]), round(d.position[1]))
            if key not in unique or d.distance < unique[key].distance:
                unique[key] = d
        state = {
            "pose": [round(a.x, 3), round(a.z, 3), a.heading],
            "room": room,
            "detections": [d.as_dict() for d in unique.values()],
            "targets": parse_targets(self.task.instruction) if self.task else [],
            "sim_steps": a.steps,
            "path_m": round(a.path_m, 3),
            "out_of_steps": sim.out_of_steps,
        }
        return Observation(skills=list(SKILLS), state=state)

    # ------------------------------------------------------------------ judging
    def found_ids(self) -> list[int]:
        """Targets found so far, in the order they were found."""
        sim = self._require_sim()
        hits = [(sim.seen_close[t], t) for t in self._targets if t in sim.seen_close]
        return [t for _, t in sorted(hits)]

    def check_goal(self) -> GoalResult:
        sim = self._require_sim()
        objs = {o.obj_id: o for o in sim.house.objects}
        found = set(self.found_ids())
        return GoalResult(success=len(found) == len(self._targets),
                          satisfied=[f"found {objs[t].category}" for t in self._targets if t in found],
                          unsatisfied=[f"found {objs[t].category}" for t in self._targets if t not in found])

    def shortest(self, task: Task, start: tuple[float, float]):
        key = (int(task.metadata["house_seed"]), round(start[0], 3), round(start[1], 3))
        if key not in self._tour_cache:
            house = self.house(task.metadata["house_seed"])
            objs = {o.obj_id: o for o in house.objects}
            self._tour_cache[key] = shortest_tour(house, start, [objs[t] for t in task.goal["target_ids"]],
                                                  self.config.found_radius)
        return self._tour_cache[key]

    def episode_metrics(self, task: Task, trace: Any) -> dict[str, float]:
        sim = self._require_sim()
        objs = {o.obj_id: o for o in sim.house.objects}
        found = self.found_ids()
        success = len(found) == len(self._targets)
        tour = self.shortest(task, sim.agent.path[0])
        out = {"sr": float(success), "spl": spl(success, tour.length_m, sim.agent.path_m),
               "path_m": sim.agent.path_m, "targets_found": len(found) / len(self._targets),
               "shortest_m": tour.length_m, "sim_steps": float(sim.agent.steps)}
        if success:  # targets first seen at the same step are ties, not ordered by object id
            tau = kendall_tau({objs[t].category: sim.seen_close[t] for t in found}, tour.order)
            if tau is not None:  # all found at once: no order to compare, the episode has no tau
                out["kendall_tau"] = tau
        return out

    # ------------------------------------------------------------------ pictures
    def render(self, graph_nodes: Sequence[tuple[str, float, float]] = (), px: int = 10) -> np.ndarray:
        sim = self._require_sim()
        a = sim.agent
        return render_topdown(sim.house, a.path, self._targets, self.found_ids(), graph_nodes, (a.x, a.z, a.heading), px)

    def frames(self) -> list[Any]:
        if not self.config.render_frames or self.sim is None:
            return []
        return [{"step": self.sim.agent.steps, "camera": "topdown", "rgb": self.render(px=6)}]
