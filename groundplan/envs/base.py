"""Environment interface shared by every simulator (DESIGN.md, "Interfaces").

gymnasium-style: ``reset(task, seed)`` gives an observation, ``execute(skill)`` runs one skill given as
text. Each env exposes its skill set (admissible skill labels) and its task set.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Sequence


@dataclass(frozen=True)
class Task:
    """One instruction to plan for, with what is needed to judge the outcome.

    ``goal`` is env-specific data that the env's goal checker understands (e.g. predicates);
    ``start_state`` optionally pins parts of the initial state (SayCan's "embodiment" family);
    ``reference_plan`` is a known-good skill sequence when one exists.
    """

    task_id: str
    instruction: str
    family: str
    goal: Any
    start_state: dict[str, Any] | None = None
    reference_plan: tuple[str, ...] | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class Observation:
    """What a planner and its grounding functions may see after reset or a skill.

    ``skills`` are the admissible skill labels now; ``state`` is env-specific structured state for
    affordance/perception functions (the LLM never sees it unless a planner puts text in its prompt);
    ``text`` is an optional scene description; ``images`` maps camera name → array;
    ``admissible`` optionally masks ``skills`` to the ones this state admits.
    """

    skills: list[str]
    state: Any = None
    text: str = ""
    images: dict[str, Any] = field(default_factory=dict)
    #: optional boolean array aligned with ``skills``: which are admissible here (None = all). Envs
    #: with one large shared skill list (VirtualHome's 40k steps over every object of the dataset)
    #: mark the steps whose objects exist in this episode's scene, so the list (and its cached
    #: embeddings) stays shared while planners only pick what the scene admits.
    admissible: Any = None


@dataclass
class StepResult:
    """Outcome of executing one skill: did it succeed, the feedback text, and the new observation."""

    success: bool
    feedback: str
    observation: Observation
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class GoalResult:
    """Goal check at the end of an episode: success and which goal predicates held or not."""

    success: bool
    satisfied: list[str] = field(default_factory=list)
    unsatisfied: list[str] = field(default_factory=list)


class Env(ABC):
    """Base class for environments. Subclasses register with ``groundplan.envs.ENVS``."""

    name: str = "env"
    #: skill label that ends an episode (SayCan's "done"); executing it changes nothing
    done_skill: str = "done"

    @abstractmethod
    def tasks(self, families: Sequence[str] | None = None) -> list[Task]:
        """The task set, optionally filtered to some families."""

    @abstractmethod
    def reset(self, task: Task, seed: int) -> Observation:
        """Start an episode for ``task``; the same (task, seed) gives the same start state."""

    @abstractmethod
    def execute(self, skill: str) -> StepResult:
        """Run one skill given by its label. An inadmissible label is a failed step, not an exception."""

    @abstractmethod
    def check_goal(self) -> GoalResult:
        """Evaluate the current task's goal on the current state."""

    def episode_metrics(self, task: Task, trace: Any) -> dict[str, float]:
        """Env-specific per-episode metrics computed at the end of an episode from its trace (an
        :class:`~groundplan.traces.EpisodeTrace`), e.g. executability or LCS against reference plans
        (Zero-Shot Planners, Sec. 4). The summary table averages them per (planner, family)."""
        return {}

    def check_plan(self, task: Task, seed: int, plan: Sequence[str]) -> GoalResult:
        """Plan success: replay ``plan`` from the episode's start state with execution noise turned
        off and check the goal. This operationalises SayCan's "plan success" (the right skills, in a
        valid order) without human raters. Envs without a noise-free mode may not support it."""
        raise NotImplementedError(f"{type(self).__name__} cannot replay plans")
