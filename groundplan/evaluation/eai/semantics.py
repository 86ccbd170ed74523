"""The two ways groundplan scores EAI's action sequencing: ``official`` and ``corrected``.

``official`` is EAI's evaluator (``virtualhome_eval.evaluation.action_sequence.scripts.evaluate_results``)
choice for choice, so its per-model figures come out the same, count for count. ``corrected`` changes
the choices below, each a named switch so that its effect can be counted alone (official with that one
correction on, against official): a reader sees what each changes, per model, instead of one opaque
difference. Verdict corrections change a task's outcome; count corrections change how the table
counts outcomes.
"""
from __future__ import annotations

from typing import Sequence

from pydantic import BaseModel, ConfigDict, Field

from groundplan.envs.virtualhome.eai.tasks import FINAL_GRAPH_MISSES_GOAL, EAITask

#: correction name -> what the official evaluator does and what the correction does instead
CORRECTIONS: dict[str, str] = {
    "repeated_keys": "the output is a JSON object whose keys are actions, in order (EAI's prompt asks for that "
                     "form); the evaluator reads it with json.loads, which keeps each repeated key once, at "
                     "its first position, with the arguments of its last occurrence, so \"WALK\" ... \"WALK\" "
                     "becomes one WALK and the program the model wrote is not the one judged. Corrected: "
                     "every key-value pair in order (object_pairs_hook)",
    "every_edge_goal": "the evaluator's goal check stops at the first satisfied edge goal (a break in its "
                       "loop), so at most one edge goal counts: a task with two or more edge goals never "
                       "succeeds and is dropped by the gold test. Corrected: every edge goal is counted, "
                       "and those tasks are scored",
    "action_goal_order": "the evaluator reorders a task's action goals with list(set(goals)), an order that "
                         "depends on PYTHONHASHSEED, and then requires them in that order. Corrected: the "
                         "task file's order (the order EAI's prompt states)",
    "gold_identical_judged": "a prediction identical to the dataset's reference script is counted executable "
                             "and never run: no goal is counted and it is never a success. Corrected: it is "
                             "executed and checked like any other",
    "prompt_actions_valid": "PLUGIN, PLUGOUT and RELEASE are offered in EAI's prompt (and executed by the "
                            "simulator) but are missing from the evaluator's list, so using one is a "
                            "hallucination. Corrected: the prompt's actions are valid",
    "goal_at_start_dropped": "a task whose goal holds before any action (no action goals) is scored, so any "
                             "output that leaves the goal alone succeeds. Corrected: the task is not scored "
                             "and never counted as a success",
    "parsing_counted_once": "(count) an output that is not JSON is counted twice among parsing errors "
                            "(once when json.loads fails, once more as an empty prediction). Corrected: once",
    "runtime_errors_per_model": "(count) the evaluator creates its runtime-error counters once, before its loop "
                                "over models, so each model's wrong-order, missing-step, affordance and "
                                "additional-step figures also hold those of every model evaluated before it (in "
                                "the response folder's os.listdir order). Corrected: each model's own",
    "additional_step_per_task": "(count) the additional-step figure counts steps (every redundant step of every "
                                "output), not tasks, and a plan can also count under another runtime error. "
                                "Corrected: tasks with at least one additional step",
}
VERDICT_CORRECTIONS = ("repeated_keys", "every_edge_goal", "action_goal_order", "gold_identical_judged",
                       "prompt_actions_valid", "goal_at_start_dropped")
COUNT_CORRECTIONS = ("parsing_counted_once", "runtime_errors_per_model", "additional_step_per_task")


#: An order of a task's action goals, one tuple per set of goals: a task whose action goals are that set is
#: required to perform them in that order.
ActionGoalOrder = tuple[tuple[str, ...], ...]
#: A task's shared class name pinned to one node: (task id, name, node id).
NamedNode = tuple[str, str, int]

#: The choices one run of EAI's evaluator made by hashing strings, so that a published table can be
#: reproduced in any process (``official_run``). Two kinds:
#:
#: - ``list(set(goals))`` orders the action goals. The order is the set's iteration order: it depends on the
#:   string hashes, i.e. on ``PYTHONHASHSEED`` (random in every process unless set) and on the CPython
#:   version's hash function (SipHash-1-3 since 3.11, SipHash-2-4 before), and it is the same for every task
#:   with the same goals in one process. The official set has two such sets: ``GRAB`` and
#:   ``WASH|RINSE|SCRUB|WIPE`` (10 "Wash dishes by hand" tasks) and ``TYPE`` and ``SWITCHOFF`` (3 "Write an
#:   email" tasks). A seed names an order only for one CPython version, so a run's order is written out.
#: - ``relevant_name_to_id`` maps a class name two relevant objects share to one of them (the last in the
#:   iteration order of a set of node ids that the package's graph diff fills). Over seeds 0 to 9 only
#:   ``clothes_shirt`` in 509_2 changes a verdict of the stored answers (claude-3-sonnet: node 1001, which
#:   seed 0 gives, executable; node 1002 not).
#:
#: ``grab_first`` is the order ``PYTHONHASHSEED=0`` gives on CPython 3.11, with node 1002: the project page's
#: leaderboard of June 2024 (every execution rate, 12 of 15 success rates). ``wash_first`` puts WASH before
#: GRAB (both pairs then against the task file's order): every figure of the evaluator's own stored
#: ``summary.json`` for gpt-4o (July 2024), whose action-goal rate also fixes SWITCHOFF before TYPE. That
#: file does not tell the node (gpt-4o's verdicts do not depend on it): seed 0's is pinned, so that no
#: figure of the run depends on the process. Sources and matches: ``published.json`` beside this module and
#: :mod:`groundplan.evaluation.eai.published`.
EVALUATOR_RUNS: dict[str, dict[str, tuple]] = {
    "grab_first": {"action_goal_set_order": (("GRAB", "WASH|RINSE|SCRUB|WIPE"), ("SWITCHOFF", "TYPE")),
                   "name_nodes": (("509_2", "clothes_shirt", 1002),)},
    "wash_first": {"action_goal_set_order": (("WASH|RINSE|SCRUB|WIPE", "GRAB"), ("SWITCHOFF", "TYPE")),
                   "name_nodes": (("509_2", "clothes_shirt", 1001),)},
}


class EAISemantics(BaseModel):
    """Which corrections (:data:`CORRECTIONS`) are on; none is ``official``, all is ``corrected``. The last
    two fields pin what EAI's evaluator leaves to string hashing (:data:`EVALUATOR_RUNS`); empty, the judge
    makes the evaluator's choice in its own process, as the evaluator would there."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="label of the semantics in tables and records")
    repeated_keys: bool = Field(False, description=CORRECTIONS["repeated_keys"])
    every_edge_goal: bool = Field(False, description=CORRECTIONS["every_edge_goal"])
    action_goal_order: bool = Field(False, description=CORRECTIONS["action_goal_order"])
    gold_identical_judged: bool = Field(False, description=CORRECTIONS["gold_identical_judged"])
    prompt_actions_valid: bool = Field(False, description=CORRECTIONS["prompt_actions_valid"])
    goal_at_start_dropped: bool = Field(False, description=CORRECTIONS["goal_at_start_dropped"])
    parsing_counted_once: bool = Field(False, description=CORRECTIONS["parsing_counted_once"])
    runtime_errors_per_model: bool = Field(False, description=CORRECTIONS["runtime_errors_per_model"])
    additional_step_per_task: bool = Field(False, description=CORRECTIONS["additional_step_per_task"])
    action_goal_set_order: ActionGoalOrder = Field(
        (), description="the order list(set(goals)) gave in the evaluator run being reproduced, per set of action "
                        "goals (a task whose goals are one of these sets requires them in that order); other tasks "
                        "get list(set(goals)) in this process. Ignored when action_goal_order is on")
    name_nodes: tuple[NamedNode, ...] = Field(
        (), description="(task id, class name, node id): the node a class name shared by two relevant objects "
                        "named in the evaluator run being reproduced (EAI's relevant_name_to_id); other names "
                        "map as in this process")

    def action_goals(self, goals: Sequence[str]) -> list[str]:
        """A task's action goals in the order the goal check requires them: the task file's with
        ``action_goal_order``, else the evaluator's ``list(set(goals))``, as pinned by
        ``action_goal_set_order`` or as this process hashes."""
        if self.action_goal_order:
            return list(goals)
        for order in self.action_goal_set_order:
            if len(order) == len(goals) and set(order) == set(goals):
                return list(order)
        return list(set(goals))

    def name_to_id(self, task: EAITask) -> dict[str, int]:
        """The object names an output may use and their nodes: EAI's ``relevant_name_to_id`` as this process
        builds it, with ``name_nodes`` pinned."""
        pinned = {name: node for task_id, name, node in self.name_nodes if task_id == task.task_id}
        return {**task.name_to_id, **pinned} if pinned else task.name_to_id

    def scores(self, task: EAITask) -> bool:
        """Whether this semantics scores ``task``: the official set is the evaluator's (its gold test);
        counting every edge goal admits every task whose final graph satisfies its goal (the tasks the
        gold test dropped for its edge count), and ``goal_at_start_dropped`` drops the tasks whose goal
        holds at the start."""
        kept = task.full_drop != FINAL_GRAPH_MISSES_GOAL if self.every_edge_goal else task.in_official
        return kept and not (self.goal_at_start_dropped and task.goal_holds_at_start)


OFFICIAL = EAISemantics(name="official")
CORRECTED = EAISemantics(name="corrected", **{c: True for c in CORRECTIONS})
SEMANTICS = {"official": OFFICIAL, "corrected": CORRECTED}


def official_run(run: str) -> EAISemantics:
    """``official`` with the hash-dependent choices of one evaluator run (:data:`EVALUATOR_RUNS`), whatever
    this process's ``PYTHONHASHSEED``."""
    if run not in EVALUATOR_RUNS:
        raise KeyError(f"unknown evaluator run {run!r}; valid: {', '.join(EVALUATOR_RUNS)}")
    return EAISemantics(name=f"official[{run}]", **EVALUATOR_RUNS[run])


def only(correction: str) -> EAISemantics:
    """``official`` with the one correction on (to count what it alone changes)."""
    if correction not in CORRECTIONS:
        raise KeyError(f"unknown correction {correction!r}; valid: {', '.join(CORRECTIONS)}")
    return EAISemantics(name=f"official+{correction}", **{correction: True})
