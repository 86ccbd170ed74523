"""One way to turn pydantic validation errors into messages that name the bad field."""
from __future__ import annotations

from typing import Annotated, Any, Mapping, Sequence, TypeVar

from pydantic import BaseModel, BeforeValidator, Field, ValidationError

from groundplan.core.errors import InvalidInputError

M = TypeVar("M", bound=BaseModel)


def describe_errors(exc: ValidationError, prefix: str = "") -> str:
    """``unknown option 'a.b'; option 'c': <why>`` for every error, with the full field path; ``prefix``
    is the path of the validated model inside its config (``runtime``), so a part validated alone is
    still named as the config names it."""
    problems = []
    for err in exc.errors():
        field = ".".join([*([prefix] if prefix else []), *map(str, err["loc"])]) or "(top level)"
        if err["type"] == "extra_forbidden":
            problems.append(f"unknown option '{field}'")
        else:
            problems.append(f"option '{field}': {err['msg']}")
    return "; ".join(problems)


def validate_options(model: type[M], options: Mapping[str, Any], what: str | None = None) -> M:
    """Build ``model`` from ``options``; a bad or unknown field raises InvalidInputError naming it
    and listing the valid options."""
    try:
        return model.model_validate(dict(options))
    except ValidationError as exc:
        raise InvalidInputError(
            f"invalid {what or model.__name__}: {describe_errors(exc)}. Valid options: {', '.join(model.model_fields)}"
        ) from None


def build_config(cls: type[M], config: M | Mapping[str, Any] | None, overrides: Mapping[str, Any]) -> M:
    """A config object from ``config`` (an instance, a plain mapping such as YAML, or None) updated by
    ``overrides``; a bad option raises InvalidInputError naming the field."""
    if config is None:
        data: dict[str, Any] = {}
    elif isinstance(config, cls):
        data = config.model_dump()
    elif isinstance(config, Mapping):
        data = dict(config)
    else:
        raise InvalidInputError(f"config must be a {cls.__name__} or a mapping, not {type(config).__name__}")
    data.update(overrides)
    return validate_options(cls, data)


#: longest instruction accepted; SayCan-style prompts are a few hundred tokens, an instruction far
#: longer than any in the task sets is almost certainly a mistake (a pasted file, a wrong field)
MAX_INSTRUCTION_CHARS = 1000


def validate_instruction(instruction: str, max_chars: int = MAX_INSTRUCTION_CHARS) -> str:
    """Refuse empty or over-long instructions with a clear message; return the stripped text."""
    if not isinstance(instruction, str) or not instruction.strip():
        raise InvalidInputError("the instruction is empty: say what the robot should do, e.g. 'bring me a coke can'")
    text = instruction.strip()
    if len(text) > max_chars:
        raise InvalidInputError(
            f"the instruction is {len(text)} characters long; the limit is {max_chars}. Shorten it or raise "
            "max_instruction_chars in the planner config."
        )
    return text


def some(names: Sequence[str], limit: int = 5) -> str:
    """The first ``limit`` names, comma-separated, and how many more there are: an error names what it
    refuses without burying the message under hundreds of ids."""
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


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
    """The type of an integer field of JSON input (a request, a start state): what JSON Schema calls
    ``integer``, and nothing else. Bounds (``ge``, ``le``) go here rather than on the field, so that in a
    union (``json_int(ge=1) | None``) they reach the JSON schema as ``minimum``/``maximum``."""
    return Annotated[int, Field(strict=False, **bounds), BeforeValidator(_json_integer)]
