"""BabyAI's start state (:attr:`BabyAIEnv.start_state_schema`): the level seed that lays a task out,
and the split whose level generator draws it (default: the env's ``split`` option)."""
from __future__ import annotations

from pydantic import Field

from groundplan.core.validation import json_int
from groundplan.envs.splits import SayCanPaySplit
from groundplan.envs.start_state import StartState, optional


class BabyAIStartState(StartState):
    """``{level_seed: <int>, split?: <train|test|test-generalize>}``: the minigrid layout of the task's level."""

    level_seed: json_int(ge=0, le=2**31 - 1) = Field(description="minigrid seed of the level's layout")
    split: SayCanPaySplit = optional("the split whose level generator lays it out (default: the env's split option)")
