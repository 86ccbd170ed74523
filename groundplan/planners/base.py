"""Planner interface (docs/architecture.md, "Planners").

A planner holds its prompt and history; it never talks to Ray, files or MLflow. The episode runner
calls ``reset`` once, then ``next_step`` until the decision is ``done`` or a step cap is hit.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar, Iterable, Sequence

from pydantic import BaseModel, ConfigDict

from groundplan.core.truth import OracleDeclaration, oracle_names, unique
from groundplan.core.types import Decision, Observation, StepResult, Task

if TYPE_CHECKING:
    from groundplan.envs.base import ActionModel


def labelled(label: str, oracles: Iterable[str]) -> str:
    """``label`` with the oracles a planner reads appended, e.g. ``"+Scene (oracle sub-goals)"``, so a
    table never shows a variant that saw ground truth under the name of one that did not. Idempotent."""
    names = [o for o in dict.fromkeys(oracles) if o]
    suffix = f" (oracle {', '.join(names)})" if names else ""
    return label if not suffix or label.endswith(suffix) else label + suffix


class PlannerOptions(BaseModel):
    """Base of every planner's typed options (registered with the planner). ``declarations`` are the
    :class:`~groundplan.core.truth.OracleDeclaration` s of the simulator truth the configuration's settings
    turn on (each options class keeps them as class-level constants), so the sweep can label and mark it
    before anything is built; empty for an honest planner. ``oracles`` are the names its label carries.
    ``llm_needs`` declares what the configuration asks of its language model (names of
    :class:`~groundplan.llm.base.LLMCapabilities` fields), so a config pairing it with a backend that
    cannot (option scoring on a chat-only server) is refused when it loads."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @property
    def declarations(self) -> tuple[OracleDeclaration, ...]:
        """The truth these settings read (none by default)."""
        return ()

    @property
    def oracles(self) -> tuple[str, ...]:
        """The names of the oracles among :attr:`declarations` (stand-ins keep the label)."""
        return oracle_names(self.declarations)

    @property
    def llm_needs(self) -> tuple[str, ...]:
        return ()

    #: the options that shape the text this planner's LM reads (its prompt file, its demonstrations, how
    #: history and feedback enter the prompt); empty: the planner declares no prompt format
    PROMPT_FIELDS: ClassVar[tuple[str, ...]] = ()

    @property
    def prompt_format(self) -> dict[str, Any] | None:
        """What decides the text the LM reads under these options: the values of :attr:`PROMPT_FIELDS`, a
        prompt file's name joined by a hash of its text (an edited file is another format). A fine-tuned Say
        model records the fingerprint of the format it was trained on; None: nothing declared, so no Say
        model can be checked against this planner."""
        if not self.PROMPT_FIELDS:
            return None
        out: dict[str, Any] = {}
        for name in self.PROMPT_FIELDS:
            value = getattr(self, name)
            if name == "prompt" and isinstance(value, str):
                import hashlib

                from groundplan.planners.prompt_files import load_prompt

                value = {"name": value, "sha256": hashlib.sha256(load_prompt(value).encode()).hexdigest()[:16]}
            out[name] = value
        return out


def prompt_fingerprint(planner: str, prompt_format: Any) -> str:
    """What a fine-tuned Say model was trained to read: a hash of the planner's registered name and its
    declared prompt format (:attr:`PlannerOptions.prompt_format`). A model scored on another format than
    the one it was trained on measures nothing, so a config that pairs them is refused."""
    import hashlib
    import json

    doc = json.dumps({"planner": planner, "format": prompt_format}, sort_keys=True, default=str)
    return hashlib.sha256(doc.encode()).hexdigest()[:16]


class Planner(ABC):
    """Base class; subclasses register with ``groundplan.planners.PLANNERS``."""

    name: str = "planner"
    #: decisions per episode the runner allows when the sweep gives no cap (the done decision included)
    max_steps: int = 20
    #: the grounding source the planner uses (an AffordanceSource or CanPaySource), None for none; its
    #: declaration is part of the planner's (:attr:`declarations`)
    affordance: Any = None

    @abstractmethod
    def reset(self, task: Task, observation: Observation, seed: int = 0) -> None:
        """Start a new episode for ``task``; ``seed`` seeds any sampling and the affordance source."""

    @abstractmethod
    def next_step(self, observation: Observation, last: StepResult | None) -> Decision:
        """Choose the next skill given the current observation and the last step's result."""

    @property
    def declarations(self) -> tuple[OracleDeclaration, ...]:
        """What this planner reads of the simulator's truth at planning time (the task's goal, reference
        plan, metadata or start state, the simulator state in its observations), each an
        :class:`~groundplan.core.truth.OracleDeclaration`; empty when it reads none. It reaches that truth
        only through :func:`groundplan.core.truth.read`, which refuses what is not declared here. Only a
        config may turn truth on: its options' declarations and its grounding source's. The default is the
        source's declaration (``affordance.declaration``); a planner whose options declare more adds them."""
        return unique([None if self.affordance is None else self.affordance.declaration])

    @property
    def oracles(self) -> tuple[str, ...]:
        """The names of the oracles among :attr:`declarations`; the display label says them:
        ``labelled(label, planner.oracles)`` (a stand-in keeps the label; the tables mark it)."""
        return oracle_names(self.declarations)

    @property
    def prompt(self) -> str:
        """The full prompt so far (for traces)."""
        return ""

    @property
    def done_text(self) -> str | None:
        """What this planner's LM writes to end a plan, when it generates its steps: None for the done skill's
        own label (the default); ``""`` for a planner that ends on empty samples (Zero-Shot without a
        dialog, Sec. 3). Say fine-tuning trains the done decision on it."""
        return None

    def step_text(self, skill: str) -> str | None:
        """How this planner's LM writes ``skill`` when it generates it, in the form its prompt then shows the
        step (Zero-Shot's "Step 2: Walk to bed", capitalised); None: the skill's own text. Say fine-tuning
        trains a generated step on it, so the target is what the next prompt holds."""
        return None

    def plan_text(self, steps: Sequence[str]) -> str | None:
        """The text this planner's LM writes for the whole plan ``steps`` when it writes its plan before the
        first step (open loop), in the form it reads the plan from; None (the default): it decides one step at
        a time. Say fine-tuning trains such a planner's one generation on it."""
        return None

    def use_action_model(self, model: "ActionModel | None") -> None:
        """The env's :class:`~groundplan.envs.base.ActionModel` for this episode (its rules and the actions
        it lists in each state, never the goal), or None when the env declares none.
        :func:`~groundplan.rollout.episode.run_episode` calls it after ``reset``, which forgets the last
        episode's. Planners that decide from each new observation have no use for it (the default
        ignores it); one that plans ahead offline (SayCanPay's Beam-Action) uses it."""
        return None


class EpisodeProgress:
    """The bookkeeping of a planner that decides one step at a time: the actions chosen so far
    (``_history``, the done decision not included), whether ``reset`` started an episode and whether the
    plan has ended. Kept once, since every step-by-step planner (SayCan's dialog planners, Zero-Shot
    Planners, Inner Monologue, SayCanPay) makes the same checks before every step."""

    _history: list[str]
    _started: bool = False
    _finished: bool = False

    def _begin_episode(self) -> None:
        """A new episode: no action chosen yet, the plan open."""
        self._history = []
        self._started = True
        self._finished = False

    def _check_running(self) -> None:
        """Refuse a step before ``reset`` or after the plan ended."""
        if not self._started:
            raise RuntimeError(f"{type(self).__name__}.next_step was called before reset(task, observation)")
        if self._finished:
            raise RuntimeError(f"{type(self).__name__} already finished its plan; call reset first")


class PlanPlayback(EpisodeProgress):
    """A planner that writes its whole plan before the first step (open loop: Zero-Shot Planners' vanilla
    baseline, Huang et al. 2022 Sec. 4; EAI's action sequencing, Li et al. 2024 Sec. 3.3) plays it one step
    per decision, whatever the simulator answers, and decides done after the last step. The plan's record
    (``_plan_info``: the text the model wrote, its scores) goes with the first decision only, so a trace
    holds it once; an empty plan is a done decision carrying it."""

    _plan: list[str]
    _plan_info: dict[str, Any]

    def _step_delta(self, step: str, index: int) -> str:
        """The prompt text a played step adds (for traces); none by default."""
        return ""

    def _play(self, done_skill: str) -> Decision:
        self._check_running()
        n = len(self._history)
        first = dict(self._plan_info) if n == 0 else {}
        if n >= len(self._plan):
            self._finished = True
            return Decision(skill=done_skill, done=True,
                            info={"stop": "end_of_plan" if self._plan else "empty_plan", **first})
        step = self._plan[n]
        delta = self._step_delta(step, n)
        self._history.append(step)
        return Decision(skill=step, done=False, prompt_delta=delta, info=first)
