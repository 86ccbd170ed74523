"""Typed start states: every env declares the shape of the ``Task.start_state`` its ``reset`` reads as a
pydantic model, :attr:`groundplan.envs.base.Env.start_state_schema`.

Why a schema and not only each env's own parser: an env's ``reset`` and its goal language were written
against the env's own tasks, so they index, hash and compare what they are given. Data from outside (a
task file, an HTTP request) that puts a list where a location belongs reached them and raised
``TypeError`` or ``ValueError``: a crash where a message naming the field was due. The schema checks
every field's type, and the value where the values are a closed set (the kitchen's objects and
locations, colours, splits), before any env is built; what only the env's data can tell (a VirtualHome
program in the dataset, a tabletop layout that fits on the table) is still checked by the env's goal
language after it.

The models are strict (no coercion: ``"3"`` is not a seed, ``true`` is not an integer, as the parsers
always required) and refuse unknown keys. A valid start state is passed on unchanged, so what a valid
one does (its episodes, and the episode ids hashed from a task's content) is what it did before.
The same models make the ``start_state`` part of the serve API's OpenAPI schema.
"""
from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError


class StartState(BaseModel):
    """Base of every env's start-state model: strict types, unknown keys refused."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


def _no_null_default(schema: dict[str, Any]) -> None:
    schema.pop("default", None)


def optional(description: str, **constraints: Any) -> Any:
    """A field that may be left out but is never null (left out, the env chooses; the parsers never took
    null for it): pydantic's ``None`` default, without a ``default: null`` in the JSON schema that its
    type would contradict."""
    return Field(None, description=description, json_schema_extra=_no_null_default, **constraints)


#: how much of an offending value a message quotes
_QUOTE = 60
#: pydantic's "... or instance of KitchenStartState": data from a file or a request is never an instance
_NOT_AN_INSTANCE = re.compile(r" or instance of \w+")


def _quote(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _QUOTE else text[:_QUOTE - 3] + "..."


def error_lines(exc: ValidationError) -> list[tuple[tuple[Any, ...], str, str]]:
    """``(path, field, message)`` of each error of a start state's validation: ``path`` locates the bad
    part (keys and indices, for a task file's line), ``field`` names it (``placement.apple``; empty for
    the start state as a whole) and ``message`` says what is wrong, quoting the value it got, e.g.
    ``(("robot",), "robot", "Input should be 'close counter', ... or 'user', got ['a']")``."""
    out = []
    for err in exc.errors(include_url=False):
        loc = tuple(err.get("loc", ()))
        msg = _NOT_AN_INSTANCE.sub("", str(err.get("msg", "invalid")).removeprefix("Value error, "))
        if err.get("type") != "missing" and "input" in err:
            msg += f", got {_quote(err['input'])}"
        if loc and loc[-1] == "[key]":  # a mapping's key: the field is the mapping, the key the bad part
            loc = loc[:-1]
            msg = f"key {_quote(loc[-1])}: {msg}"
            field = ".".join(str(p) for p in loc[:-1])
        else:
            field = ".".join(str(p) for p in loc)
        out.append((loc, field, msg))
    return out
