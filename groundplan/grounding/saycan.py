"""SayCan's grounding (Ahn et al., 2022): affordance calibration (Appendix C.1), the kitchen's
calibrated value-function affordances, and the language-based simulator (Appendix C.2).

Calibration (Appendix C.1, "Policies and affordance functions"): SayCan's learned value functions are not probabilities as they come, so the paper maps each skill
family's raw signal to p(c_π | s, ℓ_π) with a clamped linear normalisation whose constants were
"determined empirically":

* pick:  p = clamp((v - v_min) / (v_max - v_min), 0, 1) with v_min = 0.2, v_max = 0.5;
* go to: p = clamp((d_max - d) / (d_max - d_min), 0, 1) with d in metres, d_max = 100, d_min = 0;
* place: p = 1.0 ("we assume place is always possible");
* terminate ("done"): p = 0.1, so planning ends when no other skill is feasible.

The paper also caps the affordance of a skill "that has already been completed and the reward
received" (e.g. navigating to the table the robot is already in front of) but gives no value; this
project's default cap is :data:`DEFAULT_COMPLETED_CAP` and every user of it exposes it as an option.
"""
from __future__ import annotations

import logging
from typing import Any, Literal, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from groundplan.core.errors import InvalidInputError
from groundplan.core.truth import OracleDeclaration, Truth, read
from groundplan.core.types import Observation, Task
from groundplan.core.validation import validate_options
from groundplan.envs.kitchen.skills import (
    BRING,
    DONE,
    FIND,
    GO_TO,
    PICK,
    PLACE,
    parse_skill,
)
from groundplan.envs.kitchen.world import (
    USER,
    KitchenState,
    distance,
    simulated_pick_value,
)
from groundplan.grounding.base import Affordance

#: C.1 pick calibration: the value at which a pick is judged impossible / certain
PICK_V_MIN: float = 0.2
PICK_V_MAX: float = 0.5
#: C.1 go-to calibration, metres
GOTO_D_MIN: float = 0.0
GOTO_D_MAX: float = 100.0
#: C.1 place affordance ("we assume place is always possible")
PLACE_AFFORDANCE: float = 1.0
#: C.1 terminate affordance ("a small affordance value")
TERMINATE_AFFORDANCE: float = 0.1
#: cap for skills already completed; the paper (Sec. 5.1, C.1) uses a cap but does not give its value
DEFAULT_COMPLETED_CAP: float = 0.05


def clamp(x: float, lo: float = 0.0, hi: float = 1.0) -> float:
    """``min(max(x, lo), hi)``: the paper's ``clamp(·, 0, 1)``."""
    if lo > hi:
        raise ValueError(f"clamp bounds are reversed: lo={lo} > hi={hi}")
    return float(min(max(x, lo), hi))


def normalize_value(v: float, v_min: float = PICK_V_MIN, v_max: float = PICK_V_MAX) -> float:
    """Pick affordance from a value estimate (C.1): ``clamp((v - v_min) / (v_max - v_min), 0, 1)``.

    With the paper's constants v = 0.35 gives 0.5, v ≤ 0.2 gives 0 and v ≥ 0.5 gives 1.
    """
    if v_max <= v_min:
        raise ValueError(f"v_max ({v_max}) must be greater than v_min ({v_min})")
    return clamp((v - v_min) / (v_max - v_min))


def distance_affordance(d: float, d_max: float = GOTO_D_MAX, d_min: float = GOTO_D_MIN) -> float:
    """Go-to affordance from a distance in metres (C.1): ``clamp((d_max - d) / (d_max - d_min), 0, 1)``.

    With the paper's constants d = 0 gives 1, d = 50 m gives 0.5 and d ≥ 100 m gives 0.
    """
    if d_max <= d_min:
        raise ValueError(f"d_max ({d_max}) must be greater than d_min ({d_min})")
    if d < 0:
        raise ValueError(f"a distance cannot be negative, got {d}")
    return clamp((d_max - d) / (d_max - d_min))


def cap_completed(p: float, cap: float = DEFAULT_COMPLETED_CAP) -> float:
    """Cap the affordance of a skill already completed so it is not repeated (Sec. 5.1, C.1)."""
    return min(float(p), float(cap))


# ---------------------------------------------------------------------------------------------
# The kitchen: C.1 value affordances and the C.2 language-based simulator
# ---------------------------------------------------------------------------------------------

logger = logging.getLogger(__name__)


class KitchenValueConfig(BaseModel):
    """Options of :class:`KitchenValueAffordance`; defaults are the App. C.1 constants."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    completed_cap: float = Field(DEFAULT_COMPLETED_CAP, ge=0.0, le=1.0,
                                 description="cap for skills already completed (value not given in the paper)")
    place_affordance: Literal["always", "gripper"] = Field(
        "always", description="'always': 1.0 (C.1, default); 'gripper': 1.0 for the held object only (Sec. 5.1)")
    pick_v_min: float = PICK_V_MIN
    pick_v_max: float = PICK_V_MAX
    goto_d_min: float = GOTO_D_MIN
    goto_d_max: float = GOTO_D_MAX
    terminate: float = Field(TERMINATE_AFFORDANCE, ge=0.0, le=1.0)

    @model_validator(mode="after")
    def _ordered(self) -> "KitchenValueConfig":
        if self.pick_v_max <= self.pick_v_min:
            raise ValueError("pick_v_max must be greater than pick_v_min")
        if self.goto_d_max <= self.goto_d_min:
            raise ValueError("goto_d_max must be greater than goto_d_min")
        return self


class KitchenValueAffordance(Affordance):
    """SayCan's calibrated affordances over the kitchen state (App. C.1, Sec. 5.1).

    * pick up X: ``clamp((v - 0.2) / (0.5 - 0.2), 0, 1)`` of the simulated value function
      (:func:`~groundplan.envs.kitchen.world.simulated_pick_value`: 0.6–0.95 when the robot is at X with
      an empty gripper, 0.1 otherwise);
    * find X / go to L: ``clamp((100 - d) / (100 - 0), 0, 1)``, d the robot's distance in metres;
    * bring it to you: go-to affordance to the user, capped when the gripper is empty;
    * put down X: 1.0 (C.1) — or, with ``place_affordance="gripper"``, 1.0 only for the held object;
    * done: 0.1.

    Skills already completed are capped at ``completed_cap`` (default 0.05; the paper uses a cap but
    gives no value): going or finding where the robot already is, picking what is already held,
    bringing while already at the user, putting down X again after X was put down. Completion is read
    from the state's own history of successful skills (``KitchenState.history``), not the planner's.

    The paper's value functions are learned Q-functions of the robot's policies (App. C.1); here they are
    computed from the simulator's kitchen state (the robot's and objects' true places, the gripper, the
    simulated grasp values), so the source declares that state as a stand-in for them: SayCan rows keep
    their label and the tables mark them.
    """

    declaration = OracleDeclaration(
        name="value functions from state", reads=frozenset({Truth.STATE}), stands_in=True,
        wording="simulator state standing in for learned value functions (SayCan App. C.1): the true places of "
                "robot and objects, the gripper and the simulated grasp values")

    def __init__(self, **options: Any) -> None:
        self.config: KitchenValueConfig = validate_options(KitchenValueConfig, options, "kitchen_value affordance options")

    def __call__(self, observation: Observation, skills: Sequence[str], history: Sequence[str]) -> np.ndarray:
        state = read(observation, Truth.STATE, self)
        if not isinstance(state, KitchenState):
            raise InvalidInputError("kitchen_value affordances need a kitchen observation "
                                    f"(Observation.state a KitchenState), got {type(state).__name__}")
        return np.array([self.score(state, label) for label in skills], dtype=np.float64)

    def score(self, state: KitchenState, label: str) -> float:
        """The calibrated affordance of one label in ``state`` (0 for unknown labels)."""
        call = parse_skill(label)
        if call is None:
            return 0.0
        c = self.config
        verb, arg = call
        held = state.holding
        if verb in (FIND, GO_TO, BRING):
            target = state.location_of(arg) if verb == FIND else arg if verb == GO_TO else USER
            p = distance_affordance(distance(state.robot, target), c.goto_d_max, c.goto_d_min)
            completed = target == state.robot or (verb == BRING and held is None)
            return cap_completed(p, c.completed_cap) if completed else p
        if verb == PICK:
            p = normalize_value(simulated_pick_value(state, arg), c.pick_v_min, c.pick_v_max)
            return cap_completed(p, c.completed_cap) if held == arg else p
        if verb == PLACE:
            p = PLACE_AFFORDANCE if c.place_affordance == "always" or held == arg else 0.0
            return cap_completed(p, c.completed_cap) if held != arg and _put_down_last(state, arg) else p
        assert verb == DONE
        return float(c.terminate)


def _put_down_last(state: KitchenState, obj: str) -> bool:
    """Whether the latest pick-up / put-down of ``obj`` in the state's history was a put-down."""
    for label in reversed(state.history):
        call = parse_skill(label)
        if call is not None and call.arg == obj and call.verb in (PICK, PLACE):
            return call.verb == PLACE
    return False


class LanguageSimConfig(BaseModel):
    """Options of :class:`LanguageSimAffordance`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    n_distractors: int = Field(3, ge=0, description="skills besides the next solution skill that get a high value")
    high_min: float = Field(0.8, gt=0.0, le=1.0, description="high affordances are uniform in [high_min, high_max]")
    high_max: float = Field(1.0, gt=0.0, le=1.0)
    low_max: float = Field(0.1, ge=0.0, lt=1.0, description="all other skills are uniform in [0, low_max]")

    @model_validator(mode="after")
    def _ordered(self) -> "LanguageSimConfig":
        if self.high_max < self.high_min:
            raise ValueError("high_max must be at least high_min")
        if self.low_max >= self.high_min:
            raise ValueError("low_max must be below high_min, or the solution skill is not distinguishable")
        return self


class LanguageSimAffordance(Affordance):
    """SayCan's "language-based simulator" (App. C.2): affordances consistent with a query's solution.

    Given the task's reference plan, the next solution skill — the first plan step not yet matched by
    the history, which is matched against the plan greedily in order, so a detour does not lose the
    place — gets a high affordance; ``n_distractors`` other skills, drawn afresh at each step, also
    get high values; every other skill gets a low one. Draws come from a generator seeded by
    (episode seed, step index), so an episode's affordances are reproducible. After the whole plan has
    been executed the next solution skill is "done". Use it with ``KitchenEnv(mode="language")``.

    ``last_target`` and ``last_distractors`` record the most recent call's choices (for tests, traces).

    It reads ``task.reference_plan``, so it is an oracle: a planner using it is labelled
    "(oracle reference-plan affordances)".
    """

    declaration = OracleDeclaration(
        name="reference-plan affordances", reads=frozenset({Truth.REFERENCE_PLAN}),
        wording="the task's reference plan: affordances consistent with the query, SayCan App. C.2's "
                "language-based simulator (the next plan step high, a few seeded distractors high, the rest low)")

    def __init__(self, **options: Any) -> None:
        self.config: LanguageSimConfig = validate_options(LanguageSimConfig, options, "kitchen_language_sim affordance options")
        self._plan: tuple[str, ...] = ()
        self._seed: int = 0
        self.last_target: str | None = None
        self.last_distractors: list[str] = []

    def reset(self, task: Task, seed: int) -> None:
        plan = read(task, Truth.REFERENCE_PLAN, self)
        if not plan:
            raise InvalidInputError(f"the language-based simulator needs a task with a reference plan; "
                                    f"task {task.task_id!r} has none")
        self._plan = tuple(plan)
        self._seed = int(seed)
        self.last_target, self.last_distractors = None, []

    def next_solution_skill(self, history: Sequence[str]) -> str:
        """The first reference-plan step not yet matched (in order) by ``history``; "done" past the end."""
        if not self._plan:
            raise InvalidInputError("call reset(task, seed) on the language-based simulator first")
        k = 0
        for label in history:
            if k < len(self._plan) and label.strip() == self._plan[k]:
                k += 1
        return self._plan[k] if k < len(self._plan) else "done"

    def __call__(self, observation: Observation, skills: Sequence[str], history: Sequence[str]) -> np.ndarray:
        c = self.config
        target = self.next_solution_skill(history)
        rng = np.random.default_rng([self._seed, len(history)])
        scores = rng.uniform(0.0, c.low_max, size=len(skills))
        others = [i for i, s in enumerate(skills) if s != target]
        n = min(c.n_distractors, len(others))
        picked = rng.choice(others, size=n, replace=False) if n else np.array([], dtype=int)
        for i in picked:
            scores[i] = rng.uniform(c.high_min, c.high_max)
        for i, s in enumerate(skills):
            if s == target:
                scores[i] = rng.uniform(c.high_min, c.high_max)
        self.last_target = target
        self.last_distractors = [skills[int(i)] for i in picked]
        logger.debug("language sim: next=%r distractors=%s", target, self.last_distractors)
        return scores
