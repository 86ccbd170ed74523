"""SayNav's incremental 3D scene graph (Rajvanshi et al., Sec. 3.3, Fig. 3).

Four levels: house → rooms (with bounds) → large objects (landmarks, with positions) → small objects
("near" a large object). Doors are room–room edges with a position. The graph is the set of triplets
``{(s, near, l), (l, in, r), (r, d, r'), (r, in, H)}`` and is built only from what the agent perceives:
each observation's detections are fused into nodes as the agent moves.

Two modes, as the paper's ablation (Sec. 4.3): ``gt`` detections carry instance ids, so fusion is by
id (the paper's GT graph); ``noisy`` detections have no ids and jittered positions, so a detection
joins the nearest node of its category within an association radius and positions are running means
over views (the VO graph). Room membership of an object comes from the room bounds the agent has
perceived; the room type is annotated later (by the LLM, Sec. 3.3/Fig. 5).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Literal


@dataclass
class RoomNode:
    room_id: int
    bounds: tuple[float, float, float, float]  # x0, z0, x1, z1 (m)
    type: str | None = None
    entries: int = 0
    status: str = "new"  # new | later | searched

    def contains(self, x: float, z: float, margin: float = 0.0) -> bool:
        x0, z0, x1, z1 = self.bounds
        return x0 - margin <= x <= x1 + margin and z0 - margin <= z <= z1 + margin

    def center(self) -> tuple[float, float]:
        x0, z0, x1, z1 = self.bounds
        return ((x0 + x1) / 2, (z0 + z1) / 2)

    @property
    def label(self) -> str:
        return f"{self.type or 'Room'} {self.room_id}"


@dataclass
class ObjectNode:
    node_id: int
    category: str
    large: bool
    x: float
    z: float
    views: int = 1
    obj_id: int | None = None
    near: int | None = None  # small objects: node id of the large object they are near

    def fuse(self, x: float, z: float) -> None:
        """Running mean of the position over views (Sec. 3.3: positions combined over timestamps)."""
        self.views += 1
        self.x += (x - self.x) / self.views
        self.z += (z - self.z) / self.views


@dataclass
class DoorNode:
    node_id: int
    x: float
    z: float
    rooms: set[int] = field(default_factory=set)
    crossed: bool = False
    failed: int = 0
    views: int = 1
    obj_id: int | None = None

    def fuse(self, x: float, z: float) -> None:
        self.views += 1
        self.x += (x - self.x) / self.views
        self.z += (z - self.z) / self.views


class SceneGraph:
    """The graph of one episode, updated from observation states (see module docstring)."""

    def __init__(self, mode: Literal["gt", "noisy"] = "gt", assoc_large: float = 1.0, assoc_small: float = 0.6,
                 near_radius: float = 1.5) -> None:
        self.mode = mode
        self.assoc_large = assoc_large
        self.assoc_small = assoc_small
        self.near_radius = near_radius
        self.rooms: dict[int, RoomNode] = {}
        self.objects: list[ObjectNode] = []
        self.doors: list[DoorNode] = []

    # ------------------------------------------------------------------ building
    def update(self, state: dict[str, Any]) -> None:
        """Fuse one observation state (``pose``, ``room``, ``detections``) into the graph."""
        room = state.get("room")
        if room is not None:
            rid = int(room["id"])
            if rid not in self.rooms:
                self.rooms[rid] = RoomNode(rid, tuple(room["bounds"]))
        for det in state.get("detections", []):
            x, z = det["position"]
            if det["kind"] == "door":
                self._add_door(x, z, det.get("obj_id"), det.get("room_id"))
            else:
                self._add_object(det["category"], det["kind"] == "large", x, z, det.get("obj_id"))
        for door in self.doors:  # a door on a known room's wall belongs to that room
            for r in self.rooms.values():
                if r.contains(door.x, door.z, margin=0.6) and not r.contains(door.x, door.z, margin=-0.3):
                    door.rooms.add(r.room_id)

    def _add_object(self, category: str, large: bool, x: float, z: float, obj_id: int | None) -> None:
        radius = self.assoc_large if large else self.assoc_small
        match = None
        if obj_id is not None and self.mode == "gt":
            match = next((o for o in self.objects if o.obj_id == obj_id and o.large == large), None)
        else:
            cands = [o for o in self.objects if o.category == category and o.large == large
                     and math.hypot(o.x - x, o.z - z) <= radius]
            match = min(cands, key=lambda o: math.hypot(o.x - x, o.z - z), default=None)
        if match is not None:
            match.fuse(x, z)
        else:
            self.objects.append(ObjectNode(len(self.objects), category, large, x, z, obj_id=obj_id))

    def _add_door(self, x: float, z: float, obj_id: int | None, room_id: int | None) -> None:
        if obj_id is not None and self.mode == "gt":
            match = next((d for d in self.doors if d.obj_id == obj_id), None)
        else:
            match = min((d for d in self.doors if math.hypot(d.x - x, d.z - z) <= 1.0),
                        key=lambda d: math.hypot(d.x - x, d.z - z), default=None)
        if match is not None:
            match.fuse(x, z)
        else:
            self.doors.append(DoorNode(len(self.doors), x, z, obj_id=obj_id))

    # ------------------------------------------------------------------ queries
    def room_of(self, x: float, z: float) -> int | None:
        for r in self.rooms.values():
            if r.contains(x, z):
                return r.room_id
        return None

    def large_in(self, room_id: int) -> list[ObjectNode]:
        room = self.rooms[room_id]
        return [o for o in self.objects if o.large and room.contains(o.x, o.z)]

    def small_in(self, room_id: int) -> list[ObjectNode]:
        room = self.rooms[room_id]
        return [o for o in self.objects if not o.large and room.contains(o.x, o.z)]

    def near(self, small: ObjectNode) -> ObjectNode | None:
        """The large object a small one is "near" (SayNav's (s, near, l) triplet), or None."""
        best = min((o for o in self.objects if o.large), key=lambda o: math.hypot(o.x - small.x, o.z - small.z),
                   default=None)
        if best is None or math.hypot(best.x - small.x, best.z - small.z) > self.near_radius:
            return None
        return best

    def names(self, objects: Iterable[ObjectNode]) -> list[tuple[str, ObjectNode]]:
        """Unique display names: the category, numbered when a room has several (``Desk``, ``Desk 2``)."""
        seen: dict[str, int] = {}
        out = []
        for o in objects:
            seen[o.category] = seen.get(o.category, 0) + 1
            out.append((o.category if seen[o.category] == 1 else f"{o.category} {seen[o.category]}", o))
        return out

    def room_text(self, room_id: int, with_small: bool = False) -> str:
        """The current room's subgraph as prompt text: ``Name (x, z)`` per large object (Sec. 3.4)."""
        lines = [f"{name} ({o.x:.2f}, {o.z:.2f})" for name, o in self.names(self.large_in(room_id))]
        if with_small:
            for s in self.small_in(room_id):
                n = self.near(s)
                lines.append(f"{s.category} near {n.category}" if n else s.category)
        return "\n".join(lines) if lines else "(no furniture seen)"

    def seen_categories(self, room_id: int) -> list[str]:
        """Categories of everything seen in a room (the input of the room identification prompt, Fig. 5)."""
        return sorted({o.category for o in self.large_in(room_id) + self.small_in(room_id)})

    def doors_of(self, room_id: int) -> list[DoorNode]:
        return [d for d in self.doors if room_id in d.rooms]

    def unexplored_doors(self) -> list[DoorNode]:
        return [d for d in self.doors if not d.crossed and d.failed < 2 and len(d.rooms) < 2]

    def all_doors_explored(self) -> bool:
        return not self.unexplored_doors()

    def beyond(self, door: DoorNode, room_id: int | None, dist: float = 0.9) -> tuple[float, float]:
        """A point ``dist`` past the door, away from ``room_id``: where to go to enter the next room."""
        if room_id is None or room_id not in self.rooms:
            return (door.x, door.z)
        x0, z0, x1, z1 = self.rooms[room_id].bounds
        gaps = {(-1, 0): abs(door.x - x0), (1, 0): abs(door.x - x1), (0, -1): abs(door.z - z0), (0, 1): abs(door.z - z1)}
        (dx, dz), _ = min(gaps.items(), key=lambda kv: kv[1])
        return (door.x + dx * dist, door.z + dz * dist)

    def nodes_for_render(self) -> list[tuple[str, float, float]]:
        out = [("large" if o.large else "small", o.x, o.z) for o in self.objects]
        out += [("door", d.x, d.z) for d in self.doors]
        out += [("room", *r.center()) for r in self.rooms.values()]
        return out

    def triplets(self) -> list[tuple[str, str, str]]:
        """The graph as SayNav's triplets (Sec. 3.3), for traces and tests."""
        out = []
        for r in self.rooms.values():
            out.append((r.label, "in", "House"))
            for o in self.large_in(r.room_id):
                out.append((o.category, "in", r.label))
            for s in self.small_in(r.room_id):
                n = self.near(s)
                if n is not None:
                    out.append((s.category, "near", n.category))
        for d in self.doors:
            rs = sorted(d.rooms)
            if len(rs) == 2:
                out.append((self.rooms[rs[0]].label, f"door@({d.x:.1f}, {d.z:.1f})", self.rooms[rs[1]].label))
        return out
