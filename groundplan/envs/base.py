"""Environment interface shared by every simulator (docs/architecture.md, "Environments").

gymnasium-style: ``reset(task, seed)`` gives an observation, ``execute(skill)`` runs one skill given as
text. Each env exposes its skill set (admissible skill labels) and its task set, and declares what else it
can do in :class:`EnvCapabilities`, so callers never probe it with ``getattr``.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Sequence

from groundplan.core.types import GoalResult, Observation, StepResult, Task


@dataclass(frozen=True)
class EnvCapabilities:
    """What an env declares about itself beyond the abstract methods."""

    #: :meth:`Env.check_plan` replays a plan noise-free (SayCan's plan success)
    can_replay: bool = False
    #: names (in :data:`groundplan.core.measures.MEASURES`) that :meth:`Env.episode_metrics` returns
    measures: tuple[str, ...] = ()
    #: the measures its summary table shows instead of plan/execution success (empty: the success table)
    table_measures: tuple[str, ...] = ()
    #: camera names of the frames :meth:`Env.frames` returns (empty: it renders nothing)
    cameras: tuple[str, ...] = ()


class Env(ABC):
    """Base class for environments. Subclasses register with ``groundplan.envs.ENVS``."""

    name: str = "env"
    capabilities: EnvCapabilities = EnvCapabilities()
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
        :class:`~groundplan.rollout.traces.EpisodeTrace`), e.g. executability or LCS against reference plans
        (Zero-Shot Planners, Sec. 4). The summary table averages them per (planner, family)."""
        return {}

    def check_plan(self, task: Task, seed: int, plan: Sequence[str]) -> GoalResult:
        """Plan success: replay ``plan`` from the episode's start state with execution noise turned
        off and check the goal. This operationalises SayCan's "plan success" (the right skills, in a
        valid order) without human raters. Only envs that declare ``capabilities.can_replay``."""
        raise NotImplementedError(f"{type(self).__name__} cannot replay plans")

    def frames(self) -> list[Any]:
        """Recent camera frames, ``{"step": int, "camera": str, "rgb": HxWx3 uint8}`` (envs that declare
        ``capabilities.cameras``); the rollout saves the newest after each step."""
        return []

    def default_affordance(self) -> str | None:
        """The registered affordance source that fits this env (``groundplan plan`` uses it), or None."""
        return None
