"""VirtualHome (scene 1 of ``virtualhome-eval``) as a groundplan environment, for Zero-Shot Planners
(Huang et al., 2022) and SayCan-style planners.

- Tasks: the 342 programs with goals, split deterministically (``split_by``) into demonstrations
  (:meth:`VirtualHomeEnv.demonstrations`) and test tasks (:meth:`VirtualHomeEnv.tasks`; ``split: train``
  makes the demonstration programs the tasks, to collect them for training);
  ``Task.family`` is the task category, ``Task.instruction`` the task name ("Turn on light"). Test
  programs whose goal already holds in their initial graph are left out (35 of the default split's
  149: a plan that does nothing would reach them; ``keep_met_goals`` keeps them).
- Skills: the natural-language form of every admissible step (:mod:`.actions`, 40,560 labels,
  one action set for the whole scene as the paper's single action bank), plus the done label.
- Steps run in the package's evolving-graph simulator (:mod:`.simulator`). Any template filled with
  any object class of the scene (the character, rooms and floors included) is passed to it, so the
  simulator's own preconditions judge every step; the labels above are only what planners choose
  from. A malformed or unexecutable step is a failed :class:`StepResult` whose feedback is the reason.
- Redundant steps, whose effect already holds ("already on", "not sitting", "already grabbed": the
  executor's "satisfied" error type): with ``redundant_steps="continue"`` (default, as the package's
  own action-sequence evaluator, which counts them as additional steps and goes on) the step succeeds
  without changing the state and the trace records ``info["redundant"] = True``; with ``"fail"`` it
  is a failed step (and the plan is not executable): the stricter reading, in which every simulator
  error, "satisfied" included, ends the plan.
- Goals: node, edge and action goals checked against the final state.
- :meth:`VirtualHomeEnv.episode_metrics`: executability, goal success, LCS against the reference
  programs and plan length (the paper's Sec. 4 metrics); ``capabilities`` declares them for tables.

``Observation.state`` is a picklable :class:`VirtualHomeSnapshot` (the simulator state and the
character id) whose :meth:`~VirtualHomeSnapshot.check` runs a step on it without changing it; the
``virtualhome_preconditions`` affordance uses it.
"""
from __future__ import annotations

import collections
import logging
import re
from dataclasses import dataclass
from typing import Any, Literal, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from groundplan.core.types import GoalResult, Observation, StepResult, Task
from groundplan.core.validation import validate_options
from groundplan.envs.base import Env, EnvCapabilities
from groundplan.envs.virtualhome import dataset
from groundplan.envs.virtualhome import simulator as sim
from groundplan.envs.virtualhome.actions import (
    ActionSpace,
    ParseError,
)
from groundplan.envs.virtualhome.scene import goals_met_at_start, scene_action_space
from groundplan.envs.virtualhome.start_state import VirtualHomeStartState

logger = logging.getLogger(__name__)

#: metrics the summary table should show for this env, in order
SUMMARY_METRICS = ("executability", "step_success", "goal_success", "lcs", "length")


class VirtualHomeConfig(BaseModel):
    """Options of :class:`VirtualHomeEnv` (the ``env.options`` of an eval config)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    split_by: Literal["category", "program"] = Field(
        "category",
        description="How the programs are split into demonstrations (train) and test: 'category' holds out "
        "whole task categories (no demonstration shares a test task's name, like the paper's held-out tasks); "
        "'program' holds out programs within every category.",
    )
    split: Literal["train", "validation", "test"] = Field(
        "test",
        description="Which programs are the env's tasks: 'test' (default, the held-out programs planners are "
        "evaluated on), 'train' (the demonstration programs, e.g. to collect them for fine-tuning the planning "
        "LM, Table 1's fine-tuned row; they keep the programs whose goal holds from the start) or 'validation' "
        "(the programs of `validation_fraction` of the train task names, which then leave the demonstrations: "
        "where a planner grid is chosen, never on test programs).",
    )
    validation_fraction: float = Field(0.2, gt=0, lt=1, description="Share of the train task names that are "
                                       "the validation tasks (split: validation), ranked by SHA-1.")
    test_fraction: float = Field(0.3, gt=0, lt=1, description="Fraction of categories (or programs) held out for test.")
    goal_match: Literal["class", "id"] = Field(
        "class",
        description="'class': a goal on a node is met by any node of its class (steps name classes and "
        "the env assigns instances, as in the paper); 'id': the dataset's exact node ids.",
    )
    keep_met_goals: bool = Field(
        False,
        description="Keep the test programs whose goal already holds in their initial graph (e.g. a 'Turn "
        "on light' whose light is on): any plan, even one that executes nothing, 'reaches' such a goal, so "
        "by default they are not test tasks.",
    )
    redundant_steps: Literal["continue", "fail"] = Field(
        "continue",
        description="A step whose effect already holds ('already on', 'not sitting', 'already grabbed'; the "
        "simulator's 'satisfied' error type): 'continue' (default, as the package's own evaluator) records it "
        "as redundant (info['redundant']) and goes on, the state unchanged, the step counted as executed; "
        "'fail' makes it a failed step, so the plan is not executable.",
    )
    done_skill: str = Field("done", min_length=1, description="Label that ends an episode; offered with the skills.")
    cache_size: int = Field(64, ge=1, description="Loaded tasks kept for reuse (each ~100 ms to load).")


@dataclass(frozen=True)
class Demonstration:
    """A training program in natural language: task name and steps ("walk to bedroom", …)."""

    program_id: str
    name: str
    steps: tuple[str, ...]
    description: str = ""


@dataclass
class VirtualHomeSnapshot:
    """Picklable view of the simulator state for grounding functions (``Observation.state``).

    ``state`` is the evolving-graph ``EnvironmentState`` (immutable: steps make new ones), so
    :meth:`check` executes a step on it and discards the result: the precondition check of the
    simulator itself, with the env's instance assignment.
    """

    state: Any
    char_id: int

    def check(self, label: str) -> tuple[bool, str]:
        """(preconditions hold, reason when not) for a skill label or script line."""
        try:
            step = scene_action_space().parse(label, strict=False)
        except ParseError as exc:
            return False, str(exc)
        outcome = sim.run_step(self.state, step, self.char_id, ids=explicit_ids(label))
        return outcome.success, outcome.reason


_DATASET_ARG = re.compile(r"<[^<>]+>\s*\((\d+)\.(\d+)\)")


def explicit_ids(line: str) -> list[int] | None:
    """Node ids of a script line in the dataset's ``<obj> (instance.id)`` form, else None (then the
    env assigns instances)."""
    text = line.strip()
    if not text.startswith("["):
        return None
    found = _DATASET_ARG.findall(text)
    return [int(i) for _, i in found] if found and len(found) == text.count("<") else None


def lcs_length(a: Sequence[str], b: Sequence[str]) -> int:
    """Length of the longest common subsequence of two step sequences."""
    if not a or not b:
        return 0
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b, 1):
            cur.append(prev[j - 1] + 1 if x == y else max(prev[j], cur[j - 1]))
        prev = cur
    return prev[-1]


def normalised_lcs(plan: Sequence[str], references: Sequence[Sequence[str]]) -> float:
    """LCS normalised by the longer program, the maximum over the references (Sec. 2.2)."""
    best = 0.0
    for ref in references:
        longest = max(len(plan), len(ref))
        if longest:
            best = max(best, lcs_length(plan, ref) / longest)
    return best


class VirtualHomeEnv(Env):
    """VirtualHome scene 1 with the evolving-graph simulator; see the module docstring."""

    name = "virtualhome"
    capabilities = EnvCapabilities(measures=SUMMARY_METRICS, table_measures=SUMMARY_METRICS, fixed_actions=True,
                                   disjoint_by="instruction")

    def default_affordance(self) -> str:
        return "virtualhome_preconditions"

    def __init__(self, **options: Any) -> None:
        self.config = validate_options(VirtualHomeConfig, options, "virtualhome env options")
        self.done_skill = self.config.done_skill
        train, test = dataset.split_programs(self.config.split_by, self.config.test_fraction)
        if self.config.split == "validation":  # validation names leave the demonstrations while they are the tasks
            names = dataset.validation_names(train, self.config.validation_fraction)
            train, test = [p for p in train if p.name not in names], [p for p in train if p.name in names]
        self._train, self._test = train, test
        by_name: dict[str, list[dataset.Program]] = collections.defaultdict(list)
        for p in dataset.load_programs():
            by_name[p.name].append(p)
        self._references = {name: tuple(p.class_script for p in ps) for name, ps in by_name.items()}
        if self.config.split == "train":
            self._tasks = [self._task(p) for p in train]
        else:
            met = frozenset() if self.config.keep_met_goals else goals_met_at_start(self.config.goal_match)
            self._tasks = [self._task(p) for p in test if p.program_id not in met]
        self._planners: collections.OrderedDict[str, Any] = collections.OrderedDict()
        self._skills: list[str] | None = None
        self._masks: dict[str, np.ndarray] = {}
        self._admissible: np.ndarray | None = None
        self.task: Task | None = None
        self._state: Any = None
        self._char_id = 0
        self._executed: list[str] = []

    # -- tasks and demonstrations -----------------------------------------------------------

    def _task(self, p: dataset.Program) -> Task:
        space = scene_action_space()
        return Task(
            task_id=p.program_id,
            instruction=p.name,
            family=p.name,
            goal=p.goal,
            reference_plan=tuple(space.label(line) for line in p.class_script),
            metadata={"description": p.description, "program_id": p.program_id, "script": list(p.class_script)},
        )

    def tasks(self, families: Sequence[str] | None = None) -> list[Task]:
        """The split's tasks (ordered by category, then program id), optionally of some categories; test
        tasks without the programs whose goal holds from the start unless ``keep_met_goals``."""
        return [t for t in self._tasks if families is None or t.family in families]

    def demonstrations(self) -> list[Demonstration]:
        """The training programs in natural language, for the planners' few-shot examples."""
        space = scene_action_space()
        return [
            Demonstration(p.program_id, p.name, tuple(space.label(line) for line in p.class_script), p.description)
            for p in self._train
        ]

    # -- task files (docs/tasks.md) --------------------------------------------------------------
    goal_language = "groundplan.envs.virtualhome.goal_language"
    start_state_schema = VirtualHomeStartState

    @property
    def action_space(self) -> ActionSpace:
        return scene_action_space()

    @property
    def skills(self) -> list[str]:
        """Admissible labels and the done label (one shared list; do not modify it)."""
        if self._skills is None:
            self._skills = [*scene_action_space().labels, self.done_skill]
        return self._skills

    # -- episodes -----------------------------------------------------------------------------

    def _planner(self, program_id: str) -> Any:
        planner = self._planners.pop(program_id, None)
        if planner is None:
            planner = sim.construct(program_id)
        self._planners[program_id] = planner
        while len(self._planners) > self.config.cache_size:
            self._planners.popitem(last=False)
        return planner

    def reset(self, task: Task, seed: int) -> Observation:
        """Load the task's initial graph (the simulator is deterministic: ``seed`` changes nothing)."""
        program_id = (task.start_state or {}).get("program") or task.metadata.get("program_id", task.task_id)
        planner = self._planner(program_id)
        planner.reset()
        self.task = task
        self._state = planner.env_state
        self._char_id = sim.character_id(self._state)
        self._executed = []
        self._admissible = self._scene_mask(program_id)
        return self._observe()

    def _observe(self) -> Observation:
        return Observation(skills=self.skills, state=VirtualHomeSnapshot(self._state, self._char_id),
                           admissible=self._admissible)

    def _scene_mask(self, program_id: str) -> np.ndarray:
        """Which skills name only object classes present in this program's scene graph (the paper's
        admissible actions: templates x the objects *in the environment*); the done label is always
        admissible. Cached per program: objects are neither created nor destroyed by steps."""
        mask = self._masks.get(program_id)
        if mask is None:
            present = {n.class_name for n in self._state.get_nodes()}
            steps = scene_action_space().steps
            mask = np.fromiter((all(a in present for a in s.args) for s in steps), dtype=bool, count=len(steps))
            mask = np.append(mask, True)  # the done label
            self._masks[program_id] = mask
        return mask

    def execute(self, skill: str) -> StepResult:
        """Run one step given as a label or a script line; never raises for a bad step.

        A script line in the dataset's ``<obj> (instance.id)`` form runs on exactly those node ids;
        any other step names classes and the env assigns the instances (:mod:`.simulator`)."""
        if self.task is None:
            raise RuntimeError("VirtualHomeEnv.execute was called before reset")
        if skill.strip().lower() == self.done_skill:
            return StepResult(True, f"{self.done_skill}: episode ends", self._observe())
        try:
            step = scene_action_space().parse(skill, strict=False)  # the simulator judges, not the label set
        except ParseError as exc:
            return StepResult(False, str(exc), self._observe(), info={"error": "parse"})
        ids = explicit_ids(skill)
        outcome = sim.run_step(self._state, step, self._char_id, ids=ids)
        info = {"script": step.script, "executed": outcome.script, "assignments_tried": outcome.tried}
        if outcome.redundant and self.config.redundant_steps == "continue":
            info.update(redundant=True, reason=outcome.reason)
            return StepResult(True, f"{step.text}: redundant, its effect already holds ({outcome.reason})",
                              self._observe(), info=info)
        if not outcome.success:
            info["error"] = "redundant" if outcome.redundant else "precondition"
            return StepResult(False, f"{step.text}: {outcome.reason}", self._observe(), info=info)
        self._state = outcome.state
        self._executed.append(step.action)
        return StepResult(True, f"{step.text}: ok", self._observe(), info=info)

    def run_script(self, lines: Sequence[str]) -> list[StepResult]:
        """Execute several steps in order (labels or script lines); for tests and tools."""
        return [self.execute(line) for line in lines]

    def check_goal(self) -> GoalResult:
        if self.task is None:
            raise RuntimeError("VirtualHomeEnv.check_goal was called before reset")
        result = sim.check_goals(self._state, self.task.goal, self._executed, self.config.goal_match)
        return GoalResult(result.success, result.satisfied, result.unsatisfied)

    # -- metrics ---------------------------------------------------------------------------------

    def to_script(self, label: str) -> str:
        """Script form of a label, or the label itself when it does not parse (it then matches nothing)."""
        try:
            return scene_action_space().parse(label, strict=False).script
        except ParseError:
            return label

    def episode_metrics(self, task: Task, trace: Any) -> dict[str, float]:
        """Executability (a non-empty plan whose every executed step succeeded), goal success, LCS
        against the reference programs of the task's name (normalised by the longer program, max
        over references) and plan length (Zero-Shot Planners, Sec. 2.2 and 5.5). ``step_success`` (the
        fraction of a plan's steps the simulator executed) is not in the paper: it separates a plan
        with one failed precondition from one that never parses, which the all-or-nothing
        executability cannot at the success rates a small model reaches."""
        steps = [s for s in trace.steps if not s.done]
        plan = [self.to_script(s.chosen) for s in steps]
        references = self._references.get(task.instruction)
        if not references:  # a task from a file: its own reference plan, if it has one
            own = task.metadata.get("script") or [self.to_script(s) for s in task.reference_plan or ()]
            references = (tuple(own),)
        return {
            "executability": float(bool(steps) and all(s.success for s in steps)),
            "step_success": sum(bool(s.success) for s in steps) / len(steps) if steps else 0.0,
            "goal_success": float(bool(trace.execution_success)),
            "lcs": normalised_lcs(plan, references),
            "length": float(len(steps)),
        }


def load_demonstrations(**options: Any) -> list[Demonstration]:
    """The demonstration programs of the split that ``options`` (:class:`VirtualHomeConfig`) define: the
    ``virtualhome`` entry of :data:`groundplan.envs.DATASETS`, the Zero-Shot planners' examples."""
    return VirtualHomeEnv(**options).demonstrations()
