"""Request and response models of the /v1 API (they make the OpenAPI schema at /docs).

Static bounds here are generous ceilings; the configured :class:`~groundplan.serve.config.Limits`
are checked by the service and give a 400 with a message. A list a caller may leave out (a session's
``skills``) is refused when given empty: an empty list must never quietly mean the default.

``start_state`` is typed per env: :func:`plan_request_model` gives the app's ``PlanRequest`` whose schema
is any of the served envs' start-state models (``Env.start_state_schema``), and the route checks a request's
start state against its own env's model (422 naming the field).
"""
from __future__ import annotations

import dataclasses
import typing
from typing import Annotated, Any, Sequence, Union

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainValidator, create_model

from groundplan.rollout.traces import EpisodeTrace, StepTrace


def _json_integer(value: Any) -> Any:
    """A JSON integer: a whole number, ``3`` or ``3.0`` (JSON Schema's ``integer`` includes both), never a
    boolean or a string, which pydantic's lax mode would coerce."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError("must be an integer")
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError("must be a whole number")
        return int(value)
    return value


def json_int(**bounds: Any) -> Any:
    """The type of a request's integer field: what the schema calls ``integer``, and nothing else. Bounds
    (``ge``, ``le``) go here rather than on the field, so that in a union (``json_int(ge=1) | None``)
    they reach the JSON schema as ``minimum``/``maximum``."""
    return Annotated[int, Field(strict=False, **bounds), BeforeValidator(_json_integer)]


class _Req(BaseModel):
    """Base of the request models: unknown fields refused, and strict types, so what the OpenAPI schema calls
    invalid is refused (422) rather than coerced (``true`` as a seed, ``1`` as a boolean, ``"2"`` as a number),
    and what it calls valid is accepted; integers are :func:`json_int`."""

    model_config = ConfigDict(extra="forbid", strict=True)


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
    batch_size: int = Field(description="score requests in the scorer batch that scored this one")


class PlanRequest(_Req):
    """One episode: an instruction or one of the env's tasks, with optional pins of the start state."""

    instruction: str = Field("", max_length=100_000, description="what the robot should do (may be empty when task_id is given)")
    env: str = Field("kitchen", max_length=100, description="a served env (GET /v1/planners)")
    planner: str | None = Field(None, max_length=200, description="a served planner label; default the first")
    seed: json_int(ge=0, le=2**31 - 1) = Field(0, description="start state / sampling seed")
    task_id: str | None = Field(None, max_length=200, description="run one of the env's own tasks (its goal is checked)")
    start_state: dict[str, Any] | None = Field(None, description="env-specific pins of the start state (e.g. kitchen "
                                               "{'robot': 'table', 'holding': 'apple'}), checked against the env's "
                                               "start-state schema before any env is built (422 naming the field); "
                                               "with task_id it replaces the task's own")
    max_steps: json_int(ge=1, le=100) | None = Field(None, description="step cap, at most the server's "
                                                    "limits.max_steps (400 above it); default that limit")


def _object_or_null(value: Any) -> dict[str, Any] | None:
    """What the request model itself checks of a start state (an object or null); its fields are checked
    by the route against the model of the env the request names."""
    if value is None or isinstance(value, dict):
        return value
    raise ValueError("must be an object (the env's start state) or null")


def plan_request_model(start_states: Sequence[type[BaseModel]]) -> type[PlanRequest]:
    """:class:`PlanRequest` whose ``start_state`` is documented as any of ``start_states`` (the served envs'
    models, so the OpenAPI schema shows what each env takes) or null. Validation here is only "object or
    null": which model applies depends on ``env``, so the route checks that (422 with the field's path)."""
    models = tuple(dict.fromkeys(start_states))
    documented = Union[models + (type(None),)] if models else dict[str, Any] | None  # type: ignore[valid-type]
    field = Annotated[dict[str, Any] | None, PlainValidator(_object_or_null, json_schema_input_type=documented)]
    description = PlanRequest.model_fields["start_state"].description
    return create_model("PlanRequest", __base__=PlanRequest, __doc__=PlanRequest.__doc__,
                        start_state=(field, Field(None, description=description)))


class CandidateOut(BaseModel):
    """One option at a step, split as in SayCan Fig. 7: log p_LLM, affordance, combined (log space)."""

    skill: str
    llm: float | None
    affordance: float | None
    combined: float | None


class TraceCandidateOut(CandidateOut):
    """A candidate as the trace records it: with what the planner noted besides the three scores (the
    option's token count and mean log-prob, a SayCanPay Can and Pay, ...)."""

    extra: dict[str, Any] = Field(default_factory=dict)


def model_of(cls: type, name: str, **types: Any) -> type[BaseModel]:
    """A response model with the fields of dataclass ``cls`` (its types and defaults; ``types`` replaces a
    field's type or adds a required field), so the API documents a trace without a second list of its
    fields."""
    hints = typing.get_type_hints(cls)
    fields: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        default: Any = ...
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = Field(default_factory=f.default_factory)
        fields[f.name] = (types.pop(f.name, hints[f.name]), default)
    fields.update({k: (t, ...) for k, t in types.items()})
    return create_model(name, __doc__=cls.__doc__, **fields)


#: one step of the trace (:class:`~groundplan.rollout.traces.StepTrace`), its candidates' non-finite
#: scores as null
StepOut = model_of(StepTrace, "StepOut", candidates=list[TraceCandidateOut])
#: the episode's trace (:class:`~groundplan.rollout.traces.EpisodeTrace`, as written to traces.jsonl), once,
#: with the plan it executed (the chosen skills, done left out); ``execution_success`` is null for an
#: ad-hoc instruction, which has no goal
PlanResponse = model_of(EpisodeTrace, "PlanResponse", steps=list[StepOut], execution_success=bool | None,
                        plan=list[str])


class SessionCreate(_Req):
    instruction: str = Field(..., max_length=100_000)
    planner: str | None = Field(None, max_length=200, description="a served planner label; default the first")
    env: str = Field("kitchen", max_length=100, description="whose skill set the session starts with")
    seed: json_int(ge=0, le=2**31 - 1) = Field(0)
    skills: list[str] | None = Field(None, min_length=1, max_length=4096,
                                     description="the robot's skills (omitted or null: the env's; never empty)")


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

    skills: list[str] | None = Field(None, min_length=1, max_length=4096,
                                     description="the robot's skills now, checked as at session creation (non-empty "
                                     "labels, limits.max_skills); omitted or null: unchanged; never empty")
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
