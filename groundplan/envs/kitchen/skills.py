"""The kitchen's skill labels (SayCan App. C.1 skill families, phrased as in Listing 1).

51 fixed labels, in this order:

* ``find <article> <object>`` × 15 — navigate to where the object is ("find a coke can",
  "find an apple", "find the rice chips");
* ``go to the <location>`` × 4 — every location except the user ("go to the trash can");
* ``pick up the <object>`` × 15;
* ``put down the <object>`` × 15;
* ``bring it to you`` — carry the held object to the user;
* ``done`` — terminate.

Labels are parsed back by exact lookup (after stripping outer whitespace), never by prefix, so
"pick up the coke" or "pick up the coke can please" are unknown.
"""
from __future__ import annotations

from typing import NamedTuple

from groundplan.core.errors import InvalidInputError
from groundplan.envs.kitchen.world import LOCATION_NAMES, OBJECT_BY_NAME, OBJECTS, USER

FIND, GO_TO, PICK, PLACE, BRING, DONE = "find", "go_to", "pick", "place", "bring", "done"
VERBS: tuple[str, ...] = (FIND, GO_TO, PICK, PLACE, BRING, DONE)
BRING_LABEL = "bring it to you"
DONE_LABEL = "done"
#: locations reachable with "go to the L" (the user is reached with "bring it to you")
GO_TO_LOCATIONS: tuple[str, ...] = tuple(name for name in LOCATION_NAMES if name != USER)


class SkillCall(NamedTuple):
    """A parsed label: the verb (one of :data:`VERBS`) and its object/location (None for bring/done)."""

    verb: str
    arg: str | None


def find_label(obj: str) -> str:
    """"find a coke can" — uses the object's article, so an unknown object raises KeyError."""
    return f"find {OBJECT_BY_NAME[obj].indefinite}"


def go_to_label(location: str) -> str:
    if location not in GO_TO_LOCATIONS:
        raise KeyError(f"no 'go to' skill for {location!r}; locations: {', '.join(GO_TO_LOCATIONS)}")
    return f"go to the {location}"


def pick_label(obj: str) -> str:
    OBJECT_BY_NAME[obj]  # noqa: B018 - validate the name
    return f"pick up the {obj}"


def place_label(obj: str) -> str:
    OBJECT_BY_NAME[obj]  # noqa: B018 - validate the name
    return f"put down the {obj}"


def _build() -> dict[str, SkillCall]:
    table: dict[str, SkillCall] = {}
    for o in OBJECTS:
        table[find_label(o.name)] = SkillCall(FIND, o.name)
    for loc in GO_TO_LOCATIONS:
        table[go_to_label(loc)] = SkillCall(GO_TO, loc)
    for o in OBJECTS:
        table[pick_label(o.name)] = SkillCall(PICK, o.name)
    for o in OBJECTS:
        table[place_label(o.name)] = SkillCall(PLACE, o.name)
    table[BRING_LABEL] = SkillCall(BRING, None)
    table[DONE_LABEL] = SkillCall(DONE, None)
    return table


_TABLE: dict[str, SkillCall] = _build()
#: every skill label, in a fixed order (find, go to, pick up, put down, bring it to you, done)
SKILLS: tuple[str, ...] = tuple(_TABLE)


def parse_skill(label: str) -> SkillCall | None:
    """The (verb, argument) of a label, or None when it is not exactly one of :data:`SKILLS`."""
    if not isinstance(label, str):
        return None
    return _TABLE.get(label.strip())


def parse_skill_strict(label: str) -> SkillCall:
    """Like :func:`parse_skill` but raises :class:`InvalidInputError` naming the label."""
    call = parse_skill(label)
    if call is None:
        raise InvalidInputError(unknown_skill_message(label))
    return call


def unknown_skill_message(label: object) -> str:
    return (
        f"unknown skill {label!r}: not one of the kitchen's {len(SKILLS)} skill labels "
        "(e.g. 'find a coke can', 'go to the table', 'pick up the apple', 'put down the apple', "
        f"'{BRING_LABEL}', '{DONE_LABEL}')"
    )
