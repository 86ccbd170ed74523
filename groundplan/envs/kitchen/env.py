"""SayCan's mock office kitchen as a symbolic simulator (Ahn et al., Sec. 5.1 and App. C).

Skill semantics (App. C.1: object locations are known, navigation is a planner, place is scripted):

* "find X" navigates to X's current location; "go to the L" navigates to L;
* "pick up the X" needs the robot at X's location and an empty gripper, and succeeds with
  probability equal to the simulated pick value (a value function with sparse reward estimates the
  success probability, App. B), scaled by ``pick_failure_scale``;
* "put down the X" needs X in the gripper and puts it where the robot is (at the trash can it is
  thrown away, at the user it is delivered);
* "bring it to you" needs something in the gripper and moves the robot to the user;
* "done" changes nothing.

An unknown or infeasible label is a failed step whose feedback says why; the state does not change.
In ``mode="language"`` (the App. C.2 "language-based simulator") every feasible skill succeeds; pair
it with the ``kitchen_language_sim`` affordance source.
"""
from __future__ import annotations

import logging
from typing import Any, Literal, Mapping, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from groundplan.core.errors import GroundplanError
from groundplan.core.types import GoalResult, Observation, StepResult, Task
from groundplan.core.validation import validate_options
from groundplan.envs.base import Env, EnvCapabilities
from groundplan.envs.kitchen.generated import generated_tasks
from groundplan.envs.kitchen.skills import (
    BRING,
    DONE,
    FIND,
    GO_TO,
    PICK,
    PLACE,
    SKILLS,
    parse_skill,
    unknown_skill_message,
)
from groundplan.envs.kitchen.start_state import KitchenStartState
from groundplan.envs.kitchen.tasks import evaluate_goal, tasks_for
from groundplan.envs.kitchen.world import (
    GRIPPER,
    LOCATION_BY_NAME,
    TRASH,
    USER,
    KitchenState,
    describe,
    initial_state,
    simulated_pick_value,
)

logger = logging.getLogger(__name__)


class KitchenConfig(BaseModel):
    """Options of :class:`KitchenEnv` (``KitchenEnv(**options)``); unknown fields are refused."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Literal["physical", "language"] = Field(
        "physical",
        description="'physical': stochastic execution; 'language': the App. C.2 language-based simulator, "
        "where every feasible skill succeeds (no execution noise).",
    )
    pick_failure_scale: float = Field(
        1.0, ge=0.0,
        description="A feasible pick fails with probability min(1, scale * (1 - v)), v the simulated pick value "
        "(0.6-0.95 per object). 1.0: the value is the success rate; 0: picks never fail.",
    )
    nav_failure_prob: float = Field(0.02, ge=0.0, le=1.0, description="Chance that find / go to / bring it to you "
                                    "fails, leaving the robot where it was.")
    place_failure_prob: float = Field(0.0, ge=0.0, le=1.0, description="Chance that put down fails, leaving the "
                                      "object in the gripper (the paper's place is a scripted, reliable policy).")
    robot_start: Literal["user", "random"] = Field(
        "user", description="Where the robot starts unless the task pins it: at the user, or a random location."
    )
    split: Literal["train", "test"] | None = Field(
        None, description="SayCanPay split env.tasks() returns (train: tasks 00-07 of each family, Can/Pay data "
        "and prompt examples; test: tasks 08-11); None: all 84 tasks (SayCan's evaluation).",
    )
    task_set: Literal["saycan", "generated"] = Field(
        "saycan", description="'saycan': the 84 evaluation instructions; 'generated': templated training tasks whose "
        "instructions and goals are none of the 84's (groundplan.envs.kitchen.generated), all of them train tasks.",
    )

    @model_validator(mode="after")
    def _generated_tasks_are_train_tasks(self) -> "KitchenConfig":
        if self.task_set == "generated" and self.split == "test":
            raise ValueError("task_set 'generated' holds training tasks only: use split 'train' or none, and "
                             "evaluate on task_set 'saycan'")
        return self


def make_config(options: Mapping[str, Any]) -> KitchenConfig:
    """Validate options into a :class:`KitchenConfig`; errors name the offending field."""
    return validate_options(KitchenConfig, options, "kitchen options")


def _where(state: KitchenState, obj: str) -> str:
    where = state.placement[obj]
    if where == GRIPPER:
        return "in the gripper"
    if where == TRASH:
        return "thrown away in the trash can"
    return LOCATION_BY_NAME[where].phrase


def apply_skill(state: KitchenState, label: str, rng: np.random.Generator | None,
                config: KitchenConfig) -> tuple[bool, str, dict[str, Any]]:
    """Run ``label`` on ``state`` in place; ``rng=None`` turns execution noise off.

    Returns (success, feedback, info); info has ``verb``, ``arg`` and ``reason`` (None on success,
    else "unknown", "infeasible" or "execution_failure"). A failed step leaves the state unchanged.
    """
    call = parse_skill(label)
    if call is None:
        return False, unknown_skill_message(label), {"verb": None, "arg": None, "reason": "unknown"}
    verb, arg = call
    info: dict[str, Any] = {"verb": verb, "arg": arg, "reason": None}

    def noisy_failure(p: float) -> bool:
        return rng is not None and p > 0 and bool(rng.random() < p)

    def fail(reason: str, text: str) -> tuple[bool, str, dict[str, Any]]:
        info["reason"] = reason
        return False, text, info

    held = state.holding
    if verb in (FIND, GO_TO, BRING):
        if verb == BRING and held is None:
            return fail("infeasible", "cannot bring it to you: the robot is not holding anything")
        if verb == FIND:
            target, what = state.location_of(arg), f"the {arg} ({state.location_of(arg)})"
        else:
            target = arg if verb == GO_TO else USER
            what = f"the {target}"
        if target == state.robot:
            state.history.append(label)
            return True, f"the robot is already at {what}", info
        if noisy_failure(config.nav_failure_prob):
            return fail("execution_failure", f"failed to navigate to {what}; the robot is still at the {state.robot}")
        state.robot = target
        state.history.append(label)
        return True, f"brought the {held} to the user" if verb == BRING else f"went to {what}", info
    if verb == PICK:
        if held == arg:
            return fail("infeasible", f"cannot pick up the {arg}: it is already in the gripper")
        if held is not None:
            return fail("infeasible", f"cannot pick up the {arg}: the robot is already holding the {held}")
        if state.placement[arg] == TRASH:
            return fail("infeasible", f"cannot pick up the {arg}: it has been thrown away in the trash can")
        if state.placement[arg] != state.robot:
            return fail("infeasible", f"cannot pick up the {arg}: it is {_where(state, arg)} "
                                      f"and the robot is at the {state.robot}")
        p_fail = min(1.0, config.pick_failure_scale * (1.0 - simulated_pick_value(state, arg)))
        if noisy_failure(p_fail):
            return fail("execution_failure", f"failed to pick up the {arg}: the grasp missed")
        state.placement[arg] = GRIPPER
        state.history.append(label)
        return True, f"picked up the {arg}", info
    if verb == PLACE:
        if held != arg:
            holding_text = f"it is holding the {held}" if held else "its gripper is empty"
            return fail("infeasible", f"cannot put down the {arg}: the robot is not holding it ({holding_text})")
        if noisy_failure(config.place_failure_prob):
            return fail("execution_failure", f"failed to put down the {arg}: it is still in the gripper")
        state.placement[arg] = state.robot
        state.history.append(label)
        if state.robot == USER:
            state.delivered.append(arg)
            return True, f"handed the {arg} to the user", info
        if state.robot == TRASH:
            return True, f"threw away the {arg}", info
        return True, f"put down the {arg} {LOCATION_BY_NAME[state.robot].phrase}", info
    assert verb == DONE
    state.history.append(label)
    return True, "done", info


class KitchenEnv(Env):
    """SayCan's mock office kitchen: 15 objects, 5 locations, 51 skills, 84 tasks in 7 families."""

    name = "kitchen"
    done_skill = "done"
    capabilities = EnvCapabilities(can_replay=True, fixed_actions=True, adhoc_scene="default")

    def default_affordance(self) -> str:
        """The registered affordance source that fits this env's mode (used by ``groundplan plan``)."""
        return "kitchen_language_sim" if self.config.mode == "language" else "kitchen_value"

    def __init__(self, **options: Any) -> None:
        self.config: KitchenConfig = make_config(options)
        self._task: Task | None = None
        self._seed: int | None = None
        self._state: KitchenState | None = None
        self._rng: np.random.Generator | None = None

    # ------------------------------------------------------------------ info
    @property
    def skills(self) -> list[str]:
        """All skill labels, in the fixed order of :data:`groundplan.envs.kitchen.skills.SKILLS`."""
        return list(SKILLS)

    @property
    def state(self) -> KitchenState:
        """A copy of the current state."""
        return self._require_state().copy()

    @property
    def task(self) -> Task | None:
        return self._task

    def tasks(self, families: Sequence[str] | None = None) -> list[Task]:
        if self.config.task_set == "generated":
            return generated_tasks(families)
        return tasks_for(families, self.config.split)

    # --------------------------------------------------------------- task files (docs/tasks.md)
    goal_language = "groundplan.envs.kitchen.goal_language"
    start_state_schema = KitchenStartState

    # --------------------------------------------------------------- episode
    def initial_state(self, task: Task, seed: int) -> KitchenState:
        return initial_state(task, seed, self.config.robot_start)

    def reset(self, task: Task, seed: int) -> Observation:
        self._state = self.initial_state(task, seed)
        self._task, self._seed = task, int(seed)
        self._rng = None if self.config.mode == "language" else np.random.default_rng([int(seed), 1])
        logger.debug("kitchen reset %s seed=%d: %s", task.task_id, seed, describe(self._state))
        return self._observe()

    def execute(self, skill: str) -> StepResult:
        state = self._require_state()
        success, feedback, info = apply_skill(state, skill, self._rng, self.config)
        logger.debug("kitchen %r → %s: %s", skill, "ok" if success else "failed", feedback)
        return StepResult(success=success, feedback=feedback, observation=self._observe(), info=info)

    def check_goal(self) -> GoalResult:
        state = self._require_state()
        assert self._task is not None
        return evaluate_goal(self._task.goal, state)

    def check_plan(self, task: Task, seed: int, plan: Sequence[str]) -> GoalResult:
        """Replay ``plan`` from (task, seed)'s start state with no execution noise; infeasible steps fail
        without changing the state; the replay stops at the first "done". Leaves the episode untouched."""
        state = self.initial_state(task, seed)
        for label in plan:
            apply_skill(state, label, None, self.config)
            call = parse_skill(label)
            if call is not None and call.verb == DONE:
                break
        return evaluate_goal(task.goal, state)

    # --------------------------------------------------------------- helpers
    def _require_state(self) -> KitchenState:
        if self._state is None:
            raise GroundplanError("the kitchen env has no episode yet: call reset(task, seed) first")
        return self._state

    def _observe(self) -> Observation:
        state = self._require_state()
        return Observation(skills=list(SKILLS), state=state.copy(), text=describe(state))
