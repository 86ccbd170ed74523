"""Grounding interfaces: affordance sources give p(c_π | s, ℓ_π) for each skill label.

SayCan (Ahn et al., Sec. 3) multiplies the LLM's p(ℓ_π | i) by this affordance; SayCanPay's Can
model and SayCan's value functions both fit this shape.
"""
from __future__ import annotations

from typing import Any, Protocol, Sequence, runtime_checkable

import numpy as np

from groundplan.core.types import Observation, Task


@runtime_checkable
class AffordanceSource(Protocol):
    """Maps (observation, skill labels, history of executed labels) → probabilities in [0, 1]."""

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

    def reset(self, task: Task, seed: int) -> None:
        ...

    def score_sequences(self, goal: str, init_obs: str, items: Sequence[tuple[Sequence[str], str]],
                        one_by_one: bool = False) -> Any:
        ...


class Affordance:
    """Convenience base with a no-op ``reset``.

    ``oracle`` names the ground truth a source reads from the task (e.g. its reference plan); None
    for sources that look only at the observation. A planner using such a source reports it in
    :attr:`groundplan.planners.base.Planner.oracles` and its label says so.
    """

    oracle: str | None = None

    def reset(self, task: Task, seed: int) -> None:  # noqa: D401 - interface method
        return None

    def __call__(self, observation: Observation, skills: Sequence[str], history: Sequence[str]) -> np.ndarray:
        raise NotImplementedError
