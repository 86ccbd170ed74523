"""A greedy scoring planner: each step, every listed skill scored by the LM as the continuation of
``"Task: <instruction>\\nSteps:"`` plus the steps so far, weighted by the affordance when there is one, and
the best chosen (SayCan's rule, without its few-shot prompt).

It shows what a planner of one's own needs: a typed :class:`~groundplan.planners.base.PlannerOptions` with
its LLM needs declared (a backend that cannot score is refused when the config loads), and the
``reset`` / ``next_step`` pair that returns a :class:`~groundplan.core.types.Decision` with every
candidate's score components, which the traces, tables and viewer show. It reads only the instruction,
the listed skills and its affordance source, never the simulator's truth, so it declares nothing itself.
"""
from __future__ import annotations

import math
from typing import Any

from pydantic import ConfigDict, Field

from groundplan.core.errors import InvalidInputError
from groundplan.core.types import CandidateScore, Decision, Observation, StepResult, Task
from groundplan.core.validation import validate_instruction, validate_options
from groundplan.envs.base import listed_actions
from groundplan.grounding.base import AffordanceSource
from groundplan.llm.base import LanguageModel
from groundplan.planners.base import EpisodeProgress, Planner, PlannerOptions


class GreedyConfig(PlannerOptions):
    """Options of the ``example_greedy`` planner (a planner spec's ``options``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_steps: int = Field(8, ge=1, description="decisions per episode when the sweep gives no cap (done included)")
    normalise: bool = Field(False, description="rank by the mean token log-prob instead of the sum")
    min_affordance: float = Field(1e-6, gt=0.0, le=1.0, description="floor of an affordance before its log, so "
                                  "that a skill the source rules out is still ranked (last) instead of -inf")
    done_skill: str = Field("done", description="the skill that ends the plan")

    @property
    def llm_needs(self) -> tuple[str, ...]:
        return ("score",)


class GreedyPlanner(EpisodeProgress, Planner):
    """Chooses ``argmax(log p_LM(skill | prompt) + log affordance(skill))``; ties go to the env's order."""

    name = "example_greedy"

    def __init__(self, lm: LanguageModel, affordance: AffordanceSource | None, config: GreedyConfig) -> None:
        self.lm = lm
        self.affordance = affordance
        self.config = config
        self.max_steps = config.max_steps
        self._prompt = ""

    @property
    def prompt(self) -> str:
        return self._prompt

    def reset(self, task: Task, observation: Observation, seed: int = 0) -> None:
        self._prompt = f"Task: {validate_instruction(task.instruction)}\nSteps:"
        self._begin_episode()
        if self.affordance is not None:
            self.affordance.reset(task, seed)

    def next_step(self, observation: Observation, last: StepResult | None) -> Decision:
        self._check_running()
        skills = listed_actions(observation)
        if not skills:
            raise InvalidInputError("the observation lists no skills, so there is nothing to choose from")
        scores = self.lm.score(self._prompt, [f" {s}" for s in skills])
        affordances = None if self.affordance is None else self.affordance(observation, skills, list(self._history))
        candidates = []
        for i, (skill, score) in enumerate(zip(skills, scores)):
            llm = score.logprob_mean if self.config.normalise else score.logprob_sum
            p = None if affordances is None else float(affordances[i])
            combined = llm + (0.0 if p is None else math.log(max(p, self.config.min_affordance)))
            candidates.append(CandidateScore(skill=skill, llm=llm, affordance=p, combined=combined))
        best = max(candidates, key=lambda c: c.combined)  # max keeps the first of equals
        done = best.skill == self.config.done_skill
        delta = f" {best.skill}" + ("." if done else ",")
        self._prompt += delta
        if done:
            self._finished = True
        else:
            self._history.append(best.skill)
        return Decision(skill=best.skill, done=done, candidates=candidates, prompt_delta=delta)


def make_greedy(lm: LanguageModel, affordance: AffordanceSource | None = None, **options: Any) -> GreedyPlanner:
    """The registered factory: ``PLANNERS.get("example_greedy")(lm=..., affordance=..., **options)``."""
    return GreedyPlanner(lm, affordance, validate_options(GreedyConfig, options, "example_greedy options"))
