"""The tabletop's skill language: "pick the <block> and place it on the <target>" and "done". The env,
its goal language and the detected-object affordance all read and write it."""
from __future__ import annotations

import re

DONE = "done"
_SKILL = re.compile(r"^\s*pick (?:up )?the (\w+ block) and place it (?:on|in|into|onto) (?:top of )?the (.+?)\s*\.?\s*$",
                    re.IGNORECASE)


def skill_label(obj: str, target: str) -> str:
    return f"pick the {obj} and place it on the {target}"


def parse_skill(label: str) -> tuple[str, str] | None:
    """``"pick the red block and place it on the blue bowl"`` → ``("red block", "blue bowl")``; also
    accepts "pick up", "in/into/onto", capitals and a final period."""
    m = _SKILL.match(label)
    return (m.group(1).lower(), m.group(2).lower()) if m else None
