"""EAI's VirtualHome action-sequencing tasks (Li et al. 2024, Sec. 3.3) as a groundplan task set.

Every program of scene 1 with goals (342, :func:`groundplan.envs.virtualhome.dataset.load_programs`) is
a task, with what EAI gives the model: the task name and description, the symbolic goal (node, edge
and action goals, de-duplicated as EAI's evaluator de-duplicates them), the relevant objects with ids
and properties and the initial state as EAI's prompt prints them, the action vocabulary
(:mod:`.prompts`) and the stored prompt itself. Each task is loaded through the package's
``construct_planner`` and ``get_symbolic_goal_nl``/``get_nl_goal_string``, the calls EAI's prompt
builder makes, so ``name_to_id`` (the objects an output may name) is EAI's own ``relevant_name_to_id``.

Two task sets:

- ``official``: the tasks EAI's evaluator scores. It skips a task whose goal, checked by its own
  ``scene_evaluate_wID``, does not hold in the dataset's final graph ("did not pass gold test"). That
  check counts at most one edge goal (:mod:`.goals`), so every task with two or more distinct edge goals
  is skipped although its final graph satisfies them: ``drop_reason`` says which of the two it is;
- ``full``: every task whose final graph satisfies every goal, less the tasks whose goal already holds
  at the start (no action goals and every node and edge goal true in the initial graph): an empty
  plan would succeed there, so such a task is flagged (``goal_holds_at_start``) and never counted as
  a success.
"""
from __future__ import annotations

import ast
import functools
import hashlib
import json
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Literal, Sequence

from groundplan.core.paths import atomic_write_text, cache_dir
from groundplan.core.types import Task
from groundplan.envs.virtualhome import dataset, simulator
from groundplan.envs.virtualhome.eai.goals import DictView, StateObjectView, count_goals, unsatisfied
from groundplan.envs.virtualhome.eai.prompts import stored_prompts

SCENE = 1
_OBJECT_LINE = re.compile(r"^(.+), id: (\d+), properties: (\[.*\])$")
_ID = re.compile(r"\s*\(\d+\)")

#: why a task is not in a set (``EAITask.drop_reason``)
EDGE_COUNT_BREAK = "edge_goal_count"
FINAL_GRAPH_MISSES_GOAL = "final_graph_misses_goal"
GOAL_HOLDS_AT_START = "goal_holds_at_start"
DROP_REASONS = {
    EDGE_COUNT_BREAK: "two or more edge goals: EAI's goal check counts at most one edge goal (it stops at the "
                      "first satisfied one), so the dataset's own final graph fails its gold test",
    FINAL_GRAPH_MISSES_GOAL: "the dataset's final graph does not satisfy the goal",
    GOAL_HOLDS_AT_START: "every goal already holds in the initial graph and there is no action goal",
}


@dataclass(frozen=True)
class EAIObject:
    """One relevant object as the prompt lists it: ``soap, id: 1002, properties: ['MOVABLE', ...]``."""

    name: str
    id: int
    properties: tuple[str, ...]


@dataclass(frozen=True)
class EAITask:
    task_id: str
    name: str
    description: str
    node_goals: tuple[dict, ...]
    edge_goals: tuple[dict, ...]
    #: in the task file's order (EAI's evaluator reorders them, :mod:`groundplan.evaluation.eai`)
    action_goals: tuple[str, ...]
    objects: tuple[EAIObject, ...]
    #: the object names an output may use and the node each names (EAI's ``relevant_name_to_id``;
    #: two objects of one class share a name, and the last listed wins, as in EAI)
    name_to_id: dict[str, int]
    #: the prompt's blocks, as EAI's prompt builder renders them: the relevant objects, the "current
    #: environment state" (the nodes and edges that the task changes), the node, edge and action goals
    objects_text: str
    initial_state: str
    node_goal_text: str
    edge_goal_text: str
    action_goal_text: str
    #: the stored prompt (the text the 15 LLMs answered): the one-shot template with the blocks above
    prompt: str
    #: the dataset's reference program with node ids, the form EAI compares a prediction with
    gold_script: tuple[str, ...]
    in_official: bool
    in_full: bool
    goal_holds_at_start: bool
    #: why the task is not in the official set (None when it is), and why not in the full set
    official_drop: str | None = None
    full_drop: str | None = None
    #: the goals the dataset's final graph misses (for ``final_graph_misses_goal``)
    final_graph_misses: tuple[str, ...] = field(default=())

    @property
    def reference_skills(self) -> tuple[str, ...]:
        """The gold program as the env's skills (``[WALK] <couch>``: the ids dropped, an object named as
        EAI's outputs name it), the plan an expert plays. (``Task.reference_plan`` keeps the id-level
        script: it is part of every episode's id, and the stored runs' ids hash it.)"""
        return tuple(_ID.sub("", line).strip() for line in self.gold_script)

    def as_task(self) -> Task:
        """A groundplan ``Task``: the instruction is EAI's prompt (what a planner reads), the goal the
        symbolic goal (the simulator side reads it), the family the task name."""
        goal = {"node_goals": list(self.node_goals), "edge_goals": list(self.edge_goals),
                "action_goals": list(self.action_goals)}
        return Task(task_id=self.task_id, instruction=self.prompt, family=self.name, goal=goal,
                    start_state={"program": self.task_id}, reference_plan=self.gold_script,
                    metadata={"benchmark": "eai_action_sequencing", "description": self.description})


def _dedup(goals: Iterable[dict]) -> tuple[dict, ...]:
    from virtualhome_eval.simulation.evolving_graph.eval_utils import remove_duplicate_dicts

    return tuple(remove_duplicate_dicts(list(goals)))


#: task id -> its initial ``EnvironmentGraph`` (kept from the loader's planner; the planner itself, with
#: its final graph and copies, is ~4 MB and is dropped)
_INITIAL_GRAPHS: dict[str, Any] = {}


def initial_state(task_id: str) -> Any:
    """A fresh executor state at the task's start, as ``MotionPlanner.reset()`` gives: the initial graph
    (shared, never modified: each step returns a new state) with instance selection by id."""
    from virtualhome_eval.simulation.evolving_graph.environment import EnvironmentState

    if task_id not in _INITIAL_GRAPHS:
        load_task(task_id)
    names = simulator._resources()[0]
    return EnvironmentState(_INITIAL_GRAPHS[task_id], names, instance_selection=True)


def _objects(text: str) -> tuple[EAIObject, ...]:
    out = []
    for line in text.splitlines():
        m = _OBJECT_LINE.match(line.strip())
        if m:
            out.append(EAIObject(m.group(1), int(m.group(2)), tuple(ast.literal_eval(m.group(3)))))
    return tuple(out)


def _load(program: dataset.Program) -> EAITask:
    planner, _, gold, name, description = simulator.construct_planner(program.program_id, SCENE)
    _INITIAL_GRAPHS[program.program_id] = planner.env_graph
    goal = program.goal
    nodes, edges = _dedup(goal["node_goals"]), _dedup(goal["edge_goals"])
    actions = tuple(dict.fromkeys(goal["action_goals"]))
    # the prompt builder's calls (``generate_prompts``): goals as given, not de-duplicated
    _, _, node_text, edge_text, action_text, name_to_id = planner.get_symbolic_goal_nl(
        goal["node_goals"], goal["edge_goals"], action_goals=goal["action_goals"])
    objects_text, initial_state, _ = planner.get_nl_goal_string()
    final = DictView(planner.final_state_dict)
    official = count_goals(final, nodes, edges, every_edge=False).success
    full = count_goals(final, nodes, edges, every_edge=True).success
    at_start = not actions and count_goals(StateObjectView(planner.init_state), nodes, edges, every_edge=True).success
    misses = tuple(unsatisfied(final, nodes, edges))
    official_drop = None if official else (FINAL_GRAPH_MISSES_GOAL if misses else EDGE_COUNT_BREAK)
    full_drop = FINAL_GRAPH_MISSES_GOAL if not full else (GOAL_HOLDS_AT_START if at_start else None)
    return EAITask(
        task_id=program.program_id, name=name.strip(), description=description.strip(), node_goals=nodes,
        edge_goals=edges, action_goals=actions, objects=_objects(objects_text), name_to_id=dict(name_to_id),
        objects_text=objects_text, initial_state=initial_state, node_goal_text=node_text, edge_goal_text=edge_text,
        action_goal_text=action_text,
        prompt=stored_prompts().get(program.program_id, ""), gold_script=tuple(gold),
        in_official=official, in_full=full_drop is None, goal_holds_at_start=at_start,
        official_drop=official_drop, full_drop=full_drop, final_graph_misses=misses)


@functools.lru_cache(maxsize=1)
def _programs() -> dict[str, dataset.Program]:
    return {p.program_id: p for p in dataset.load_programs()}


@functools.lru_cache(maxsize=None)
def load_task(task_id: str) -> EAITask:
    """One task by program id (``"27_2"``); ~100 ms the first time (the package builds its planner)."""
    try:
        program = _programs()[task_id]
    except KeyError:
        raise KeyError(f"no EAI action-sequencing task {task_id!r} in scene {SCENE}") from None
    return _load(program)


def load_tasks(which: Literal["all", "official", "full"] = "all", ids: Iterable[str] | None = None) -> list[EAITask]:
    """The tasks (every one, or one of the two sets), ordered by task name then program id; ``ids``
    restricts them to those programs (a test's sample)."""
    wanted = list(_programs()) if ids is None else list(ids)
    tasks = [load_task(i) for i in wanted]
    if which == "official":
        return [t for t in tasks if t.in_official]
    if which == "full":
        return [t for t in tasks if t.in_full]
    if which != "all":
        raise ValueError(f"unknown task set {which!r}; valid: all, official, full")
    return tasks


def _membership_key() -> str:
    """What the set membership depends on: the package's version and this module's and the goal check's
    code (a changed rule recomputes it)."""
    from importlib import metadata

    from groundplan.envs.virtualhome.eai import goals

    digest = hashlib.sha1(metadata.version("virtualhome-eval").encode())
    for module in (__file__, goals.__file__):
        digest.update(Path(module).read_bytes())
    return digest.hexdigest()[:16]


def _membership_path() -> Path:
    return cache_dir() / "eai" / f"sets-{_membership_key()}.json"


@functools.lru_cache(maxsize=1)
def set_membership() -> dict[str, tuple[bool, bool]]:
    """Task id -> (in the official set, in the full set). Deciding it loads all 342 tasks (~35 s on 2
    cores), so it is kept under ``cache_dir()/eai`` keyed by :func:`_membership_key`: each process that
    samples tasks (a sweep's Ray workers) then loads only the tasks it runs."""
    path = _membership_path()
    try:
        return {k: (bool(a), bool(b)) for k, (a, b) in json.loads(path.read_text()).items()}
    except (OSError, ValueError, TypeError):
        pass
    membership = {t.task_id: (t.in_official, t.in_full) for t in load_tasks("all")}
    atomic_write_text(path, json.dumps(membership))
    return membership


def _membership_of(ids: Iterable[str]) -> dict[str, tuple[bool, bool]]:
    """:func:`set_membership` for ``ids`` only: from the machine's cache when it is made, else by loading
    just those tasks (an id that is no task is left out), so a run of a few named tasks never loads 342."""
    if set_membership.cache_info().currsize or _membership_path().exists():
        member = set_membership()
        return {i: member[i] for i in ids if i in member}
    out = {}
    for i in ids:
        try:
            task = load_task(i)
        except KeyError:
            continue
        out[i] = (task.in_official, task.in_full)
    return out


def sample_ids(which: Literal["all", "official", "full"] = "official", limit: int | None = None, seed: int = 0,
               ids: Iterable[str] | None = None) -> list[str]:
    """The sorted ids of a task set (or of ``ids`` in it), then a fixed sample of ``limit`` of them:
    ``random.Random(seed).sample`` of the sorted ids, itself sorted. Every row that takes the same
    (set, limit, seed) runs the same tasks, so rows pair task by task. An id outside the set raises."""
    if which not in ("all", "official", "full"):
        raise ValueError(f"unknown task set {which!r}; valid: all, official, full")
    member = set_membership() if ids is None else _membership_of(set(ids))
    column = {"official": 0, "full": 1}.get(which)
    in_set = sorted(i for i, m in member.items() if column is None or m[column])
    if ids is not None:
        wanted = set(ids)
        if missing := sorted(wanted - set(in_set)):
            raise KeyError(f"task ids not in EAI's {which} set: {', '.join(missing)}")
        in_set = [i for i in in_set if i in wanted]
    if limit is not None and limit < len(in_set):
        in_set = sorted(random.Random(seed).sample(in_set, limit))
    return in_set


def goal_signature(task: EAITask) -> tuple[tuple[str, str], frozenset[str]]:
    """(the state goals' text without node ids, the action goals as a set): what a program must achieve."""
    def norm(text: str) -> str:
        return " ".join(re.sub(r"\(\d+\)|id: \d+|-{3,}", " ", text).lower().split())

    return (norm(task.node_goal_text), norm(task.edge_goal_text)), frozenset(a.upper() for a in task.action_goals)


def solves_same_goal(test: EAITask, train: EAITask) -> bool:
    """A near-duplicate of another name: the same state goals (not both empty), and every action the test task
    requires also required of the train task, so a program that solves the train task's goal solves the test
    task's. EAI's 409_2 "Work" (computer on, no action required) and 115_2 "Write an email" (computer on, TYPE)
    differ in name and text but not in what a program must do."""
    (state, actions), (t_state, t_actions) = goal_signature(test), goal_signature(train)
    if state != t_state or not actions <= t_actions:
        return False
    return bool(any(state) or actions)


def disjoint_ids(test_ids: Iterable[str], pool: Iterable[str] | None = None) -> list[str]:
    """The sorted ids of the full set's tasks (or of ``pool``) that share neither the task name nor the
    task block (what a learned model reads of the prompt,
    :func:`~groundplan.envs.virtualhome.eai.prompts.task_view`) with any of ``test_ids``, nor solve the same goal
    as one (:func:`solves_same_goal`): the train tasks of a model tested on those (split by task, so two
    programs of one task name never sit on both sides, nor a near-duplicate under another name)."""
    apart = _apart_from([load_task(i) for i in test_ids], they_are="test")
    return [i for i in (sorted(pool) if pool is not None else sample_ids("full")) if apart(load_task(i))]


def held_out_ids(test_ids: Iterable[str], which: Literal["all", "official", "full"] = "official",
                 pool: Iterable[str] | None = None, train: Iterable[str] | None = None) -> list[str]:
    """Every task of set ``which`` (or of ``pool``) on the held-out side of the split that ``test_ids`` define:
    no task name and no task block of any train task (``train``, by default :func:`disjoint_ids` of
    ``test_ids``), and no goal a train task's program solves. ``test_ids`` themselves are among them; the rest
    are the test tasks beyond a sample."""
    train_tasks = [load_task(i) for i in (disjoint_ids(test_ids) if train is None else train)]
    apart = _apart_from(train_tasks, they_are="train")
    return [i for i in (sorted(pool) if pool is not None else sample_ids(which)) if apart(load_task(i))]


def _apart_from(tasks: Sequence[EAITask], they_are: Literal["test", "train"]) -> Callable[[EAITask], bool]:
    """Whether a task is on the other side of the split from ``tasks`` (the test or the train tasks): it shares
    neither the task name nor the task block with any of them, and no goal (:func:`solves_same_goal`, whose
    first task is the test side's)."""
    from groundplan.envs.splits import instruction_key
    from groundplan.envs.virtualhome.eai.prompts import task_view

    names = {t.name for t in tasks}
    views = {instruction_key(task_view(t.prompt)) for t in tasks}

    def apart(task: EAITask) -> bool:
        if task.name in names or instruction_key(task_view(task.prompt)) in views:
            return False
        pairs = ((t, task) for t in tasks) if they_are == "test" else ((task, t) for t in tasks)
        return not any(solves_same_goal(test, train) for test, train in pairs)

    return apart
