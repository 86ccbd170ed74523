"""Planner interface (DESIGN.md, "Interfaces").

A planner holds its prompt and history; it never talks to Ray, files or MLflow. The episode runner
calls ``reset`` once, then ``next_step`` until the decision is ``done`` or a step cap is hit.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from groundplan.envs.base import Observation, StepResult, Task
from groundplan.traces import CandidateScore


@dataclass
class Decision:
    """The next skill (or done) and the scores that led to it."""

    skill: str
    done: bool
    candidates: list[CandidateScore] = field(default_factory=list)
    prompt_delta: str = ""  # text the planner appended to its prompt for this step
    info: dict[str, Any] = field(default_factory=dict)


class Planner(ABC):
    """Base class; subclasses register with ``groundplan.planners.PLANNERS``."""

    name: str = "planner"

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


#: longest instruction accepted; SayCan-style prompts are a few hundred tokens, an instruction far
#: longer than any in the task sets is almost certainly a mistake (a pasted file, a wrong field)
MAX_INSTRUCTION_CHARS = 1000


def validate_instruction(instruction: str, max_chars: int = MAX_INSTRUCTION_CHARS) -> str:
    """Refuse empty or over-long instructions with a clear message; return the stripped text."""
    from groundplan.errors import InvalidInputError

    if not isinstance(instruction, str) or not instruction.strip():
        raise InvalidInputError("the instruction is empty: say what the robot should do, e.g. 'bring me a coke can'")
    text = instruction.strip()
    if len(text) > max_chars:
        raise InvalidInputError(
            f"the instruction is {len(text)} characters long; the limit is {max_chars}. Shorten it or raise "
            "max_instruction_chars in the planner config."
        )
    return text
