"""EAI's VirtualHome action sequencing (Li et al. 2024, Sec. 3.3) as a closed-loop groundplan env.

The open-loop benchmark gives an LLM one prompt and scores the whole program it writes. Here a
groundplan planner acts one skill at a time on the same tasks, from the same inputs:

- the instruction a planner reads is EAI's stored prompt for the task (:attr:`EAITask.prompt`): the
  action vocabulary, the relevant objects, the initial state and the symbolic goal, nothing else.
  Reading the goal is allowed only because EAI's prompt gives it to every model;
- the skills are EAI's action vocabulary (the prompt's "Supported Actions List") over the task's
  relevant object names, in EAI's script notation: ``[STANDUP]``, ``[WALK] <laptop>``,
  ``[PUTBACK] <cup> <sink>`` (two distinct objects). ``character`` is never an argument (the prompt
  forbids it). Objects are named as EAI's outputs name them (``relevant_name_to_id``: when two objects
  share a class name, the name means the last listed, as in EAI);
- a step runs in the package's evolving-graph executor from EAI's initial graph, as EAI's judge runs
  an output's lines. A step whose effect already holds is EAI's *additional step*: it succeeds, changes
  nothing and is marked ``info["additional"]``; any other failure is a failed step (the state is
  unchanged) whose feedback names the executor's error, and the episode goes on, so closed-loop planners
  can react to it;
- the goal check (:meth:`EAIVirtualHomeEnv.check_goal`, the episode's ``execution_success``) is the
  corrected semantics' (every node, edge and action goal; a task whose goal holds at the start never
  succeeds). The leaderboard (``groundplan tables``, ``eai run``, ``eai score --runs``) judges the
  program the robot executed (its successful steps, additional ones included, in order: what it did) with
  :class:`~groundplan.evaluation.eai.judge.EAIJudge` under both semantics, so a closed-loop row and a
  stored LLM's answer are scored by the same code; the test suite checks that the two agree. Failed
  attempts are counted (``failed_attempts``) but never reach the judge: they changed nothing.

Tasks are EAI's ``official`` (305) or ``full`` (338) set, optionally only some ids and a fixed random
sample of them (:func:`~groundplan.envs.virtualhome.eai.tasks.sample_ids`): every row run with the same
options plays the same tasks, so rows pair task by task. The ``open_loop`` planner is EAI's own protocol
in this env: it writes the whole program from the prompt, and its answer is judged as text.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Literal, Sequence

from pydantic import BaseModel, ConfigDict, Field

from groundplan.core.errors import InvalidInputError
from groundplan.core.measures import register_measure
from groundplan.core.types import GoalResult, Observation, StepResult, Task
from groundplan.core.validation import validate_options
from groundplan.envs.base import Env, EnvCapabilities
from groundplan.envs.experts import ReferencePlanExpert
from groundplan.envs.virtualhome.eai import tasks as eai_tasks
from groundplan.envs.virtualhome.eai.answer import parse_skill, skill_label
from groundplan.envs.virtualhome.eai.goals import GoalCount, StateObjectView, count_goals, unsatisfied
from groundplan.envs.virtualhome.eai.prompts import prompt_actions
from groundplan.envs.virtualhome.simulator import EXECUTOR_ERRORS, REDUNDANT_ERROR_TYPE, execute_line
from groundplan.envs.virtualhome.start_state import VirtualHomeStartState

register_measure("failed_attempts", "steps the executor refused (closed loop: the state is unchanged)",
                 higher_is_better=False)
register_measure("eai_length", "steps executed (additional steps included, failed attempts not)",
                 higher_is_better=False)
register_measure("goals_gained", "node, edge and action goals satisfied at the end less those that held at the start "
                 "(every edge goal counted, as the corrected semantics does): progress where success is all or none")

MEASURES = ("failed_attempts", "eai_length", "goals_gained")


class EAIEnvConfig(BaseModel):
    """Options of :class:`EAIVirtualHomeEnv` (an eval config's ``env.options``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    task_set: Literal["official", "full", "all"] = Field(
        "official", description="EAI's tasks: 'official' (the 305 its evaluator scores), 'full' (338: every task "
        "whose gold program reaches its goal, less those whose goal holds at the start) or 'all' (342).")
    limit: int | None = Field(None, ge=1, description="A fixed random sample of this many tasks of the set "
                              "(random.Random(sample_seed) over the sorted ids: the same tasks for every row).")
    sample_seed: int = Field(0, description="Seed of the sample that limit takes.")
    ids: list[str] | None = Field(None, description="Only these task ids of the set (each must be in it); "
                                  "limit then samples among them. Loads only their tasks.")
    done_skill: str = Field("done", min_length=1, description="Label that ends an episode; offered with the skills.")
    split: Literal["test", "train", "held_out"] = Field(
        "test", description="'test': the tasks above. 'train': every task of the full set whose task name is no "
        "test task's and whose task block (what a learned model reads of the prompt, prompts.task_view) is no test "
        "task's: the data of a Can/Pay model evaluated on the test tasks (split by task, never by trajectory). "
        "'held_out': every task of task_set that shares no task name, task block or goal with a train task: the "
        "test tasks above and the rest of the held-out side (a model trained on 'train' tested beyond the sample).")


@functools.lru_cache(maxsize=512)
def task_skills(task_id: str, done_skill: str = "done") -> tuple[str, ...]:
    """Every EAI action over the task's relevant object names, in the prompt's action order, then done."""
    names = [n for n in eai_tasks.load_task(task_id).name_to_id if n != "character"]
    out = []
    for action in prompt_actions():
        if action.arity == 0:
            out.append(skill_label(action.name, []))
        elif action.arity == 1:
            out.extend(skill_label(action.name, [n]) for n in names)
        else:
            out.extend(skill_label(action.name, [a, b]) for a in names for b in names if a != b)
    return (*out, done_skill)


def script_line(label: str, name_to_id: dict[str, int]) -> str:
    """The executor's line for a skill, objects with EAI's ids: ``[WALK] <laptop> (1000)``."""
    action, args = parse_skill(label)
    unknown = [a for a in args if a not in name_to_id]
    if unknown:
        raise ValueError(f"{label!r} names objects that are not in this task: {unknown}")
    return f"[{action}]" + "".join(f" <{a}> ({name_to_id[a]})" for a in args)


@dataclass
class EAISnapshot:
    """Picklable executor state for grounding functions (``Observation.state``); :meth:`check` runs a
    step on it and discards the result, the simulator's own precondition check (an oracle when a
    planner reads it: ``virtualhome_preconditions`` declares it)."""

    state: Any
    name_to_id: dict[str, int]

    def check(self, label: str) -> tuple[bool, str]:
        """(the step would change the state now, reason when not). An additional step (effect already
        holds) counts as not feasible: it would do nothing."""
        try:
            line = script_line(label, self.name_to_id)
        except ValueError as exc:
            return False, str(exc)
        ok, _, reason, _ = execute_line(self.state, line)
        return ok, reason


class EAIVirtualHomeEnv(Env):
    """EAI's action-sequencing tasks, one skill at a time; see the module docstring."""

    name = "virtualhome_eai"
    capabilities = EnvCapabilities(measures=MEASURES, table_measures=("execution_success", *MEASURES), fixed_actions=True,
                                   disjoint_by="instruction", feasibility_labels=True)
    #: ``{program: <task id>}``: the EAI task whose initial graph the episode starts from
    start_state_schema = VirtualHomeStartState

    def default_affordance(self) -> str:
        return "virtualhome_preconditions"

    def __init__(self, **options: Any) -> None:
        self.config = validate_options(EAIEnvConfig, options, "virtualhome_eai env options")
        self.done_skill = self.config.done_skill
        try:
            ids = eai_tasks.sample_ids(self.config.task_set, self.config.limit, self.config.sample_seed, ids=self.config.ids)
        except KeyError as exc:
            raise InvalidInputError(str(exc.args[0])) from None
        if self.config.split == "held_out":
            ids = eai_tasks.held_out_ids(ids, self.config.task_set)
        elif self.config.split == "train":
            ids = eai_tasks.disjoint_ids(ids)
            if not ids:
                raise InvalidInputError("no task of EAI's full set is disjoint from the test tasks (by task name and "
                                        "task block): sample fewer test tasks (limit) to leave tasks to train on")
        self._tasks = [eai_tasks.load_task(i).as_task() for i in ids]
        self.task: Task | None = None
        self._eai: eai_tasks.EAITask | None = None
        self._skills: list[str] = []
        self._state: Any = None
        self._executed: list[str] = []
        self._goals_at_start = 0

    def tasks(self, families: Sequence[str] | None = None) -> list[Task]:
        """The set's tasks (or its sample), sorted by program id; ``families`` are EAI task names."""
        return [t for t in self._tasks if families is None or t.family in families]

    def reset(self, task: Task, seed: int) -> Observation:
        """EAI's initial graph of the task (deterministic: ``seed`` changes nothing)."""
        program = str((task.start_state or {}).get("program", task.task_id))
        try:
            self._eai = eai_tasks.load_task(program)
        except KeyError as exc:
            raise InvalidInputError(str(exc.args[0])) from None
        self.task = task
        self._skills = list(task_skills(program, self.done_skill))
        self._state = eai_tasks.initial_state(program)
        self._executed = []
        self._goals_at_start = self._goal_count().satisfied
        return self._observe()

    def _observe(self) -> Observation:
        assert self._eai is not None
        return Observation(skills=self._skills, state=EAISnapshot(self._state, self._eai.name_to_id))

    def execute(self, skill: str) -> StepResult:
        """Run one skill; a bad or infeasible one is a failed step with the reason, never an exception."""
        if self._eai is None:
            raise RuntimeError("EAIVirtualHomeEnv.execute was called before reset")
        if skill.strip() == self.done_skill:
            return StepResult(True, f"{self.done_skill}: episode ends", self._observe())
        try:
            line = script_line(skill, self._eai.name_to_id)
        except ValueError as exc:
            return StepResult(False, str(exc), self._observe(), info={"error": "parse"})
        ok, next_state, reason, code = execute_line(self._state, line)
        if ok:
            self._state = next_state
            self._executed.append(line)
            return StepResult(True, f"{skill}: ok", self._observe(), info={"script": line})
        if code == REDUNDANT_ERROR_TYPE:  # EAI counts it and goes on: the step did nothing
            return StepResult(True, f"{skill}: its effect already holds", self._observe(),
                              info={"script": line, "additional": True})
        return StepResult(False, f"{skill}: {reason}", self._observe(),
                          info={"script": line, "error": EXECUTOR_ERRORS.get(code, "unknown")})

    def check_goal(self) -> GoalResult:
        """Every node, edge and action goal (the corrected semantics' check; the official figure is in
        :meth:`episode_metrics`)."""
        if self._eai is None:
            raise RuntimeError("EAIVirtualHomeEnv.check_goal was called before reset")
        t = self._eai
        view = StateObjectView(self._state)
        count = self._goal_count(view)
        satisfied = [f"{kind} goals {got}/{len(goals)}" for kind, got, goals in
                     (("node", count.node, t.node_goals), ("edge", count.edge, t.edge_goals),
                      ("action", count.action, t.action_goals)) if goals]
        missed = unsatisfied(view, t.node_goals, t.edge_goals)
        if count.action < len(t.action_goals):
            missed.append(f"action goals {' then '.join(t.action_goals)}")
        success = count.success and not t.goal_holds_at_start
        return GoalResult(success, satisfied, missed)

    def _goal_count(self, view: StateObjectView | None = None) -> GoalCount:
        """The task's goals satisfied now (every edge goal counted), after the lines executed so far."""
        t = self._eai
        assert t is not None
        view = view or StateObjectView(self._state)
        return count_goals(view, t.node_goals, t.edge_goals, list(t.action_goals), self._executed, every_edge=True)

    def episode_metrics(self, task: Task, trace: Any) -> dict[str, float]:
        """The failed attempts, the executed program's length (additional steps included) and the goals the
        episode brought about (``goals_gained``: a tie-break for a validation search where no variant succeeds,
        so one that reaches some goals ranks above one that stops at once; a goal that held at the start and
        was undone counts against it)."""
        executed = [s for s in trace.steps if not s.done and s.success]
        failed = sum(1 for s in trace.steps if not s.done and not s.success)
        gained = self._goal_count().satisfied - self._goals_at_start
        return {"failed_attempts": float(failed), "eai_length": float(len(executed)), "goals_gained": float(gained)}


class GoldProgramExpert(ReferencePlanExpert):
    """The expert of EAI trajectories (Can/Pay data): each task's gold program as skills
    (:attr:`~groundplan.envs.virtualhome.eai.tasks.EAITask.reference_skills`), then done; rows labelled
    ``eai_gold``."""

    name = "eai_gold"

    def plan(self, task: Task) -> Sequence[str]:
        program = str((task.start_state or {}).get("program", task.task_id))
        return eai_tasks.load_task(program).reference_skills
