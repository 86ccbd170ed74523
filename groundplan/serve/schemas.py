"""Request and response models of the /v1 API (they make the OpenAPI schema at /docs).

The classes here are the shapes, with generous ceilings; :func:`served_models` narrows them to one server
(its envs, planners and configured :class:`~groundplan.serve.config.Limits`), so the OpenAPI schema says
exactly which bodies that server accepts: a body the schema calls valid gets a 2xx (or a session's or the
body limit's status), one it calls invalid a 422 naming the field. A value a caller may leave out (a
session's ``skills``, a plan's ``planner``, ``task_id`` or ``instruction``) is refused when given empty:
only omitting it (or null) means the default.

``start_state`` is typed per env: the served ``PlanRequest`` is one variant per served env, tagged by
``env``, each with that env's start-state model (``Env.start_state_schema``), so another env's state is
invalid in the schema too; the route checks a request's start state against its env's model (422
naming the field).
"""
from __future__ import annotations

import dataclasses
import re
import typing
from typing import Annotated, Any, Literal, Sequence, TypeVar, Union

from pydantic import (BaseModel, ConfigDict, Discriminator, Field, PlainValidator, Tag, create_model,
                      model_validator)
from pydantic.fields import FieldInfo
from pydantic_core import core_schema

from groundplan.core.validation import json_int
from groundplan.rollout.traces import EpisodeTrace, StepTrace

if typing.TYPE_CHECKING:
    from groundplan.serve.config import ServeConfig


#: JSON Schema ``pattern`` of a text that is not blank: it holds a character outside the set ``str.strip()``
#: removes (``str.isspace``). Written as ``\uXXXX`` ranges, which ECMA-262, Python and Rust regexes read alike.
NOT_BLANK = "[^\\u0009-\\u000d\\u001c-\\u0020\\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000]"
_NOT_BLANK = re.compile(NOT_BLANK)


class _NotBlank:
    """Annotation of a text that must hold a non-space character: the schema's ``pattern`` is
    :data:`NOT_BLANK`, and validation searches that same pattern, so the two cannot disagree."""

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> core_schema.CoreSchema:
        return core_schema.no_info_after_validator_function(self._check, handler(source))

    def __get_pydantic_json_schema__(self, schema: core_schema.CoreSchema, handler: Any) -> dict[str, Any]:
        return {**handler(schema), "pattern": NOT_BLANK}

    @staticmethod
    def _check(value: str) -> str:
        if not _NOT_BLANK.search(value):
            raise ValueError("must not be empty or only spaces")
        return value


def not_blank(max_length: int | None = None) -> Any:
    """The type of a request's text that must say something (an instruction, a skill, an option): not
    empty, not only spaces, at most ``max_length`` characters."""
    return Annotated[str, Field(max_length=max_length), _NotBlank()]


class _Req(BaseModel):
    """Base of the request models: unknown fields refused, and strict types, so what the OpenAPI schema calls
    invalid is refused (422) rather than coerced (``true`` as a seed, ``1`` as a boolean, ``"2"`` as a number),
    and what it calls valid is accepted; integers are :func:`json_int`."""

    model_config = ConfigDict(extra="forbid", strict=True)


class ScoreRequest(_Req):
    prompt: str = Field(..., max_length=100_000, description="text the options continue")
    options: list[not_blank(100_000)] = Field(..., min_length=1, max_length=1024, description="candidate continuations")
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

    model_config = ConfigDict(json_schema_extra={"anyOf": [
        {"required": ["instruction"], "properties": {"instruction": {"type": "string"}}},
        {"required": ["task_id"], "properties": {"task_id": {"type": "string"}}}]})

    instruction: not_blank(100_000) | None = Field(None, description="what the robot should do; omitted or null with "
                                             "task_id: the task's own (one of the two is needed)")
    env: str | None = Field(None, min_length=1, max_length=100, description="a served env (GET /v1/planners); "
                            "omitted: the server's first")
    planner: str | None = Field(None, min_length=1, max_length=200, description="a served planner label; omitted or "
                                "null: the first")
    seed: json_int(ge=0, le=2**31 - 1) = Field(0, description="start state / sampling seed")
    task_id: not_blank(200) | None = Field(None, description="run one of the env's own tasks (its "
                                "goal is checked; an id the env does not have is a 404); omitted or null: an "
                                "instruction of your own, without a goal")
    start_state: dict[str, Any] | None = Field(None, description="env-specific pins of the start state (e.g. kitchen "
                                               "{'robot': 'table', 'holding': 'apple'}), checked against the env's "
                                               "start-state schema before any env is built (422 naming the field); "
                                               "with task_id it replaces the task's own")
    max_steps: json_int(ge=1, le=100) | None = Field(None, description="step cap, at most the server's "
                                                    "limits.max_steps; default that limit")

    @model_validator(mode="after")
    def _instruction_or_task(self) -> "PlanRequest":
        if self.instruction is None and self.task_id is None:
            raise ValueError("give an instruction, or a task_id to run one of the env's tasks")
        return self


def _object_or_null(value: Any) -> dict[str, Any] | None:
    """What the request model itself checks of a start state (an object or null); its fields are checked
    by the route against the model of the env the request names."""
    if value is None or isinstance(value, dict):
        return value
    raise ValueError("must be an object (the env's start state) or null")


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
    instruction: not_blank(100_000) = Field(..., description="what the robot should do")
    planner: str | None = Field(None, min_length=1, max_length=200, description="a served planner label; omitted or "
                                "null: the first")
    env: str | None = Field(None, min_length=1, max_length=100, description="whose skill set the session starts with; "
                            "omitted: the server's first env")
    seed: json_int(ge=0, le=2**31 - 1) = Field(0)
    skills: list[not_blank(100_000)] | None = Field(None, min_length=1, max_length=4096,
                                               description="the robot's skills (omitted or null: the env's; never "
                                               "empty)")


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

    skills: list[not_blank(100_000)] | None = Field(None, min_length=1, max_length=4096,
                                               description="the robot's skills now, checked as at session creation "
                                               "(non-empty labels, limits.max_skills); omitted or null: unchanged; "
                                               "never empty")
    text: str = Field("", max_length=20_000, description="scene description (Inner Monologue's scene feedback)")
    affordances: dict[str, Annotated[float, Field(ge=0, le=1)]] = Field(
        default_factory=dict, description="skill -> probability in [0, 1]")


class FeedbackIn(_Req):
    """How the last skill went (Inner Monologue's success feedback)."""

    success: bool = True
    text: str = Field("", max_length=20_000)


class SessionStep(_Req):
    observation: ObservationIn = Field(default_factory=ObservationIn)
    feedback: FeedbackIn | None = Field(None, description="outcome of the previous skill (omit on the first step)")


M = TypeVar("M", bound=BaseModel)


def narrowed(base: type[M], name: str | None = None, /, **fields: tuple[Any, Any]) -> type[M]:
    """``base`` with ``fields`` (field -> (type, default)) replaced by this server's narrower ones, keeping
    each field's description, named ``name`` in the OpenAPI schema (default: as ``base``)."""
    spec = {field: (tp, default if isinstance(default, FieldInfo)
                    else Field(default, description=base.model_fields[field].description))
            for field, (tp, default) in fields.items()}
    return create_model(name or base.__name__, __base__=base, __doc__=base.__doc__, **spec)


def one_of(names: Sequence[str]) -> Any:
    """The type of a field naming one of ``names`` (served envs, planners, the model): an enum in the
    schema, so an unknown or empty name is a 422 listing the served ones."""
    return Literal[tuple(names)]  # type: ignore[valid-type]


@dataclasses.dataclass(frozen=True)
class ServedModels:
    """One server's request models (:func:`served_models`)."""

    score: type[ScoreRequest]
    plan: Any  # a PlanRequest, or a union of one per served env (:func:`_plan_request`)
    session: type[SessionCreate]
    step: type[SessionStep]


#: the error type of a ``/v1/plan`` body whose ``env`` no served env has (the API reports it at ``env``)
ENV_TAG_ERROR = "env_not_served"


def _plan_env(names: Sequence[str]) -> Any:
    """Which per-env variant of the plan request validates a body: the env it names (left out: the first);
    an env no variant has is the tagged union's error (:data:`ENV_TAG_ERROR`); a body that is not an
    object goes to the first variant, which refuses it as one."""
    def env_of(value: Any) -> str | None:
        if isinstance(value, BaseModel):
            return getattr(value, "env", None)
        if not isinstance(value, dict):
            return names[0]
        env = value.get("env", names[0])
        return env if isinstance(env, str) and env in names else None
    return env_of


def _plan_request(config: "ServeConfig", start_states: dict[str, type[BaseModel]], **common: tuple[Any, Any]) -> Any:
    """The ``/v1/plan`` request model: one variant per served env (its name as ``env``, the first's the
    default, and that env's start-state model), so the schema holds which start state each env takes (a
    Hanoi state for the kitchen is invalid in the schema, as the server refuses it). One env: the variant
    itself; several: their union, tagged by ``env`` (``oneOf`` in the OpenAPI schema)."""
    names = [e.name for e in config.envs]
    variants = []
    for i, name in enumerate(names):
        model = start_states.get(name)
        documented = model | None if model is not None else dict[str, Any] | None
        start_state = Annotated[dict[str, Any] | None,
                                PlainValidator(_object_or_null, json_schema_input_type=documented)]
        variant = narrowed(PlanRequest, None if len(names) == 1 else f"PlanRequest_{name}",
                           env=(Literal[name], name if i == 0 else ...), start_state=(start_state, None), **common)
        variants.append(Annotated[variant, Tag(name)])
    if len(variants) == 1:
        return typing.get_args(variants[0])[0]
    expected = " or ".join(repr(n) for n in names)
    return Annotated[Union[tuple(variants)], Discriminator(  # type: ignore[valid-type]
        _plan_env(names), custom_error_type=ENV_TAG_ERROR, custom_error_message=f"Input should be {expected}")]


def served_models(config: "ServeConfig", start_states: dict[str, type[BaseModel]]) -> ServedModels:
    """The request models of the server ``config`` describes: its env and planner names as enums (the env
    defaults to its first), its ``limits`` as the schema's bounds, and ``start_state`` documented per env
    (``start_states``: each served env's model, so the OpenAPI schema shows what each env takes). A start
    state's validation here is only "object or null": its fields are checked by the route against the
    model of the env the request names (422 with the field's path)."""
    lim = config.limits
    envs = one_of([e.name for e in config.envs])
    planner = one_of([p.display for p in config.planners]) | None
    skills = Annotated[list[not_blank(100_000)], Field(min_length=1, max_length=lim.max_skills)] | None
    observation = narrowed(ObservationIn, skills=(skills, None))
    observed = Field(default_factory=observation, description=SessionStep.model_fields["observation"].description)
    return ServedModels(
        score=narrowed(ScoreRequest, prompt=(Annotated[str, Field(max_length=lim.max_prompt_chars)], ...),
                       options=(Annotated[list[not_blank(lim.max_option_chars)],
                                          Field(min_length=1, max_length=lim.max_options)], ...)),
        plan=_plan_request(config, start_states, planner=(planner, None),
                           instruction=(not_blank(lim.max_instruction_chars) | None, None),
                           max_steps=(json_int(ge=1, le=lim.max_steps) | None, None)),
        session=narrowed(SessionCreate, env=(envs, config.envs[0].name), planner=(planner, None),
                         instruction=(not_blank(lim.max_instruction_chars), ...), skills=(skills, None)),
        step=narrowed(SessionStep, observation=(observation, observed)))


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
