"""Say training examples: the exact text a planner reads at each decision, and the step it should choose.

Fine-tuning the planning LM (Huang et al. 2022, Table 1's "Fine-tuned" row: the LM trained on the
training programs) only measures something when the model is trained on the prompt it will be scored
on. So examples are not formatted by a second copy of each planner's prompt code: the planner itself
builds them. A trajectory (an expert's, or a successful episode of any planner) is replayed through
:func:`~groundplan.rollout.episode.run_episode` with the planner under training, whose language model
is a :class:`ForcedChoiceLM`: at every decision it is told the step the trajectory took (a planner that writes its whole plan
before the first step, :meth:`~groundplan.planners.base.Planner.plan_text`, is told the whole trajectory), records the
prompt the planner sent with the text the planner reads that step from (the option it scores, or the
generation it translates, with the generation's stop string), and answers so that the planner chooses
that step. The env executes it, so the history, feedback and observations the next prompt holds are the
ones the planner would have had at test time. A replay whose planner does not choose the trajectory's
step (the step is not among its options) ends there and keeps only the decisions before.

Loss is on the completion only; what the planner reads is the prompt (:class:`SayExample`).
"""
from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from groundplan.core.types import Decision, Observation, StepResult, Task
from groundplan.envs.base import ActionModel, Env
from groundplan.llm.base import Generation, GenerationParams, OptionScore, ScoreRequest
from groundplan.llm.beam_search import BeamCandidate, BeamSearchParams
from groundplan.planners.base import Planner
from groundplan.rollout.episode import run_episode

log = logging.getLogger(__name__)

#: log-prob a :class:`ForcedChoiceLM` gives every option but the forced one (far below any real score,
#: yet finite, so pruning bounds and sums stay numbers)
OFF_TARGET_LOGPROB = -1000.0


@dataclass(frozen=True)
class SayExample:
    """One decision: the planner's ``prompt`` and the ``completion`` it should read its step from.
    ``eos`` marks a generation with no stop string, which the model should end with its EOS token.
    ``kind`` is the LM call the planner made (``score``, ``generate`` or ``beam``)."""

    prompt: str
    completion: str
    task_id: str
    traj_id: str
    step: int
    kind: str
    eos: bool = False

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _norm(text: str) -> str:
    """A step's text as a planner's option or generation holds it: spaces, case and the closing ``.``/``,``
    of SayCan's dialog format aside."""
    return " ".join(text.strip().strip(".,").split()).lower()


class ForcedChoiceLM:
    """A language model that makes the planner choose :attr:`target` and records what the planner asked.

    ``embed`` is the real sentence encoder (``embedder``): Zero-Shot's example retrieval and translation and
    the Generative projection read it, so the prompt they build is the one they build at test time; a
    forced generation is the step's own text, which every translation maps to itself (cosine 1)."""

    def __init__(self, embedder: Any, name: str = "forced") -> None:
        self.name = name
        self._embedder = embedder
        self.embedder_name = getattr(embedder, "model_name", None)
        self.target: str | None = None
        self.text: str | None = None
        self.recorded: list[tuple[str, str, str, bool]] = []  # (prompt, completion, kind, eos)
        self.matched = False

    def expect(self, step: str, text: str | None = None) -> None:
        """The next decision should choose ``step``; a generation writes ``text`` for it when given (the
        planner's :attr:`~groundplan.planners.base.Planner.done_text` for its done decision, its
        :meth:`~groundplan.planners.base.Planner.step_text` for a step)."""
        self.target, self.matched, self.text = step, False, text

    def _record(self, prompt: str, completion: str, kind: str, eos: bool = False) -> None:
        if not self.matched:  # one example per decision: the first call that offered the step
            self.recorded.append((prompt, completion, kind, eos))
            self.matched = True

    # ------------------------------------------------------------------ LanguageModel
    def score(self, prompt: str, options: Sequence[str]) -> list[OptionScore]:
        want = _norm(self.target or "")
        hit = next((o for o in options if _norm(o) == want), None)
        if hit is not None:
            self._record(prompt, hit, "score")
        return [OptionScore(o, 0.0 if o is hit else OFF_TARGET_LOGPROB, 0.0 if o is hit else OFF_TARGET_LOGPROB,
                            1) for o in options]

    def score_batch(self, requests: Sequence[ScoreRequest]) -> list[list[OptionScore]]:
        return [self.score(p, o) for p, o in requests]

    def _completion(self, prompt: str) -> str:
        text = (self.target or "").strip() if self.text is None else self.text
        return text if not text or not prompt or prompt[-1].isspace() else " " + text

    def generate(self, prompt: str, params: GenerationParams) -> list[Generation]:
        text = self._completion(prompt)
        stop = params.stop[0] if params.stop else ""
        self._record(prompt, text + stop, "generate", eos=not stop)
        return [Generation(text=text, logprob_mean=0.0, num_tokens=1, finish_reason="stop") for _ in range(params.n)]

    def beam_candidates(self, prompt: str, params: BeamSearchParams) -> list[BeamCandidate]:
        text = self._completion(prompt)
        stop = params.stop[0] if params.stop else ""
        self._record(prompt, text + stop, "beam", eos=not stop)
        return [BeamCandidate(text=text, logprob_sum=0.0, num_tokens=1, score=0.0, group=0, finish_reason="stop")]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self._embedder.embed(texts)


class Diverged(RuntimeError):
    """The planner did not choose the trajectory's step (it was not among what the planner offered)."""


class ForcedPlanner(Planner):
    """Wraps the planner under training: before each decision its LM is told the trajectory's next step,
    and a decision that differs ends the replay (:class:`Diverged`)."""

    def __init__(self, planner: Planner, lm: ForcedChoiceLM, steps: Sequence[str], done_skill: str) -> None:
        self.planner, self.lm, self.steps, self.done_skill = planner, lm, list(steps), done_skill
        self.name = planner.name
        self.max_steps = len(self.steps) + 1
        self._i = 0
        self.first_observation = ""
        self._whole_plan: str | None = None

    def reset(self, task: Task, observation: Observation, seed: int = 0) -> None:
        self._i = 0
        self.first_observation = observation.text
        # a planner that writes its whole plan at reset (open loop) reads it from one generation: the
        # trajectory's steps in its answer format
        self._whole_plan = self.planner.plan_text([s for s in self.steps if s != self.done_skill])
        if self._whole_plan is not None:
            self.lm.expect("", self._whole_plan)
        self.planner.reset(task, observation, seed=seed)

    def next_step(self, observation: Observation, last: StepResult | None) -> Decision:
        if self._i >= len(self.steps):
            raise Diverged("the trajectory ended without a done step")
        step = self.steps[self._i]
        self.lm.expect(step, self.planner.done_text if step == self.done_skill else self.planner.step_text(step))
        decision = self.planner.next_step(observation, last)
        chosen_done = decision.done
        want_done = step == self.done_skill
        if chosen_done != want_done or (not want_done and _norm(decision.skill) != _norm(step)):
            # the decisions before it stand; a whole plan's one example does not
            self.lm.recorded = [] if self._whole_plan is not None else self.lm.recorded[: self._i]
            raise Diverged(f"step {self._i + 1}: the planner chose {decision.skill!r}, the trajectory {step!r}")
        self._i += 1
        return decision

    def use_action_model(self, model: ActionModel | None) -> None:
        self.planner.use_action_model(model)

    @property
    def declarations(self):
        return self.planner.declarations


@dataclass
class ReplayResult:
    """The examples of one trajectory, the text of its first observation (what the model reads before it
    acts, for the lineage) and, when the replay stopped early, why."""

    examples: list[SayExample] = field(default_factory=list)
    first_observation: str = ""
    diverged: str | None = None


def replay_examples(make_planner: Callable[[ForcedChoiceLM], Planner], lm: ForcedChoiceLM, env: Env, task: Task,
                    seed: int, steps: Sequence[str], traj_id: str) -> ReplayResult:
    """The examples of trajectory ``steps`` (ending in the env's done skill) of ``task`` from ``seed``,
    replayed in ``env`` by the planner ``make_planner(lm)`` builds."""
    lm.recorded = []
    forced = ForcedPlanner(make_planner(lm), lm, steps, env.done_skill)
    trace = run_episode(forced, env, task, seed, max_steps=len(steps), episode_id=traj_id, goal_only=True)
    examples = [SayExample(prompt=p, completion=c, task_id=task.task_id, traj_id=traj_id, step=i, kind=k, eos=e)
                for i, (p, c, k, e) in enumerate(lm.recorded)]
    return ReplayResult(examples, forced.first_observation, trace.error)
