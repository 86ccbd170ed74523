"""The two ways groundplan scores EAI's action sequencing: ``official`` and ``corrected``.

``official`` is EAI's evaluator (``virtualhome_eval.evaluation.action_sequence.scripts.evaluate_results``)
choice for choice, so its per-model figures come out the same, count for count. ``corrected`` changes
the choices below, each a named switch so that its effect can be counted alone (official with that one
correction on, against official): a reader sees what each changes, per model, instead of one opaque
difference. Verdict corrections change a task's outcome; count corrections change how the table
counts outcomes.
"""
from __future__ import annotations

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


class EAISemantics(BaseModel):
    """Which corrections (:data:`CORRECTIONS`) are on; none is ``official``, all is ``corrected``."""

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


def only(correction: str) -> EAISemantics:
    """``official`` with the one correction on (to count what it alone changes)."""
    if correction not in CORRECTIONS:
        raise KeyError(f"unknown correction {correction!r}; valid: {', '.join(CORRECTIONS)}")
    return EAISemantics(name=f"official+{correction}", **{correction: True})
