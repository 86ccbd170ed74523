"""``virtualhome_preconditions``: SayCan's affordance on VirtualHome is whether a step's
preconditions hold in the simulator now (1) or not (0).

It needs simulator access: the env's ``Observation.state`` is a picklable
:class:`~groundplan.envs.virtualhome.env.VirtualHomeSnapshot` (the evolving-graph state, which steps
never modify, and the character id); :meth:`VirtualHomeSnapshot.check` runs the package's executor on
it with the env's instance assignment and discards the result. So the affordance is exact (it is the
simulator's own precondition check) and also works in another process (a Ray actor) that receives
the pickled observation.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from groundplan.core.errors import InvalidInputError
from groundplan.core.truth import OracleDeclaration, Truth, read
from groundplan.core.types import Observation
from groundplan.core.validation import validate_options
from groundplan.grounding.base import Affordance


class PreconditionConfig(BaseModel):
    """Options of :class:`PreconditionAffordance`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    done_skill: str = Field("done", min_length=1, description="Label of the done decision.")
    done_affordance: float = Field(0.1, ge=0.0, le=1.0, description="Affordance of done (SayCan App. C.1: a small constant).")


class PreconditionAffordance(Affordance):
    """1.0 when the step would execute now, 0.0 when it would not; ``done_affordance`` for the done
    label (SayCan Appendix C.1 gives "done" a small constant value)."""

    declaration = OracleDeclaration(
        name="simulator preconditions", reads=frozenset({Truth.STATE}),
        wording="the simulator's own precondition check on its hidden evolving graph: exact feasibility of "
                "each step now, the ground truth saycanpay_oracle labels simulator feasibility")

    def __init__(self, **options: Any) -> None:
        config = validate_options(PreconditionConfig, options, "virtualhome_preconditions options")
        self.done_skill = config.done_skill
        self.done_affordance = float(config.done_affordance)
        self.calls = 0

    def __call__(self, observation: Observation, skills: Sequence[str], history: Sequence[str]) -> np.ndarray:
        snapshot = read(observation, Truth.STATE, self)
        if not hasattr(snapshot, "check"):
            raise InvalidInputError(
                "virtualhome_preconditions needs the VirtualHome env's observation (a VirtualHomeSnapshot with "
                f"check()), got {type(snapshot).__name__}"
            )
        self.calls += 1
        out = np.empty(len(skills))
        for i, skill in enumerate(skills):
            out[i] = self.done_affordance if skill == self.done_skill else float(snapshot.check(skill)[0])
        return out
