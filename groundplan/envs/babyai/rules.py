"""The BabyAI env's action list and a light action model of it (no minigrid import).

:class:`~groundplan.envs.babyai.env.BabyAIEnv` lists, in each state, a pick-up for every object on the
floor, a toggle for every door colour, a drop for every object type on the floor or carried, and done
(:func:`listed_actions`). The list changes as objects are picked up or dropped in the void, so a decoder
that plans ahead (SayCanPay's Beam-Action, Sec. 5.2) must predict it to be offered what a decoder that
executes step by step (Greedy-Action) is offered: :class:`BabyAIListing` predicts it from what the agent
holds and which objects lie on the floor, the only parts of the state the list depends on.

It is an :class:`~groundplan.envs.base.ActionModel`, not a full symbolic model: its ``step`` applies the
env's checks that need no geometry (hands full, no such object, carrying the wrong type) and assumes the
rest, so a pick-up or toggle the agent cannot reach, a door locked without its key, or the primitive-step
cap fails in the env but is predicted to succeed here. It never reads the goal.
"""
from __future__ import annotations

import re
from collections import Counter
from typing import Iterable

from groundplan.envs.babyai.grid import OBJECT_TYPES

DONE = "done picking up"
PICK = re.compile(r"^pick up (?:the |a )?(\w+) (key|ball|box)$")
TOGGLE = re.compile(r"^toggle (?:the )?(\w+) door$")
DROP = re.compile(r"^drop (?:the )?(key|ball|box) in (?:the )?void$")

#: (names of the objects on the floor, sorted, one per object; the carried object's name or None)
State = tuple[tuple[str, ...], "str | None"]


def normalise(skill: str) -> str:
    return " ".join(skill.strip().lower().rstrip(".").split())


def listed_actions(floor: Iterable[str], door_colours: Iterable[str], carried: str | None) -> list[str]:
    """The actions the env lists: pick up each floor object (``"<colour> <type>"``), toggle each door
    colour, drop each object type on the floor or carried, and done."""
    floor = list(floor)
    kinds = {o.split(" ", 1)[1] for o in floor} | ({carried.split(" ", 1)[1]} if carried else set())
    return ([f"pick up {o}" for o in sorted(set(floor))] + [f"toggle {c} door" for c in sorted(set(door_colours))]
            + [f"drop {k} in void" for k in OBJECT_TYPES if k in kinds] + [DONE])


class BabyAIListing:
    """Light :class:`~groundplan.envs.base.ActionModel` of one BabyAI level (module doc)."""

    def __init__(self, floor: Iterable[str], door_colours: Iterable[str], carried: str | None) -> None:
        self._start: State = (tuple(sorted(floor)), carried)
        self.door_colours: tuple[str, ...] = tuple(sorted(set(door_colours)))

    def initial(self) -> State:
        return self._start

    def step(self, state: State, action: str) -> State | None:
        floor, carried = state
        s = normalise(action)
        if s in (DONE, "done"):
            return state
        if m := PICK.match(s):
            name = f"{m.group(1)} {m.group(2)}"
            if carried is not None or name not in floor:
                return None
            left = Counter(floor)
            left[name] -= 1
            return tuple(sorted(left.elements())), name
        if m := TOGGLE.match(s):
            return state if m.group(1) in self.door_colours else None
        if m := DROP.match(s):
            if carried is None or carried.split(" ", 1)[1] != m.group(1):
                return None
            return floor, None  # into the void: off the grid for good
        return None

    def actions(self, state: State) -> list[str]:
        floor, carried = state
        return listed_actions(floor, self.door_colours, carried)
