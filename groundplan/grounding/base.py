"""Grounding interfaces: affordance sources give p(c_π | s, ℓ_π) for each skill label.

SayCan (Ahn et al., Sec. 3) multiplies the LLM's p(ℓ_π | i) by this affordance; SayCanPay's Can
model and SayCan's value functions both fit this shape.

Every source declares, at class level, what it reads of the simulator's truth (``declaration``, an
:class:`~groundplan.core.truth.OracleDeclaration`, or None for a source that reads only the observation's
text, skills and percepts) and reaches that truth only through :func:`groundplan.core.truth.read`, which
refuses an undeclared read. A planner reports its source's declaration, and the tables mark its rows.
"""
from __future__ import annotations

from typing import Any, Protocol, Sequence, runtime_checkable

import numpy as np

from groundplan.core.truth import DeclaresTruth, OracleDeclaration
from groundplan.core.types import Observation, Task


@runtime_checkable
class AffordanceSource(Protocol):
    """Maps (observation, skill labels, history of executed labels) → probabilities in [0, 1]."""

    #: what the source reads of the simulator's truth (class level), None for nothing
    declaration: OracleDeclaration | None

    def reset(self, task: Task, seed: int) -> None:
        """Called at episode start (sources that are consistent with a query need the task)."""
        ...

    def __call__(self, observation: Observation, skills: Sequence[str], history: Sequence[str]) -> np.ndarray:
        ...


@runtime_checkable
class CanPaySource(Protocol):
    """SayCanPay's grounding (Hazra et al., Sec. 5): p_can and p_pay of (history, candidate action)
    pairs, all of a decoding step in one call (``saycanpay_learned``, ``saycanpay_oracle`` and the
    AffordanceServer's client implement it). Returns a
    :class:`~groundplan.grounding.saycanpay.CanPayScores`."""

    #: what the source reads of the simulator's truth (class level), None for nothing
    declaration: OracleDeclaration | None

    def reset(self, task: Task, seed: int) -> None:
        ...

    def score_sequences(self, goal: str, init_obs: str, items: Sequence[tuple[Sequence[str], str]],
                        one_by_one: bool = False) -> Any:
        ...


class Affordance(DeclaresTruth):
    """Convenience base with a no-op ``reset`` and no declaration.

    A subclass that reads simulator truth (the task's goal or reference plan, the simulator state in the
    observation) sets the class attribute ``declaration`` and reads it through
    :func:`groundplan.core.truth.read`; a planner using it reports the declaration in
    :attr:`groundplan.planners.base.Planner.declarations`, and an oracle's name ends its label.
    """

    def reset(self, task: Task, seed: int) -> None:  # noqa: D401 - interface method
        return None

    def __call__(self, observation: Observation, skills: Sequence[str], history: Sequence[str]) -> np.ndarray:
        raise NotImplementedError
