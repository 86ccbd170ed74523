"""BabyAI pickup levels as a groundplan Env with SayCanPay's high-level actions (Sec. 6, Fig. 1, Fig. 4).

Actions: ``"pick up <colour> <type>"``, ``"toggle <colour> door"``, ``"drop <type> in void"`` and
``"done picking up"``. Each is compiled by a BFS path planner over agent poses
(:func:`~groundplan.envs.babyai.grid.plan_to_face`) into minigrid primitives (left, right, forward, then
pickup / toggle / drop), executed in minigrid. An action whose preconditions do not hold — hands full,
no such object, a locked door without its key, nothing reachable — is a failed step with the reason
and changes nothing. "drop <type> in void" removes the carried object from the world (one primitive
step): the paper's plans never touch a voided object again, and dropping it on the floor instead lets
it block the very route it was cleared from.

The observation text lists each room's objects and the agent, each door's state, blocking objects and
the carried object (:func:`~groundplan.envs.babyai.grid.describe`). The goal is BabyAI's own: carry an
object matching the mission. The listed actions change as objects are picked up and voided;
:meth:`BabyAIEnv.action_model` predicts them for planners that plan ahead (:mod:`.rules`).
"""
from __future__ import annotations

import contextlib
import io
from typing import Any, Sequence

from groundplan.core.errors import InvalidInputError
from groundplan.core.types import GoalResult, Observation, StepResult, Task
from groundplan.core.validation import validate_options
from groundplan.envs.babyai import grid as G
from groundplan.envs.babyai.levels import make_level, split_tasks
from groundplan.envs.babyai.options import FAMILIES, BabyAIConfig
from groundplan.envs.babyai.rules import DONE, DROP, PICK, TOGGLE, BabyAIListing, listed_actions, normalise
from groundplan.envs.babyai.start_state import BabyAIStartState
from groundplan.envs.base import Env, EnvCapabilities


class BabyAIEnv(Env):
    """One minigrid level instance per (family, split), rebuilt from the task's seed at reset."""

    name = "babyai"
    done_skill = DONE
    start_state_schema = BabyAIStartState
    capabilities = EnvCapabilities(can_replay=True, measures=("primitive_steps",), action_model=True)

    def __init__(self, **options: Any) -> None:
        self.config: BabyAIConfig = validate_options(BabyAIConfig, options, "babyai env options")
        self._levels: dict[tuple[str, str], Any] = {}
        self.level: Any = None
        self._task: Task | None = None
        self.primitive_steps = 0

    # ------------------------------------------------------------------------------------ Env API
    def sizes(self) -> dict[str, int]:
        c = self.config
        return {"train": c.train_per_family, "test": c.test_per_family, "test-generalize": c.generalize_per_family}

    def tasks(self, families: Sequence[str] | None = None) -> list[Task]:
        fams = tuple(families) if families is not None else FAMILIES
        unknown = [f for f in fams if f not in FAMILIES]
        if unknown:
            raise InvalidInputError(f"unknown babyai families {unknown}; valid: {', '.join(FAMILIES)}")
        return split_tasks(self.config.split, self.sizes(), fams, plan_of=reference_plan)

    def reset(self, task: Task, seed: int) -> Observation:
        state = task.start_state or {}
        split = state.get("split", self.config.split)
        key = (task.family, split)
        if key not in self._levels:
            self._levels[key] = make_level(task.family, split)
        self.level = self._levels[key]
        with contextlib.redirect_stdout(io.StringIO()):  # minigrid prints its rejection sampling
            self.level.reset(seed=int(state["level_seed"]))  # the layout is the task's; no episode noise
        self._task = task
        self.primitive_steps = 0
        return self._observe()

    def execute(self, skill: str) -> StepResult:
        if self.level is None:
            raise RuntimeError("call reset(task, seed) first")
        s = normalise(skill)
        if s in (DONE, "done"):
            return StepResult(True, "done", self._observe())
        env = self.level
        if m := PICK.match(s):
            colour, kind = m.groups()
            if env.carrying is not None:
                return self._fail(skill, f"the agent already carries the {G.name(env.carrying)}; drop it first")
            targets = [p for p, o in G.objects(env) if o.type == kind and o.color == colour]
            if not targets:
                return self._fail(skill, f"there is no {colour} {kind} on the floor")
            return self._run(skill, G.plan_to_face(env, targets), G.PICKUP, f"cannot reach the {colour} {kind}",
                             lambda: env.carrying is not None, f"picked up the {colour} {kind}")
        if m := TOGGLE.match(s):
            colour = m.group(1)
            targets = [(p, d) for p, d in G.doors(env) if d.color == colour]
            if not targets:
                return self._fail(skill, f"there is no {colour} door")
            carried = env.carrying
            has_key = carried is not None and carried.type == "key" and carried.color == colour
            if all(d.is_locked for _, d in targets) and not has_key:
                return self._fail(skill, f"the {colour} door is locked and the agent does not carry the {colour} key")
            reachable = [p for p, d in targets if not d.is_locked or has_key]
            before = {p: (d.is_open, d.is_locked) for p, d in targets}
            return self._run(skill, G.plan_to_face(env, reachable), G.TOGGLE, f"cannot reach the {colour} door",
                             lambda: any((d.is_open, d.is_locked) != before[p] for p, d in targets),
                             f"toggled the {colour} door")
        if m := DROP.match(s):
            kind = m.group(1)
            if env.carrying is None:
                return self._fail(skill, "the agent carries nothing")
            if env.carrying.type != kind:
                return self._fail(skill, f"the agent carries the {G.name(env.carrying)}, not a {kind}")
            env.carrying = None  # into the void: off the grid for good (see the module docstring)
            self.primitive_steps += 1
            return StepResult(True, f"dropped the {kind} in the void", self._observe(), info={"primitives": [G.DROP]})
        return self._fail(skill, f"'{skill}' is not a BabyAI action (pick up X, toggle X door, drop X in void, "
                                 f"{DONE})", admissible=False)

    def check_goal(self) -> GoalResult:
        if self._task is None or self.level is None:
            raise RuntimeError("call reset(task, seed) first")
        goal = self._task.goal
        what = f"carry {'the ' + goal['color'] + ' ' if goal['color'] else 'a '}{goal['type']}"
        c = self.level.carrying
        ok = c is not None and c.type == goal["type"] and (goal["color"] is None or c.color == goal["color"])
        return GoalResult(ok, [what] if ok else [], [] if ok else [what])

    def check_plan(self, task: Task, seed: int, plan: Sequence[str]) -> GoalResult:
        self.reset(task, seed)
        for skill in plan:
            if normalise(skill) in (DONE, "done"):
                break
            self.execute(skill)
        return self.check_goal()

    def episode_metrics(self, task: Task, trace: Any) -> dict[str, float]:
        return {"primitive_steps": float(self.primitive_steps)}

    def action_model(self, task: Task) -> BabyAIListing:
        """The light action model of ``task``'s level (:mod:`~groundplan.envs.babyai.rules`), from its start:
        this env's level when it was just reset to ``task``, else a private copy built from the task's
        seed. Reads the task's family and start state, never its goal."""
        if self._task is not None and self._task.task_id == task.task_id and self.primitive_steps == 0:
            level = self.level
        else:
            state = task.start_state or {}
            level = make_level(task.family, state.get("split", self.config.split))
            with contextlib.redirect_stdout(io.StringIO()):
                level.reset(seed=int(state["level_seed"]))
        return BabyAIListing([G.name(o) for _, o in G.objects(level)], [d.color for _, d in G.doors(level)],
                             G.name(level.carrying) if level.carrying is not None else None)

    # ------------------------------------------------------------------------------------ helpers
    def skills(self) -> list[str]:
        """Admissible high-level actions in this scene: every pick-up of a floor object, every door
        toggle, a drop for each object type present, and done."""
        env = self.level
        return listed_actions([G.name(o) for _, o in G.objects(env)], [d.color for _, d in G.doors(env)],
                              G.name(env.carrying) if env.carrying is not None else None)

    def _observe(self) -> Observation:
        env = self.level
        state = {"agent_pos": tuple(int(v) for v in env.agent_pos), "agent_dir": int(env.agent_dir),
                 "carrying": G.name(env.carrying) if env.carrying is not None else None,
                 "primitive_steps": self.primitive_steps}
        return Observation(skills=self.skills(), state=state, text=G.describe(env))

    def _fail(self, skill: str, reason: str, admissible: bool = True) -> StepResult:
        return StepResult(False, f"cannot '{normalise(skill)}': {reason}", self._observe(),
                          info={"admissible": admissible, "reason": reason})

    def _run(self, skill: str, moves: list[int] | None, final: int, unreachable: str, succeeded: Any,
             ok_text: str) -> StepResult:
        if moves is None:
            return self._fail(skill, unreachable)
        if self.primitive_steps + len(moves) + 1 > self.config.max_primitive_steps:
            return self._fail(skill, f"over the cap of {self.config.max_primitive_steps} primitive actions")
        for a in [*moves, final]:
            self.level.step(a)
        self.primitive_steps += len(moves) + 1
        ok = bool(succeeded())
        return StepResult(ok, ok_text if ok else f"cannot '{normalise(skill)}': the action had no effect",
                          self._observe(), info={"primitives": [*moves, final]})


#: task_id -> the expert's plan (a task's layout is fixed by its seed, so the plan is too)
_REFERENCE_PLANS: dict[str, tuple[str, ...]] = {}


def reference_plan(task: Task, max_actions: int = 30) -> tuple[str, ...]:
    """The expert's plan of ``task``, its ``reference_plan`` as the kitchen and Tower of Hanoi tasks carry
    theirs: cost-effectiveness (success at the expert's length, SayCanPay Table 4), the Perfect-Say
    ablation and the splits' model-visible signature (:mod:`~groundplan.envs.babyai.levels`) need it. The
    expert (:class:`~groundplan.envs.babyai.oracle.BabyAIOracle`) is closed-loop, but the layout and the
    actions are deterministic, so its rollout from the task's start is the plan."""
    plan = _REFERENCE_PLANS.get(task.task_id)
    if plan is None:
        from groundplan.envs.babyai.oracle import BabyAIOracle

        env = BabyAIEnv(split=task.start_state.get("split", "test"))
        expert, obs, actions = BabyAIOracle(env), env.reset(task, 0), []
        for _ in range(max_actions):
            action = expert.act(task, obs)
            actions.append(action)
            if action == DONE:
                break
            result = env.execute(action)
            if not result.success:
                raise RuntimeError(f"the BabyAI expert failed on {task.task_id} at {action!r}: {result.feedback}")
            obs = result.observation
        plan = _REFERENCE_PLANS[task.task_id] = tuple(actions)
    return plan
