"""Passive scene description (IM App. A.1): the list of achieved sub-goals.

"At the start of the action plan, the language model first generates a list of desired sub-goals
given the high-level instruction. The sub-goals are of the format "[x] is on top of [y]". After each
pick-and-place execution, we iterate through all desired sub-goals … and check which are satisfied
using the success detector." Sub-goal sentences accepted here: ``"<Colour> block is on the <target>."``,
``"… is on top of the <target>."``, ``"… is in the <target>."`` (target: a block, a bowl or a location).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Mapping, Sequence

from groundplan.core.truth import OracleDeclaration, Truth
from groundplan.perception.success_detector import SUCCESS_RADIUS, detect_success

_SUBGOAL = re.compile(r"^\s*(?:the\s+)?(\w+ (?:block|bowl)) is (?:on top of|on|in|inside|into|onto) (?:the )?(.+?)\s*\.?\s*$",
                      re.IGNORECASE)
_QUOTED = re.compile(r'"([^"]+)"')

#: what a planner that describes progress with :func:`completed` / :func:`describe_progress` reads: the
#: simulator's true object poses and the scene's objects (IM's simulated scene description is "ground truth
#: + heuristics", App. A.1), in place of the perception a real robot would describe the scene with
SCENE_FROM_TRUE_POSES = OracleDeclaration(
    name="scene from true poses", reads=frozenset({Truth.STATE}), stands_in=True,
    wording="the true object poses and the scene's objects, checked by the 4 cm success rule, standing in for "
            "a scene descriptor as in Inner Monologue's simulation (App. A.1: ground truth + heuristics)")


@dataclass(frozen=True)
class SubGoal:
    """``obj`` placed on ``target``; ``text`` is the sentence as it appears in the prompt."""

    obj: str
    target: str
    text: str


def subgoal_text(obj: str, target: str) -> str:
    """Canonical sentence, as in IM Listing 1: ``"Cyan block is on the top left corner."``."""
    return f"{obj[0].upper()}{obj[1:]} is on the {target}."


def parse_subgoal(text: str, known: Sequence[str] = ()) -> SubGoal | None:
    """One sentence → SubGoal; with ``known`` (object and location names) both names must be known."""
    m = _SUBGOAL.match(text)
    if not m:
        return None
    obj, target = m.group(1).lower(), m.group(2).lower().strip()
    if known and (obj not in known or target not in known):
        return None
    return SubGoal(obj, target, subgoal_text(obj, target))


def parse_goal_state(thought: str, known: Sequence[str] = ()) -> list[SubGoal]:
    """Sub-goals from a ``Goal state is ["…", "…"]`` thought (quoted sentences; unparseable ones dropped,
    duplicates removed)."""
    out: list[SubGoal] = []
    for sentence in _QUOTED.findall(thought):
        sg = parse_subgoal(sentence, known)
        if sg is not None and sg not in out:
            out.append(sg)
    return out


def completed(subgoals: Sequence[SubGoal], positions: Mapping[str, Sequence[float]],
              locations: Mapping[str, Sequence[float]], radius: float = SUCCESS_RADIUS) -> list[SubGoal]:
    """The sub-goals that hold now, by the success detector."""
    return [sg for sg in subgoals if detect_success(dict(positions), sg.obj, sg.target, dict(locations), radius)]


def format_list(sentences: Sequence[str]) -> str:
    """``["A.", "B."]`` with double quotes, as in Listing 1."""
    return json.dumps(list(sentences), ensure_ascii=False)


def describe_progress(subgoals: Sequence[SubGoal], positions: Mapping[str, Sequence[float]],
                      locations: Mapping[str, Sequence[float]], radius: float = SUCCESS_RADIUS) -> str:
    """IM's scene line without the ``Scene:`` prefix: ``You have completed ["…", …]``."""
    return f"You have completed {format_list([sg.text for sg in completed(subgoals, positions, locations, radius)])}"


def goal_state_text(subgoals: Sequence[SubGoal]) -> str:
    """The goal thought: ``Goal state is ["…", …].``"""
    return f"Goal state is {format_list([sg.text for sg in subgoals])}."
