"""The episode runner: one env, the planners of a sweep, ``run(spec) -> EpisodeResult``.

Shaped like RLlib's ``EnvRunner`` (make, run, metrics, healthy): the same class runs in this process for
``--local`` sweeps, ``groundplan plan`` and tests, and inside a Ray actor
(:mod:`groundplan.actors.worker`) for distributed sweeps, where the env lives in the actor and
only LLM and grounding calls leave it. A runner that dies mid-episode loses only that episode, which the
sweep driver reruns from reset on a healthy runner.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from groundplan.config import EnvSpec, PlannerSpec
from groundplan.core.errors import InvalidInputError
from groundplan.core.types import Task
from groundplan.envs.base import Env
from groundplan.factory import make_env, make_planner
from groundplan.llm.base import LanguageModel
from groundplan.planners.base import Planner
from groundplan.rollout.episode import run_episode
from groundplan.rollout.frames import Frame, newest_frame
from groundplan.rollout.traces import EpisodeTrace, StepTrace

logger = logging.getLogger(__name__)

#: ``affordance_for(planner_spec, episode_id)``: an affordance source for one episode (e.g. a client of
#: the affordance-server actor), or None to build the planner's own
AffordanceFor = Callable[[PlannerSpec, str], Any]


@dataclass(frozen=True)
class EpisodeSpec:
    """One episode of a sweep. ``episode_id`` includes a hash of everything that can change the outcome
    (see :func:`groundplan.pipelines.evaluate.sweep.episode_specs`), so results of another config never match it."""

    planner: PlannerSpec
    task: Task
    seed: int
    episode_id: str
    #: this episode's step cap when it is not the runner's (a served request may ask for fewer steps)
    max_steps: int | None = None


@dataclass
class EpisodeResult:
    """A finished episode: its trace and the frames recorded on the way."""

    trace: EpisodeTrace
    frames: list[Frame] = field(default_factory=list)


class EpisodeRunner:
    """Owns one env for its lifetime and one planner per (planner spec, step cap), built on first use.

    ``record_setup_errors`` (sweeps) records a planner that refuses the task or cannot be built as a failed
    episode; off (the serve API), the :class:`InvalidInputError` reaches the caller as bad input."""

    def __init__(self, env: EnvSpec | Env, lm: LanguageModel, max_steps: int, *, llm_name: str = "",
                 config_hash: str = "", affordance_for: AffordanceFor | None = None, record_frames: bool = True,
                 record_setup_errors: bool = True) -> None:
        self.env = env if isinstance(env, Env) else make_env(env)
        self.lm = lm
        self.max_steps = max_steps
        self.llm_name = llm_name or lm.name
        self.config_hash = config_hash
        self.affordance_for = affordance_for
        self.record_frames = record_frames
        self.record_setup_errors = record_setup_errors
        self._planners: dict[tuple[str, int], Planner] = {}
        self._episodes = 0
        self._busy_s = 0.0

    def planner(self, spec: PlannerSpec, episode_id: str, max_steps: int | None = None) -> Planner:
        """The planner of ``spec``: cached per label and step cap, unless each episode gets its own
        affordance client."""
        cap = max_steps or self.max_steps
        if self.affordance_for is not None and spec.affordance:
            return make_planner(spec, self.lm, cap, affordance=self.affordance_for(spec, episode_id))
        key = (spec.display, cap)
        if key not in self._planners:
            self._planners[key] = make_planner(spec, self.lm, cap)
        return self._planners[key]

    def run(self, spec: EpisodeSpec) -> EpisodeResult:
        """Run one episode from reset. A planner that refuses the task (InvalidInputError at reset) or
        cannot be built is recorded as a failed episode, like every other planner or env error (unless
        ``record_setup_errors`` is off). An empty ``episode_id`` takes :func:`run_episode`'s default."""
        t0 = time.perf_counter()
        frames: list[Frame] = []
        cap = spec.max_steps or self.max_steps

        def record(trace: EpisodeTrace, step: StepTrace | None, env: Env) -> None:
            frame = newest_frame(env, 0 if step is None else step.index + 1)
            if frame is not None:
                frames.append(frame)

        try:
            trace = run_episode(self.planner(spec.planner, spec.episode_id, cap), self.env, spec.task, spec.seed,
                                max_steps=cap, llm_name=self.llm_name, config_hash=self.config_hash,
                                episode_id=spec.episode_id or None, on_step=record if self.record_frames else None)
        except (InvalidInputError, TypeError, ValueError) as exc:
            if not self.record_setup_errors:
                raise
            trace = failed_trace(spec, self.env.name, self.llm_name, self.config_hash,
                                 f"{type(exc).__name__}: {exc} (episode setup)")
        self._episodes += 1
        self._busy_s += time.perf_counter() - t0
        return EpisodeResult(trace, frames)

    def metrics(self) -> dict[str, float]:
        return {"episodes": self._episodes, "busy_s": self._busy_s}

    def healthy(self) -> bool:
        return True


def failed_trace(spec: EpisodeSpec, env_name: str, llm_name: str, config_hash: str, error: str) -> EpisodeTrace:
    """The trace of an episode that could not run (its error says why)."""
    return EpisodeTrace(
        episode_id=spec.episode_id, planner=spec.planner.display, env=env_name, task_id=spec.task.task_id,
        family=spec.task.family, instruction=spec.task.instruction, seed=spec.seed, llm=llm_name,
        config_hash=config_hash, execution_success=False, plan_success=None, error=error,
        oracles=_declared(spec.planner),
    )


def _declared(planner: PlannerSpec) -> list[dict[str, Any]] | None:
    """The planner spec's declarations as a trace records them; None (not recorded, the tables then read
    the config) when they cannot be had, e.g. its grounding source's package is missing."""
    try:
        return [d.to_dict() for d in planner.declarations]
    except Exception as exc:
        logger.warning("the declarations of planner %s are not recorded: %s", planner.label or planner.name, exc)
        return None
