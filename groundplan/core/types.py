"""The types every layer shares: what a task is, what a planner sees, what a step did, what a planner
decided and why (docs/architecture.md, "Core").

They are plain dataclasses with no behaviour beyond their fields, so the env, grounding, planner,
rollout, actor and serving layers can all exchange them (and pickle them across Ray) without importing
one another.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Task:
    """One instruction to plan for, with what is needed to judge the outcome.

    ``goal`` is env-specific data that the env's goal checker understands (e.g. predicates);
    ``start_state`` optionally pins parts of the initial state (SayCan's "embodiment" family);
    ``reference_plan`` is a known-good skill sequence when one exists. A planner must not read
    ``goal``, ``reference_plan``, ``metadata`` or ``start_state`` unless its config names an oracle, and
    then only through :func:`groundplan.core.truth.read` under a declaration (the env side reads them
    directly); the episode loop hands a planner a copy without the ones it does not declare
    (:class:`groundplan.core.truth.Withholding`).
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

    ``skills`` are the admissible skill labels now; ``state`` is the env's structured state, the
    simulator's truth except the fields that model the robot's sensors (:data:`groundplan.core.truth.PERCEPTS`):
    planners and grounding sources read the first through :func:`groundplan.core.truth.read` under a
    declaration and percepts through :func:`groundplan.core.truth.percept`, and a planner that does not
    declare the state is handed only its percepts (the LLM never sees it unless a planner puts text in its
    prompt);
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


@dataclass
class CandidateScore:
    """One option considered at a step with every score component (SayCan Fig. 7's three bars).

    ``llm`` is log p_LLM, ``affordance`` is p_affordance in [0, 1] (None when not used) and
    ``combined`` is what the planner ranked by (log-space).
    """

    skill: str
    llm: float
    affordance: float | None
    combined: float
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Decision:
    """The next skill (or done) and the scores that led to it."""

    skill: str
    done: bool
    candidates: list[CandidateScore] = field(default_factory=list)
    prompt_delta: str = ""  # text the planner appended to its prompt for this step
    info: dict[str, Any] = field(default_factory=dict)
