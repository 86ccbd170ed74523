"""AI2-THOR / ProcTHOR adapter with the house env's interface (SayNav's own simulator, Sec. 4.1).

It turns THOR's documented metadata into what the house planners consume: ``event.metadata["objects"]``
(``objectType``, ``position``, ``visible``, ``distance``, ``objectId``) become detections; the agent
pose (``metadata["agent"]["position"/"rotation"]``) becomes the pose; ``GetReachablePositions``
becomes a 0.25 m occupancy grid for the A* navigator (OrNav); a ProcTHOR house JSON gives room
bounds (``floorPolygon``, ``roomType``) and doors (``room0``/``room1``, ``holePolygon``).

``ai2thor`` is imported only when a live controller is built; without it, or without a THOR build,
:class:`ThorHouseEnv` raises :class:`MissingDependencyError` before any work. A ``controller``
argument (anything with ``step(action=..., **kw) -> event`` and ``last_event``) lets tests drive the
adapter from fixtures.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from groundplan.core.errors import MissingDependencyError
from groundplan.core.types import GoalResult, Observation, StepResult, Task
from groundplan.envs.base import Env, EnvCapabilities
from groundplan.envs.house.catalog import LARGE_OBJECTS
from groundplan.envs.house.env import NAVIGATE_RE, SKILLS, parse_targets
from groundplan.envs.house.layout import CELL, FREE, WALL, House, Room
from groundplan.envs.house.sim import astar, nearest_free_cell
from groundplan.envs.house.start_state import HouseStartState

#: THOR types treated as landmarks besides the house catalog's furniture (Sec. 3.3: by size and class)
EXTRA_LARGE = {"Television", "Chair", "SideTable", "Floor", "Window", "Painting"}


def room_bounds(house_json: dict[str, Any]) -> dict[str, tuple[str, tuple[float, float, float, float]]]:
    """ProcTHOR ``rooms`` → id: (roomType, (x0, z0, x1, z1)) from each floor polygon's bounding box."""
    out = {}
    for room in house_json.get("rooms", []):
        xs = [p["x"] for p in room["floorPolygon"]]
        zs = [p["z"] for p in room["floorPolygon"]]
        out[room["id"]] = (room.get("roomType", "Room"), (min(xs), min(zs), max(xs), max(zs)))
    return out


def doors(house_json: dict[str, Any]) -> list[dict[str, Any]]:
    """ProcTHOR ``doors`` → {id, rooms, position}; the hole polygon's centre is the door position on the wall."""
    out = []
    walls = {w["id"]: w for w in house_json.get("walls", [])}
    for d in house_json.get("doors", []):
        wall = walls.get(d.get("wall0"), {})
        poly = wall.get("polygon") or []
        if len(poly) >= 2:  # hole x is measured along the wall from its first corner
            (a, b) = poly[0], poly[1]
            length = math.hypot(b["x"] - a["x"], b["z"] - a["z"]) or 1.0
            mid = (d["holePolygon"][0]["x"] + d["holePolygon"][1]["x"]) / 2
            t = mid / length
            pos = (a["x"] + t * (b["x"] - a["x"]), a["z"] + t * (b["z"] - a["z"]))
        else:
            pos = (d.get("assetPosition", {}).get("x", 0.0), d.get("assetPosition", {}).get("z", 0.0))
        out.append({"id": d["id"], "rooms": (d["room0"], d["room1"]), "position": pos})
    return out


def detections(event_metadata: dict[str, Any], max_distance: float = 6.0) -> list[dict[str, Any]]:
    """Visible THOR objects → house-env detection dicts (position is the object's world x, z)."""
    out = []
    for o in event_metadata.get("objects", []):
        if not o.get("visible") or o.get("distance", 0.0) > max_distance:
            continue
        kind = "large" if o["objectType"] in LARGE_OBJECTS or o["objectType"] in EXTRA_LARGE else "small"
        if o["objectType"] == "Doorway" or o["objectType"] == "Doorframe":
            kind = "door"
        out.append({"kind": kind, "category": o["objectType"], "position": [o["position"]["x"], o["position"]["z"]],
                    "distance": float(o.get("distance", 0.0)), "obj_id": o.get("objectId"), "room_id": None})
    return out


def agent_pose(event_metadata: dict[str, Any]) -> tuple[float, float, float]:
    """THOR's agent pose → (x, z, heading in our convention: 0 = +x, counter-clockwise to +z).
    THOR's yaw is clockwise from +z, so heading = 90 - yaw."""
    a = event_metadata["agent"]
    return (a["position"]["x"], a["position"]["z"], (90.0 - a["rotation"]["y"]) % 360.0)


def grid_from_reachable(points: Sequence[dict[str, float]], rooms: dict[str, Any] | None = None) -> tuple[House, float, float]:
    """Reachable positions (THOR's 0.25 m grid) → a :class:`House` occupancy grid and its origin."""
    xs = np.array([p["x"] for p in points])
    zs = np.array([p["z"] for p in points])
    x0, z0 = xs.min() - 1.5 * CELL, zs.min() - 1.5 * CELL  # reachable points land on cell centres
    W = int(round((xs.max() - x0) / CELL - 0.5)) + 2
    H = int(round((zs.max() - z0) / CELL - 0.5)) + 2
    grid = np.full((W, H), WALL, np.uint8)
    for x, z in zip(xs, zs):
        grid[int(round((x - x0) / CELL - 0.5)), int(round((z - z0) / CELL - 0.5))] = FREE
    room_list = []
    for k, (rid, (rtype, (bx0, bz0, bx1, bz1))) in enumerate((rooms or {}).items()):
        room_list.append(Room(k, rtype, (int((bx0 - x0) // CELL), int((bz0 - z0) // CELL),
                                          int((bx1 - x0) // CELL), int((bz1 - z0) // CELL))))
    room_of = np.full(grid.shape, -1, np.int16)
    for r in room_list:
        i0, j0, i1, j1 = r.bounds
        room_of[max(i0, 0):i1, max(j0, 0):j1] = r.room_id
    return House(-1, grid, room_list, [], [], room_of), x0, z0


class ThorHouseEnv(Env):
    """MultiON in a ProcTHOR house through ``ai2thor``; tasks are given (house JSON + 3 target types)."""

    name = "thor_house"
    start_state_schema = HouseStartState
    capabilities = EnvCapabilities(measures=("sr", "path_m", "targets_found"), table_measures=("sr", "path_m"))

    def __init__(self, houses: Sequence[dict[str, Any]] = (), controller: Any = None, found_radius: float = 2.5,
                 max_sim_steps: int = 1500, houses_file: str | None = None) -> None:
        if houses_file is not None:  # the config route (ThorHouseConfig); tests pass ``houses`` directly
            import json
            from pathlib import Path

            houses = [*houses, *json.loads(Path(houses_file).read_text())]
        self._houses = list(houses)
        self._controller = controller
        self.found_radius = found_radius
        self.max_sim_steps = max_sim_steps

    def _make_controller(self, house_json: dict[str, Any]) -> Any:
        if self._controller is not None:
            return self._controller
        try:
            from ai2thor.controller import Controller  # lazy: optional dependency
        except ImportError as e:
            raise MissingDependencyError("the THOR adapter needs ai2thor and a THOR build: pip install ai2thor") from e
        try:
            return Controller(scene=house_json, gridSize=CELL, rotateStepDegrees=30, fieldOfView=90, snapToGrid=True)
        except Exception as e:  # no build / no display: the build cannot be downloaded here
            raise MissingDependencyError(f"could not start AI2-THOR: {e}") from e

    def tasks(self, families: Sequence[str] | None = None) -> list[Task]:
        return [Task(task_id=f"thor-{k:04d}", instruction=h["instruction"], family="procthor",
                     goal={"targets": parse_targets(h["instruction"])}, metadata={"house": k}) for k, h in enumerate(self._houses)]

    def reset(self, task: Task, seed: int) -> Observation:
        house_json = self._houses[task.metadata["house"]]["house"]
        self.ctrl = self._make_controller(house_json)
        self.rooms = room_bounds(house_json)
        event = self.ctrl.step(action="GetReachablePositions")
        self.grid, self.x0, self.z0 = grid_from_reachable(event.metadata["actionReturn"], self.rooms)
        self.targets = list(task.goal["targets"])
        self.found: list[str] = []
        self.steps, self.path_m = 0, 0.0
        self._last_pos = agent_pose(self.ctrl.last_event.metadata)[:2]
        return self._observe([self.ctrl.last_event])

    def _observe(self, events: list[Any]) -> Observation:
        dets = []
        for ev in events:
            for d in detections(ev.metadata):
                dets.append(d)
                if d["kind"] == "small" and d["category"] in self.targets and d["distance"] <= self.found_radius \
                        and d["category"] not in self.found:
                    self.found.append(d["category"])
        x, z, heading = agent_pose(self.ctrl.last_event.metadata)
        self.path_m += math.hypot(x - self._last_pos[0], z - self._last_pos[1])
        self._last_pos = (x, z)
        room = next(({"id": k, "bounds": list(b)} for k, (rid, (_, b)) in enumerate(self.rooms.items())
                     if b[0] <= x <= b[2] and b[1] <= z <= b[3]), None)
        state = {"pose": [x, z, heading], "room": room, "detections": dets, "targets": self.targets,
                 "sim_steps": self.steps, "path_m": self.path_m, "out_of_steps": self.steps >= self.max_sim_steps}
        return Observation(skills=list(SKILLS), state=state)

    def _act(self, action: str, **kw: Any) -> Any:
        self.steps += 1
        return self.ctrl.step(action=action, **kw)

    def execute(self, skill: str) -> StepResult:
        low = skill.strip().lower()
        if low == "done":
            return StepResult(True, "done", self._observe([]))
        if low == "look around":
            return StepResult(True, "looked around", self._observe([self._act("RotateRight", degrees=60) for _ in range(6)]))
        if low in ("turn left", "turn right", "move forward"):
            name = {"turn left": "RotateLeft", "turn right": "RotateRight", "move forward": "MoveAhead"}[low]
            ev = self._act(name)
            return StepResult(bool(ev.metadata.get("lastActionSuccess", True)), low, self._observe([ev]))
        m = NAVIGATE_RE.match(skill)
        if not m:
            return StepResult(False, f"unknown skill {skill!r}", self._observe([]))
        return self._navigate(float(m.group(1)), float(m.group(2)))

    def _navigate(self, gx: float, gz: float) -> StepResult:
        """A* over reachable positions, executed as Teleport hops along the path (OrNav, Sec. 4.3)."""
        x, z, _ = agent_pose(self.ctrl.last_event.metadata)
        start = nearest_free_cell(self.grid, x - self.x0, z - self.z0)
        goal = nearest_free_cell(self.grid, gx - self.x0, gz - self.z0)
        path = astar(self.grid, start, goal) if start and goal else None
        if path is None:
            return StepResult(False, "goal unreachable", self._observe([]))
        events = []
        for i, j in path[1:]:
            wx, wz = self.x0 + (i + 0.5) * CELL, self.z0 + (j + 0.5) * CELL
            events.append(self._act("Teleport", position={"x": wx, "y": 0.9, "z": wz}))
        return StepResult(True, f"reached ({gx:.2f}, {gz:.2f})", self._observe(events))

    def check_goal(self) -> GoalResult:
        return GoalResult(success=set(self.targets) <= set(self.found),
                          satisfied=[f"found {t}" for t in self.targets if t in self.found],
                          unsatisfied=[f"found {t}" for t in self.targets if t not in self.found])

    def episode_metrics(self, task: Task, trace: Any) -> dict[str, float]:
        ok = self.check_goal().success
        return {"sr": float(ok), "path_m": self.path_m, "targets_found": len(self.found) / len(self.targets)}
