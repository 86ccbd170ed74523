"""The mock office kitchen of SayCan (Ahn et al., Sec. 5.1, Fig. 5): 15 objects and 5 locations.

The paper names the locations (close counter, far counter, table, trash can, user) and most of the
objects (Sec. 5, Table 1, Fig. 6); it gives no coordinates, categories or grasp difficulties, so
those below are this project's choices. Coordinates are in metres on a plausible kitchen floor plan;
every distance is far below the C.1 go-to constant d_max = 100 m, as in the real kitchen.

An object's placement is a location name or :data:`GRIPPER`. Placing at the trash can is "thrown
away" and placing at the user is "delivered", so one field covers every outcome a goal can name.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from groundplan.core.errors import InvalidInputError
from groundplan.core.types import Task

#: placement of an object that is in the robot's gripper
GRIPPER = "gripper"
TRASH = "trash can"
USER = "user"


@dataclass(frozen=True)
class KitchenObject:
    """One object: its name as used in skill labels, its indefinite article and its categories.

    ``article`` is "a", "an" or "the" (for plurals and bags: "find the rice chips"); SayCan C.2
    stresses that skill labels must be grammatical because the LLM scores them autoregressively.
    ``grasp_value`` is the simulated pick value function's estimate when a pick is possible (the
    MT-Opt value is a success probability, Sec. 4 / App. B), so it is also the pick success rate.
    """

    name: str
    article: str
    categories: frozenset[str]
    grasp_value: float

    @property
    def indefinite(self) -> str:
        """"a coke can", "an apple", "the rice chips"."""
        return f"{self.article} {self.name}"


@dataclass(frozen=True)
class Location:
    """A named place with 2-D coordinates (metres) and the phrase for something placed there."""

    name: str
    xy: tuple[float, float]
    #: objects may start the episode here (counters and table)
    surface: bool
    #: "on the table", "in the trash can", "with the user"
    preposition: str

    @property
    def phrase(self) -> str:
        return f"{self.preposition} the {self.name}"


def _obj(name: str, article: str, value: float, *cats: str) -> KitchenObject:
    return KitchenObject(name=name, article=article, categories=frozenset(cats), grasp_value=value)


#: the 15 objects (SayCan Fig. 5c / Sec. 5; "paper towel" is this project's fifteenth)
OBJECTS: tuple[KitchenObject, ...] = (
    _obj("coke can", "a", 0.90, "soda", "cola", "drink", "caffeinated", "canned"),
    _obj("7up can", "a", 0.90, "soda", "citrus", "drink", "caffeine free", "canned"),
    _obj("pepsi can", "a", 0.90, "soda", "cola", "drink", "caffeinated", "canned"),
    _obj("redbull can", "a", 0.85, "energy drink", "drink", "caffeinated", "canned"),
    _obj("lime soda", "a", 0.85, "soda", "citrus", "drink", "caffeine free"),
    _obj("grapefruit soda", "a", 0.85, "soda", "citrus", "drink", "caffeine free"),
    _obj("water bottle", "a", 0.80, "drink", "caffeine free", "healthy", "healthy drink"),
    _obj("green tea", "a", 0.80, "drink", "caffeinated", "tea", "healthy", "healthy drink"),
    _obj("apple", "an", 0.75, "fruit", "snack", "healthy", "healthy snack"),
    _obj("energy bar", "an", 0.60, "snack", "healthy", "healthy snack"),
    _obj("jalapeno chips", "the", 0.70, "chips", "snack", "spicy"),
    _obj("rice chips", "the", 0.70, "chips", "snack"),
    _obj("multigrain chips", "the", 0.65, "chips", "snack"),
    _obj("sponge", "a", 0.95, "cleaning"),
    _obj("paper towel", "a", 0.60, "cleaning"),
)
OBJECT_BY_NAME: dict[str, KitchenObject] = {o.name: o for o in OBJECTS}
OBJECT_NAMES: tuple[str, ...] = tuple(o.name for o in OBJECTS)

#: the 5 locations of Sec. 5.1
LOCATIONS: tuple[Location, ...] = (
    Location("close counter", (1.0, 1.5), True, "on"),
    Location("far counter", (7.5, 4.0), True, "on"),
    Location("table", (4.0, 1.0), True, "on"),
    Location(TRASH, (1.0, 5.0), False, "in"),
    Location(USER, (3.0, -1.5), False, "with"),
)
LOCATION_BY_NAME: dict[str, Location] = {loc.name: loc for loc in LOCATIONS}
LOCATION_NAMES: tuple[str, ...] = tuple(loc.name for loc in LOCATIONS)
#: where objects are scattered at reset
SURFACES: tuple[str, ...] = tuple(loc.name for loc in LOCATIONS if loc.surface)

#: category name → objects in it (goals such as "bring me a soda" accept any member)
CATEGORIES: dict[str, frozenset[str]] = {
    cat: frozenset(o.name for o in OBJECTS if cat in o.categories)
    for cat in sorted({c for o in OBJECTS for c in o.categories})
}

#: simulated pick value when a pick is impossible (robot elsewhere, gripper full, object binned);
#: at or below the C.1 v_min = 0.2, so its calibrated affordance is 0
PICK_VALUE_INFEASIBLE: float = 0.1


def distance(a: str, b: str) -> float:
    """Euclidean distance in metres between two named locations."""
    (ax, ay), (bx, by) = LOCATION_BY_NAME[a].xy, LOCATION_BY_NAME[b].xy
    return math.hypot(ax - bx, ay - by)


@dataclass
class KitchenState:
    """Everything the kitchen simulator tracks; cheap to copy (the planner's affordances get a copy).

    ``placement`` maps each object to a location name or :data:`GRIPPER`; ``delivered`` lists the
    objects put down at the user, in order; ``history`` lists the skills that succeeded, in order.
    """

    robot: str
    placement: dict[str, str]
    delivered: list[str] = field(default_factory=list)
    history: list[str] = field(default_factory=list)

    @property
    def holding(self) -> str | None:
        """The object in the gripper, or None."""
        for name, where in self.placement.items():
            if where == GRIPPER:
                return name
        return None

    def location_of(self, obj: str) -> str:
        """Where ``obj`` is: a location name, or the robot's location when it is held."""
        where = self.placement[obj]
        return self.robot if where == GRIPPER else where

    def objects_at(self, location: str) -> list[str]:
        """Objects placed at ``location`` (not counting the one in the gripper), in OBJECTS order."""
        return [o for o in OBJECT_NAMES if self.placement.get(o) == location]

    @property
    def thrown_away(self) -> list[str]:
        return self.objects_at(TRASH)

    def copy(self) -> "KitchenState":
        return KitchenState(self.robot, dict(self.placement), list(self.delivered), list(self.history))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready snapshot (for traces)."""
        return {
            "robot": self.robot,
            "holding": self.holding,
            "placement": dict(self.placement),
            "delivered": list(self.delivered),
            "history": list(self.history),
        }


def simulated_pick_value(state: KitchenState, obj: str) -> float:
    """Stand-in for SayCan's learned pick value function v(s) = max_a Q(s, a) (App. B, C.1).

    The real value is high when the object is in reach and graspable; here it is the object's
    ``grasp_value`` (0.6–0.95) when the robot stands at the object with an empty gripper and the
    object is not in the trash, and :data:`PICK_VALUE_INFEASIBLE` otherwise.
    """
    where = state.placement.get(obj)
    if where is None or where in (GRIPPER, TRASH) or state.holding is not None or where != state.robot:
        return PICK_VALUE_INFEASIBLE
    return OBJECT_BY_NAME[obj].grasp_value


def describe(state: KitchenState) -> str:
    """A short scene description for ``Observation.text``."""
    held = state.holding
    parts = [f"The robot is at the {state.robot}" + (f", holding the {held}." if held else ", its gripper empty.")]
    for loc in LOCATIONS:
        objs = state.objects_at(loc.name)
        if objs:
            parts.append(f"{loc.phrase.capitalize()}: {', '.join(objs)}.")
    return " ".join(parts)


def initial_state(task: Task, seed: int, robot_start: str = "user") -> KitchenState:
    """The start state of (task, seed): objects scattered over the counters and table from the seed,
    then the task's ``start_state`` pins (robot location, held object, object placements)."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise InvalidInputError(f"seed must be a non-negative integer, got {seed!r}")
    rng = np.random.default_rng([int(seed), 0])
    placement = {o: SURFACES[int(i)] for o, i in zip(OBJECT_NAMES, rng.integers(len(SURFACES), size=len(OBJECT_NAMES)))}
    robot = LOCATION_NAMES[int(rng.integers(len(LOCATION_NAMES)))] if robot_start == "random" else USER
    pins = dict(task.start_state or {})
    unknown = set(pins) - {"robot", "holding", "placement"}
    if unknown:
        raise InvalidInputError(f"task {task.task_id}: unknown start_state key(s) {sorted(unknown)}; "
                                "valid: robot, holding, placement")
    for obj, loc in dict(pins.get("placement") or {}).items():
        if obj not in OBJECT_BY_NAME or loc not in LOCATION_BY_NAME:
            raise InvalidInputError(f"task {task.task_id}: bad start placement {obj!r} → {loc!r} "
                                    "(objects must be kitchen objects, places kitchen locations; use 'holding')")
        placement[obj] = loc
    if "robot" in pins:
        if pins["robot"] not in LOCATION_BY_NAME:
            raise InvalidInputError(f"task {task.task_id}: unknown robot start {pins['robot']!r}")
        robot = pins["robot"]
    if pins.get("holding") is not None:
        if pins["holding"] not in OBJECT_BY_NAME:
            raise InvalidInputError(f"task {task.task_id}: unknown held object {pins['holding']!r}")
        placement[pins["holding"]] = GRIPPER
    return KitchenState(robot=robot, placement=placement)
