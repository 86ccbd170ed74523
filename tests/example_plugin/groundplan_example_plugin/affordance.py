"""The pantry's affordance source: p(skill succeeds | state) from the pantry's own rules.

It reads the simulator's state, which groundplan counts as truth: so it declares the read (a stand-in for
the learned value functions SayCan App. C.1 trains) and reaches the state only through
:func:`groundplan.core.truth.read`. The tables then mark every row that uses it, and an undeclared read
would raise instead of leaking into results.
"""
from __future__ import annotations

from typing import Any, ClassVar, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from groundplan.core.truth import OracleDeclaration, Truth, read
from groundplan.core.types import Observation
from groundplan.core.validation import validate_options
from groundplan.grounding.base import Affordance

from groundplan_example_plugin.env import apply


class PantryPreconditionsConfig(BaseModel):
    """Options of :class:`PantryPreconditions` (a planner's ``affordance_options``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    done: float = Field(0.1, ge=0.0, le=1.0, description="affordance of done, which is always possible; low, as "
                        "SayCan App. C.1's termination value, so done wins only when the LM clearly prefers it")
    infeasible: float = Field(0.0, ge=0.0, le=1.0, description="affordance of a skill whose preconditions fail")


class PantryPreconditions(Affordance):
    """1 for a skill whose preconditions hold in the pantry's true state, ``infeasible`` otherwise."""

    #: class level, so a config's label and the tables' marks are known before anything is built
    declaration: ClassVar[OracleDeclaration] = OracleDeclaration(
        name="pantry preconditions", reads=frozenset({Truth.STATE}), stands_in=True,
        wording="each skill's preconditions checked on the pantry's true state, standing in for learned value "
                "functions (SayCan App. C.1)")

    def __init__(self, **options: Any) -> None:
        self.config = validate_options(PantryPreconditionsConfig, options, "pantry_preconditions options")

    def __call__(self, observation: Observation, skills: Sequence[str], history: Sequence[str]) -> np.ndarray:
        state = read(observation, Truth.STATE, reader=self)
        out = []
        for skill in skills:
            if skill == "done":
                out.append(self.config.done)
            else:
                ok, _ = apply(dict(state), skill)  # on a copy: asking changes nothing
                out.append(1.0 if ok else self.config.infeasible)
        return np.array(out, dtype=float)
