"""Planner interface (docs/architecture.md, "Planners").

A planner holds its prompt and history; it never talks to Ray, files or MLflow. The episode runner
calls ``reset`` once, then ``next_step`` until the decision is ``done`` or a step cap is hit.
"""
from __future__ import annotations

from abc import ABC, abstractmethod

from groundplan.core.types import Decision, Observation, StepResult, Task


class Planner(ABC):
    """Base class; subclasses register with ``groundplan.planners.PLANNERS``."""

    name: str = "planner"
    #: decisions per episode the runner allows when the sweep gives no cap (the done decision included)
    max_steps: int = 20

    @abstractmethod
    def reset(self, task: Task, observation: Observation, seed: int = 0) -> None:
        """Start a new episode for ``task``; ``seed`` seeds any sampling and the affordance source."""

    @abstractmethod
    def next_step(self, observation: Observation, last: StepResult | None) -> Decision:
        """Choose the next skill given the current observation and the last step's result."""

    @property
    def prompt(self) -> str:
        """The full prompt so far (for traces)."""
        return ""
