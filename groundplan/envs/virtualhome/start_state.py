"""VirtualHome's start state (:attr:`VirtualHomeEnv.start_state_schema`, SayCanPay's VirtualHome's too):
the dataset program whose initial graph an episode starts from. Whether the program exists is the
dataset's to say (:func:`groundplan.envs.virtualhome.goal_language.parse_start_state`)."""
from __future__ import annotations

from typing import Annotated, Any

from pydantic import PlainValidator

from groundplan.envs.start_state import StartState, optional


def _program_id(value: Any) -> str | int:
    """A program id as text (``"11_1"``), or a whole number, what YAML makes of an unquoted ``11_1``; the
    goal language reads either as text, as it always has."""
    if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise ValueError("must be a dataset program id (text, e.g. '11_1')")


ProgramId = Annotated[Any, PlainValidator(_program_id, json_schema_input_type=str | int)]


class VirtualHomeStartState(StartState):
    """``{program: <dataset program id>}``; left out, the dataset's first program."""

    program: ProgramId = optional("the dataset program whose initial graph the episode starts from")
