"""One verdict per (task, output): EAI's action-sequencing checks (Li et al. 2024, Sec. 3.3), fast.

The checks run in EAI's order, the first failing one deciding the error type:

1. parsing: the answer is JSON with at least one action (:mod:`.parse`);
2. hallucination: every action is in the evaluator's list (``eval_utils.valid_actions``, upper-cased)
   and every object is one of the task's relevant objects (EAI's ``relevant_name_to_id``);
3. parameter: every action has its number of objects (one empty-string argument dropped first, as
   ``check_action_grammar`` does);
4. runtime: the steps, made script lines with the objects' ids (``json_to_action``'s form), run in the
   simulator from the task's initial state. A step whose effect already holds is an *additional step*
   (executor error type 4): noted, skipped, the plan goes on; any other failure ends the plan with the
   executor's error type, a missing-step failure turned into *wrong temporal order* when EAI's
   ``TemporalOrderChecker`` finds the missing precondition held in an earlier state of this plan;
5. goals: node, edge and action goals counted on the state the plan reached
   (:func:`groundplan.envs.virtualhome.eai.goals.count_goals`); success is every goal satisfied. As in
   EAI, a plan that stops at a runtime error is still checked on the state it reached.

Speed. EAI's evaluator deep-copies the whole state history before every step and builds a fresh
``MotionPlanner`` for every goal check (~30 ms a step, seconds a task). Here a step returns a new
executor state (the package's copy-on-write ``EnvironmentState``), the states of the plan are kept as
objects, and only a missing-step failure turns them into dictionaries for the checker, once: a task
costs milliseconds.

The judge takes a task id and steps, so a planner's program (open-loop) or its executed trace
(closed-loop) is scored the same way as a stored answer; :meth:`EAIJudge.score_text` parses text first.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

from groundplan.envs.virtualhome.eai import tasks as eai_tasks
from groundplan.envs.virtualhome.eai.goals import StateObjectView, count_goals
from groundplan.envs.virtualhome.eai.prompts import evaluator_actions, prompt_actions
from groundplan.envs.virtualhome.simulator import EXECUTOR_ERRORS, REDUNDANT_ERROR_TYPE, execute_line_info
from groundplan.envs.virtualhome.eai.answer import EMPTY, ParsedOutput, parse_output
from groundplan.evaluation.eai.semantics import EAISemantics

ERROR_TYPES = ("parsing", "hallucination", "parameter", "wrong_order", "missing_step", "affordance",
               "unseen_object", "unknown")
MISSING = 1

Steps = Sequence[tuple[str, Sequence[Any]]]


@dataclass
class Verdict:
    """What one output did on one task under one semantics."""

    task_id: str
    semantics: str
    #: whether the semantics scores this task (else the verdict is kept but not counted)
    scored: bool
    steps: list[list[Any]]
    script: list[str] = field(default_factory=list)
    #: the first failing check (:data:`ERROR_TYPES`), None when the plan ran to its end
    error_type: str | None = None
    #: for parsing errors: ``invalid_json`` or ``empty``
    parse_error: str | None = None
    #: index (0-based, in ``steps``) of the step that failed the parameter or runtime check
    failing_step: int | None = None
    error_message: str = ""
    executable: bool = False
    success: bool = False
    #: indices of the steps skipped as additional (their effect already held)
    additional_steps: list[int] = field(default_factory=list)
    node_matched: int = 0
    edge_matched: int = 0
    action_matched: int = 0
    node_total: int = 0
    edge_total: int = 0
    action_total: int = 0
    gold_identical: bool = False
    goal_holds_at_start: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _vocabulary(semantics: EAISemantics) -> dict[str, int]:
    vocab = evaluator_actions()
    if semantics.prompt_actions_valid:
        vocab = {**{a.name: a.arity for a in prompt_actions()}, **vocab}
    return vocab


def _known(name: Any, names: dict[str, int]) -> bool:
    try:
        return names.get(name) is not None
    except TypeError:  # an unhashable argument (a nested list) names no object
        return False


class EAIJudge:
    """Scores outputs on EAI's tasks; tasks (and their initial graphs) load on first use.

    ``cache_size`` step outcomes are kept, keyed by the task and the script lines executed so far (what
    determines the state, hence the outcome): many outputs of one task share their first steps (every
    model walks to the same objects, and both semantics judge mostly the same program), so a caller
    that scores task by task runs each distinct prefix once. 0 turns it off (the timing of a cold judge).
    """

    def __init__(self, cache_size: int = 2048) -> None:
        self.cache_size = cache_size
        self._steps: OrderedDict[tuple[str, tuple[str, ...]], tuple[Any, int | None, str]] = OrderedDict()

    def score_text(self, task_id: str, text: str, semantics: EAISemantics) -> Verdict:
        """Parse an LLM's answer (:mod:`.parse`) and judge it."""
        return self.score_parsed(task_id, parse_output(text, semantics.repeated_keys), semantics)

    def score_steps(self, task_id: str, steps: Steps, semantics: EAISemantics) -> Verdict:
        """Judge an action sequence given as (action, objects) pairs, e.g. a planner's program."""
        parsed = ParsedOutput(tuple((a, tuple(args)) for a, args in steps)) if steps else ParsedOutput(None, EMPTY)
        return self.score_parsed(task_id, parsed, semantics)

    def score_parsed(self, task_id: str, parsed: ParsedOutput, semantics: EAISemantics) -> Verdict:
        task = eai_tasks.load_task(task_id)
        v = Verdict(task_id, semantics.name, semantics.scores(task),
                    [[a, list(args)] for a, args in parsed.steps or ()],
                    node_total=len(task.node_goals), edge_total=len(task.edge_goals),
                    action_total=len(task.action_goals), goal_holds_at_start=task.goal_holds_at_start)
        if parsed.steps is None:
            v.error_type, v.parse_error = "parsing", parsed.error
            return v
        vocab = _vocabulary(semantics)
        name_to_id = semantics.name_to_id(task)
        for action, args in parsed.steps:
            if action.upper() not in vocab or not all(_known(a, name_to_id) for a in args):
                v.error_type = "hallucination"
                v.error_message = f"{action} {list(args)}"
                return v
        lines = []
        for i, (action, args) in enumerate(parsed.steps):
            args = list(args)
            if "" in args:  # check_action_grammar drops one empty argument, and the program keeps it dropped
                args.remove("")
            if len(args) != vocab[action.upper()]:
                v.error_type, v.failing_step = "parameter", i
                v.error_message = f"{action} takes {vocab[action.upper()]} objects, got {args}"
                return v
            ids = "".join(f" <{a}> ({name_to_id[a]})" for a in args)
            lines.append(f"[{action}]{ids}")
        v.script = lines
        if lines == list(task.gold_script):
            v.gold_identical = True
            if not semantics.gold_identical_judged:  # the evaluator counts it executable and stops there
                v.executable = True
                return v
        self._execute(task, v, semantics)
        return v

    def _step(self, task_id: str, executed: list[str], line: str, state: Any, history: list[Any]
              ) -> tuple[Any, int | None, str]:
        """(next state or None, EAI's error type, message) of ``line`` after ``executed``, cached."""
        from virtualhome_eval.simulation.evolving_graph.checker import TemporalOrderChecker

        key = (task_id, (*executed, line))
        hit = self._steps.get(key)
        if hit is not None:
            self._steps.move_to_end(key)
            return hit
        next_state, info, exc = execute_line_info(state, line)
        if next_state is not None:
            out: tuple[Any, int | None, str] = (next_state, None, "")
        elif exc is not None:  # the package raised (EAI's evaluator would stop with it)
            out = (None, 5, f"{type(exc).__name__}: {exc}")
        else:
            code = info.get_error_type()
            if code == MISSING:  # EAI's checker reads the plan's earlier states as dictionaries
                info = TemporalOrderChecker(info, [s.to_dict() for s in history]).run_checker()
                code = info.get_error_type()
            out = (None, code, info.get_error_string())
        if self.cache_size > 0:
            self._steps[key] = out
            if len(self._steps) > self.cache_size:
                self._steps.popitem(last=False)
        return out

    def _execute(self, task: Any, v: Verdict, semantics: EAISemantics) -> None:
        state = eai_tasks.initial_state(task.task_id)
        history = [state]  # the states the plan passed through, as objects
        executed: list[str] = []
        v.executable = True
        for i, line in enumerate(v.script):
            next_state, code, message = self._step(task.task_id, executed, line, state, history)
            if next_state is not None:
                state = next_state
                history.append(state)
                executed.append(line)
                continue
            if code == REDUNDANT_ERROR_TYPE:
                v.additional_steps.append(i)
                continue
            v.executable = False
            v.error_type = EXECUTOR_ERRORS.get(code, "unknown")
            v.failing_step, v.error_message = i, message
            break
        count = count_goals(StateObjectView(state), task.node_goals, task.edge_goals,
                            semantics.action_goals(task.action_goals), executed,
                            every_edge=semantics.every_edge_goal)
        v.node_matched, v.edge_matched, v.action_matched = count.node, count.edge, count.action
        v.success = count.success and not (semantics.goal_at_start_dropped and task.goal_holds_at_start)
