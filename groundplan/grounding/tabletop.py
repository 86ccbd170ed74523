"""SayCan-tabletop affordances (the authors' open-source PyBullet demo): a pick-and-place option is
afforded (1.0) when the object to pick — and the place target, unless it is a table location — is in
the perceived object list (``TabletopState.detected``); ``done`` gets 0.2; everything else 0.

It reads the object lister's list alone, a percept (:data:`groundplan.core.truth.PERCEPTS`: the objects the
top camera's segmentation shows, with the env's miss and false-positive rates), never the true object poses,
so it declares no simulator truth. The lister is the demo's stand-in for its open-vocabulary detector; at
the env's default rates (0) it is exact on the objects the camera sees."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from groundplan.core.truth import percept
from groundplan.core.types import Observation
from groundplan.core.validation import validate_options
from groundplan.envs.tabletop.skills import DONE, parse_skill
from groundplan.envs.tabletop.world import LOCATIONS
from groundplan.grounding.base import Affordance


class DetectedObjectConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    done: float = Field(0.2, ge=0.0, le=1.0, description="Affordance of 'done' (SayCan tabletop demo: 0.2).")
    require_target: bool = Field(True, description="Also require the place target (block/bowl) to be detected.")


class DetectedObjectAffordance(Affordance):
    def __init__(self, **options: Any) -> None:
        self.config = validate_options(DetectedObjectConfig, options, "tabletop_detected options")

    def __call__(self, observation: Observation, skills: Sequence[str], history: Sequence[str]) -> np.ndarray:
        detected = set(percept(observation, "detected") or ())
        out = np.zeros(len(skills))
        for i, skill in enumerate(skills):
            if skill.strip().lower().rstrip(".") == DONE:
                out[i] = self.config.done
                continue
            parsed = parse_skill(skill)
            if parsed is None:
                continue
            obj, target = parsed
            ok = obj in detected and (target in LOCATIONS or not self.config.require_target or target in detected)
            out[i] = 1.0 if ok else 0.0
        return out
