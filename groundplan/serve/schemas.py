"""Request and response models of the /v1 API (they make the OpenAPI schema at /docs).

Static bounds here are generous ceilings; the configured :class:`~groundplan.serve.config.Limits`
are checked by the service and give a 400 with a message.
"""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class _Req(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ScoreRequest(_Req):
    prompt: str = Field(..., max_length=100_000, description="text the options continue")
    options: list[str] = Field(..., min_length=1, max_length=1024, description="candidate continuations")
    request_id: str | None = Field(None, max_length=128, description="echoed back (clients use it to match retries)")


class OptionLogprob(BaseModel):
    option: str
    logprob_sum: float = Field(description="summed log-prob of the option's tokens")
    logprob_mean: float = Field(description="mean log-prob per token")
    num_tokens: int


class ScoreResponse(BaseModel):
    request_id: str | None = None
    model: str
    options: list[OptionLogprob]
    batch_size: int = Field(description="score requests in the @serve.batch call that scored this one")


class PlanRequest(_Req):
    instruction: str = Field("", max_length=100_000, description="what the robot should do (may be empty when task_id is given)")
    env: str = Field("kitchen", max_length=100, description="a served env (GET /v1/planners)")
    planner: str | None = Field(None, max_length=200, description="a served planner label; default the first")
    seed: int = Field(0, ge=0, le=2**31 - 1, description="start state / sampling seed")
    task_id: str | None = Field(None, max_length=200, description="run one of the env's own tasks (its goal is checked)")
    start_state: dict[str, Any] | None = Field(None, description="env-specific pins of the start state (e.g. kitchen "
                                               "{'robot': 'table', 'holding': 'apple'}), checked by the env before "
                                               "the episode; with task_id it replaces the task's own")
    max_steps: int | None = Field(None, ge=1, le=100, description="step cap, at most the server's limits.max_steps "
                                  "(400 above it); default that limit")


class CandidateOut(BaseModel):
    """One option at a step, split as in SayCan Fig. 7: log p_LLM, affordance, combined (log space)."""

    skill: str
    llm: float | None
    affordance: float | None
    combined: float | None


class StepOut(BaseModel):
    index: int
    chosen: str
    done: bool
    success: bool | None = None
    feedback: str = ""
    prompt_delta: str = ""
    candidates: list[CandidateOut] = Field(default_factory=list)


class PlanResponse(BaseModel):
    episode_id: str
    planner: str
    env: str
    instruction: str
    steps: list[StepOut]
    plan: list[str]
    terminated: bool
    execution_success: bool | None = Field(description="goal held at the end (null for an ad-hoc instruction: no goal)")
    plan_success: bool | None
    goal_details: dict[str, Any]
    error: str | None
    wall_s: float
    trace: dict[str, Any] = Field(description="the full EpisodeTrace, as written to traces.jsonl")


class SessionCreate(_Req):
    instruction: str = Field(..., max_length=100_000)
    planner: str | None = Field(None, max_length=200, description="a served planner label; default the first")
    env: str = Field("kitchen", max_length=100, description="whose skill set the session starts with")
    seed: int = Field(0, ge=0, le=2**31 - 1)
    skills: list[str] | None = Field(None, max_length=4096, description="the robot's skills (default: the env's)")


class SessionInfo(BaseModel):
    session_id: str
    planner: str
    env: str
    instruction: str
    skills: list[str]
    steps: int
    done: bool
    idle_expiry_s: float = Field(description="the session expires after this long without a request")


class ObservationIn(_Req):
    """What the robot observed: optionally a new skill set, a scene description, and its own affordance
    estimates p(c_π | s, ℓ_π) per skill (its value functions, SayCan Sec. 3)."""

    skills: list[str] | None = Field(None, max_length=4096, description="the robot's skills now, checked as at session "
                                     "creation (non-empty labels, limits.max_skills); omitted or empty: unchanged")
    text: str = Field("", max_length=20_000, description="scene description (Inner Monologue's scene feedback)")
    affordances: dict[str, float] = Field(default_factory=dict, description="skill -> probability in [0, 1]")


class FeedbackIn(_Req):
    """How the last skill went (Inner Monologue's success feedback)."""

    success: bool = True
    text: str = Field("", max_length=20_000)


class SessionStep(_Req):
    observation: ObservationIn = Field(default_factory=ObservationIn)
    feedback: FeedbackIn | None = Field(None, description="outcome of the previous skill (omit on the first step)")


class SessionStepResponse(BaseModel):
    session_id: str
    step: int
    skill: str
    done: bool
    prompt_delta: str
    candidates: list[CandidateOut]
    replayed: bool = Field(description="true when this replica rebuilt the planner from the stored session log")


class PlannerInfo(BaseModel):
    label: str
    name: str
    affordance: str | None
    options: dict[str, Any]


class PlannersResponse(BaseModel):
    llm: str
    envs: list[str]
    planners: list[PlannerInfo]


class Health(BaseModel):
    status: str


class ErrorOut(BaseModel):
    detail: str
