"""The pantry: a robot moves an apple and a cup between the counter, the shelf and the user.

Small on purpose (four tasks, eight skills, no randomness unless ``slippery``) so that the worked example
in docs/extending.md shows every part an env has: a typed options class, a start-state schema, declared
capabilities, the four abstract methods, a noise-free replay for plan success, and one measure of its own.
"""
from __future__ import annotations

from typing import Any, Literal, Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field

from groundplan.core.types import GoalResult, Observation, StepResult, Task
from groundplan.core.validation import validate_options
from groundplan.envs.base import Env, EnvCapabilities
from groundplan.envs.start_state import StartState, optional

Place = Literal["counter", "shelf", "user"]
PLACES: tuple[str, ...] = ("counter", "shelf", "user")
ITEMS: tuple[str, ...] = ("apple", "cup")
#: every skill, offered in every state (preconditions decide whether one succeeds)
SKILLS: tuple[str, ...] = (*(f"go to the {p}" for p in PLACES), *(f"pick up the {i}" for i in ITEMS),
                           *(f"put down the {i}" for i in ITEMS), "done")
#: where things are when a task pins nothing (the robot's place is an option)
START = {"apple": "counter", "cup": "shelf"}

#: (task id, family, instruction, goal, reference plan from the default start, the robot at the counter)
TASKS: tuple[tuple[str, str, str, dict[str, str], tuple[str, ...]], ...] = (
    ("pantry/fetch/apple", "fetch", "bring me the apple", {"apple": "user"},
     ("pick up the apple", "go to the user", "put down the apple")),
    ("pantry/fetch/cup", "fetch", "bring me the cup", {"cup": "user"},
     ("go to the shelf", "pick up the cup", "go to the user", "put down the cup")),
    ("pantry/tidy/apple", "tidy", "put the apple on the shelf", {"apple": "shelf"},
     ("pick up the apple", "go to the shelf", "put down the apple")),
    ("pantry/tidy/cup", "tidy", "put the cup on the counter", {"cup": "counter"},
     ("go to the shelf", "pick up the cup", "go to the counter", "put down the cup")),
)


class PantryConfig(BaseModel):
    """Options of :class:`PantryEnv` (a config's ``env.options``), validated when the config loads, before
    any env is built; unknown options are refused."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    robot_start: Place = Field("counter", description="where the robot starts unless a task pins it")
    slippery: bool = Field(False, description="the first pick of each episode slips (fails, changes nothing): "
                           "execution noise that the noise-free replay behind plan success does not have")


class PantryStartState(StartState):
    """What a task file or an API request may pin of the start (the serve API's schema shows it)."""

    robot: Place | None = optional("where the robot starts")
    apple: Place | None = optional("where the apple is")
    cup: Place | None = optional("where the cup is")


def apply(state: dict[str, Any], skill: str) -> tuple[bool, str]:
    """Run ``skill`` on ``state`` in place: (success, feedback). The pantry's rules, shared by the env, its
    replay and the affordance source; a skill whose preconditions fail changes nothing."""
    held = next((i for i in ITEMS if state[i] == "hand"), None)
    verb, _, thing = skill.partition(" the ")
    if verb == "go to" and thing in PLACES:
        if state["robot"] == thing:
            return False, f"{skill}: already at the {thing}"
        state["robot"] = thing
    elif verb == "pick up" and thing in ITEMS:
        if held is not None or state[thing] != state["robot"]:
            return False, f"{skill}: the {thing} is not within reach of an empty hand"
        state[thing] = "hand"
    elif verb == "put down" and thing in ITEMS:
        if held != thing:
            return False, f"{skill}: not holding the {thing}"
        state[thing] = state["robot"]
    elif skill != "done":
        return False, f"{skill}: not a skill of the pantry"
    return True, f"{skill}: ok"


class PantryEnv(Env):
    """The pantry env: ``PantryEnv(**options)`` with :class:`PantryConfig`'s options."""

    name = "pantry"
    # declared, never probed: plan success by replay, one measure, and the same skill list in every state
    capabilities = EnvCapabilities(can_replay=True, measures=("pantry_moves",), fixed_actions=True)
    start_state_schema = PantryStartState

    def __init__(self, **options: Any) -> None:
        self.config = validate_options(PantryConfig, options, "pantry options")
        self.task: Task | None = None
        self.state: dict[str, Any] = {}
        self._picks = 0

    def tasks(self, families: Sequence[str] | None = None) -> list[Task]:
        return [Task(task_id, instruction, family, goal=dict(goal), reference_plan=plan)
                for task_id, family, instruction, goal, plan in TASKS if families is None or family in families]

    def reset(self, task: Task, seed: int) -> Observation:
        self.task = task
        self.state = self._start(task)
        self._picks = 0
        return self._observe()

    def execute(self, skill: str) -> StepResult:
        if skill.startswith("pick up") and self.config.slippery:
            self._picks += 1
            if self._picks == 1:
                return StepResult(False, f"{skill}: it slipped", self._observe(), info={"noise": True})
        ok, feedback = apply(self.state, skill)
        return StepResult(ok, feedback, self._observe())

    def check_goal(self) -> GoalResult:
        assert self.task is not None, "check_goal before reset"
        return self._goal(self.state, self.task)

    def check_plan(self, task: Task, seed: int, plan: Sequence[str]) -> GoalResult:
        state = self._start(task)
        for skill in plan:
            apply(state, skill)
        return self._goal(state, task)

    def episode_metrics(self, task: Task, trace: Any) -> dict[str, float]:
        return {"pantry_moves": float(sum(1 for s in trace.steps if s.chosen.startswith("go to") and s.success))}

    def default_affordance(self) -> str | None:
        return "pantry_preconditions"

    def _start(self, task: Task) -> dict[str, Any]:
        return {"robot": self.config.robot_start, **START, **(task.start_state or {})}

    def _observe(self) -> Observation:
        where = ", ".join(f"the {i} is {'in your hand' if self.state[i] == 'hand' else 'at the ' + self.state[i]}"
                          for i in ITEMS)
        return Observation(skills=list(SKILLS), state=dict(self.state),
                           text=f"You are at the {self.state['robot']}; {where}.")

    @staticmethod
    def _goal(state: Mapping[str, Any], task: Task) -> GoalResult:
        if not task.goal:  # an instruction without a goal (the serve API's free text) has nothing to check
            return GoalResult(False, unsatisfied=["no goal given"])
        held = [f"{item} at the {place}" for item, place in task.goal.items() if state[item] == place]
        missed = [f"{item} at the {place}" for item, place in task.goal.items() if state[item] != place]
        return GoalResult(not missed, satisfied=held, unsatisfied=missed)
