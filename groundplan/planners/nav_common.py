"""Shared machinery of the house-navigation planners (SayNav and its baselines).

These planners run a long program per episode (look around, plan a room, walk to doors...). Writing
it as a Python generator keeps the program readable: it ``yield``s each skill as a
:class:`~groundplan.core.types.Decision` and receives the next observation, while the episode runner
still drives it one decision at a time through :meth:`Planner.next_step`. Every observation updates
the planner's own :class:`~groundplan.perception.scene_graph.SceneGraph` (no ground truth) and the set
of targets it believes found. The house env's observation state is what the robot perceives (pose, room,
egocentric detections, the step budget: :data:`groundplan.core.truth.PERCEPTS`), read through
:func:`~groundplan.core.truth.percept`; nothing else of it.
"""
from __future__ import annotations

import math
from typing import Any, Generator

from groundplan.core.errors import InvalidInputError
from groundplan.core.truth import percept, percepts
from groundplan.core.types import Decision, Observation, StepResult, Task
from groundplan.envs.house.env import parse_targets
from groundplan.perception.scene_graph import DoorNode, RoomNode, SceneGraph
from groundplan.planners.base import Planner

Program = Generator[Decision, Observation, None]
#: what :meth:`GeneratorPlanner.arrive` returns: stop the episode, and the room to search (if any)
Arrival = Generator[Decision, Observation, tuple[bool, "RoomNode | None"]]


def navigate_skill(x: float, z: float) -> str:
    return f"navigate to ({x:.2f}, {z:.2f})"


class GeneratorPlanner(Planner):
    """A planner whose episode is the generator :meth:`program`; subclasses write only that."""

    name = "nav"

    def __init__(self, max_steps: int = 120, found_radius: float = 2.5, graph_mode: str = "auto",
                 room_visit_limit: int = 6) -> None:
        self.max_steps = max_steps
        self.found_radius = found_radius
        self.graph_mode = graph_mode
        self.room_visit_limit = room_visit_limit
        self._program: Program | None = None
        self._started = False
        self.graph = SceneGraph()
        self.targets: list[str] = []
        self.found: list[str] = []
        self.obs: Observation | None = None
        self.last: StepResult | None = None
        self.log: list[str] = []
        self._room: int | None = None

    # ------------------------------------------------------------------ Planner API
    def reset(self, task: Task, observation: Observation, seed: int = 0) -> None:
        self.targets = parse_targets(task.instruction)
        self.found = []
        self.log = []
        mode = self.graph_mode
        if mode == "auto":  # ids in detections mean the env runs in GT perception
            dets = percept(observation, "detections") or []
            mode = "noisy" if dets and all(d.get("obj_id") is None for d in dets) else "gt"
        self.graph = SceneGraph(mode=mode)
        self.seed = seed
        self.task_instruction = task.instruction
        self._room = None
        self._absorb(observation)
        self._program = self.program()
        self._started = False

    def next_step(self, observation: Observation, last: StepResult | None) -> Decision:
        if self._program is None:
            raise InvalidInputError("call reset before next_step")
        self.last = last
        if last is not None:
            self._absorb(observation)
        try:
            decision = next(self._program) if not self._started else self._program.send(observation)
            self._started = True
        except StopIteration:
            decision = self.done("program finished")
        decision.info.setdefault("found", list(self.found))
        return decision

    @property
    def prompt(self) -> str:
        return "\n".join(self.log)

    # ------------------------------------------------------------------ helpers for programs
    def _absorb(self, observation: Observation) -> None:
        self.obs = observation
        state = percepts(observation, ("pose", "room", "detections"))
        self.graph.update(state)
        room = state.get("room")
        rid = None if room is None else int(room["id"])
        if rid is not None and rid != self._room and rid in self.graph.rooms:
            self.graph.rooms[rid].entries += 1
        if rid is not None:
            self._room = rid
        for det in state.get("detections", []):
            if det["kind"] == "small" and det["category"] in self.targets and det["distance"] <= self.found_radius \
                    and det["category"] not in self.found:
                self.found.append(det["category"])

    @property
    def unfound(self) -> list[str]:
        return [t for t in self.targets if t not in self.found]

    @property
    def room(self) -> int | None:
        return self._room

    @property
    def pose(self) -> tuple[float, float]:
        p = (percept(self.obs, "pose") or [0.0, 0.0, 0.0]) if self.obs else [0.0, 0.0, 0.0]
        return (float(p[0]), float(p[1]))

    @property
    def out_of_steps(self) -> bool:
        return bool(percept(self.obs, "out_of_steps")) if self.obs else False

    def act(self, skill: str, **info: Any) -> Decision:
        return Decision(skill=skill, done=False, info=dict(info))

    def done(self, why: str) -> Decision:
        self.log.append(f"done: {why}")
        return Decision(skill="done", done=True, info={"why": why})

    def next_door(self) -> DoorNode | None:
        """The nearest door not yet crossed (SayNav Alg. 1, find_next_unexplored_door), preferring
        doors of the current room."""
        x, z = self.pose
        doors = self.graph.unexplored_doors()
        if not doors:
            return None
        here = [d for d in doors if self.room is not None and self.room in d.rooms]
        pool = here or doors
        return min(pool, key=lambda d: math.hypot(d.x - x, d.z - z))

    def go_through(self, door: DoorNode) -> Program:
        """Walk through ``door`` into the next room; marks it crossed (or failed)."""
        from_room = self.room
        known = sorted(r for r in door.rooms if r in self.graph.rooms)
        ref = from_room if from_room in door.rooms else (known[0] if known else None)
        gx, gz = self.graph.beyond(door, ref)
        self.log.append(f"explore door ({door.x:.2f}, {door.z:.2f})")
        yield self.act(navigate_skill(gx, gz), why="explore door", door=[round(door.x, 2), round(door.z, 2)])
        if self.last is not None and self.last.success:
            door.crossed = True
            if self.room is not None:
                door.rooms.add(self.room)
        else:
            door.failed += 1
            if door.failed >= 2:
                door.crossed = True

    def arrive(self) -> Arrival:
        """The head of every pass of a house planner's loop (SayNav Alg. 1): stop when every target is
        found, the simulator's step limit is reached or the room was entered too often; otherwise look
        around (6 x 60 deg) and return the room the agent is in, when a target is still unfound.

        Use as ``stop, room = yield from self.arrive()``; on ``stop`` the "done" decision was yielded.
        """
        if not self.unfound:
            yield self.done("all targets found")
            return True, None
        if self.out_of_steps:
            yield self.done("simulator step limit")
            return True, None
        yield self.act("look around", why="look around on arrival")
        if self.room is None or not self.unfound:
            return False, None
        room = self.graph.rooms[self.room]
        if room.entries > self.room_visit_limit:
            yield self.done(f"room {room.label} entered more than {self.room_visit_limit} times")
            return True, None
        return False, room

    def program(self) -> Program:  # pragma: no cover - abstract
        raise NotImplementedError
