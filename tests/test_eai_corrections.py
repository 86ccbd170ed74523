"""Each correction of the ``corrected`` EAI semantics on a crafted output where it changes the verdict
(or the count) against ``official``, EAI's evaluator's choices (Li et al. 2024, Sec. 3.3)."""
from __future__ import annotations

import re

import pytest

pytest.importorskip("virtualhome_eval")

from groundplan.envs.virtualhome.eai.tasks import load_task  # noqa: E402
from groundplan.evaluation.eai.judge import EAIJudge  # noqa: E402
from groundplan.envs.virtualhome.eai.answer import INVALID_JSON, parse_output  # noqa: E402
from groundplan.evaluation.eai.semantics import CORRECTED, OFFICIAL, EAISemantics, only  # noqa: E402
from groundplan.evaluation.eai.table import aggregate  # noqa: E402


@pytest.fixture(scope="module")
def judge():
    return EAIJudge()


def _gold_steps(task_id):
    """The dataset's reference program as (action, objects) pairs."""
    return [(re.match(r"\[(\w+)\]", line).group(1), re.findall(r"<([^<>]+)>", line))
            for line in load_task(task_id).gold_script]


def test_repeated_keys_keep_the_program_the_model_wrote(judge):
    """json.loads keeps a repeated key at its first place with its last value: the walk to the lamp
    becomes a walk to the bedroom, and the switch-on fails for not being near the lamp."""
    text = '{"WALK": ["floor_lamp"], "SWITCHON": ["floor_lamp"], "WALK": ["bedroom"]}'
    official = judge.score_text("11_1", text, OFFICIAL)
    assert official.steps == [["WALK", ["bedroom"]], ["SWITCHON", ["floor_lamp"]]]
    assert (official.success, official.error_type, official.failing_step) == (False, "missing_step", 1)
    corrected = judge.score_text("11_1", text, only("repeated_keys"))
    assert len(corrected.steps) == 3 and corrected.success and corrected.executable


def test_every_edge_goal_counts(judge):
    """27_2 needs soap and jacket on the washing machine: the reference program does both, but the
    evaluator's loop stops counting at the first satisfied edge goal."""
    base = EAISemantics(name="judged", gold_identical_judged=True)
    fixed = EAISemantics(name="judged+edges", gold_identical_judged=True, every_edge_goal=True)
    before = judge.score_steps("27_2", _gold_steps("27_2"), base)
    after = judge.score_steps("27_2", _gold_steps("27_2"), fixed)
    assert (before.scored, before.edge_matched, before.success) == (False, 1, False)
    assert (after.scored, after.edge_matched, after.success) == (True, 2, True)


def test_action_goals_in_the_file_order(judge):
    """481_2 asks for TYPE then SWITCHOFF. The evaluator requires list(set(goals))'s order, which
    depends on PYTHONHASHSEED; corrected requires the stated one."""
    type_first = [("WALK", ["computer"]), ("SWITCHON", ["computer"]), ("TYPE", ["keyboard"]), ("SWITCHOFF", ["computer"])]
    off_first = [("WALK", ["computer"]), ("SWITCHON", ["computer"]), ("SWITCHOFF", ["computer"]),
                 ("WALK", ["keyboard"]), ("TYPE", ["keyboard"])]
    fixed = only("action_goal_order")
    assert judge.score_steps("481_2", type_first, fixed).success
    assert not judge.score_steps("481_2", off_first, fixed).success
    this_process = list(set(load_task("481_2").action_goals))  # the evaluator's order, in this process
    assert judge.score_steps("481_2", type_first, OFFICIAL).success == (this_process == ["TYPE", "SWITCHOFF"])
    assert judge.score_steps("481_2", off_first, OFFICIAL).success == (this_process == ["SWITCHOFF", "TYPE"])


def test_a_copy_of_the_reference_program_is_judged(judge):
    """The evaluator counts a prediction equal to the reference script executable and stops: no goal
    counted, never a success."""
    official = judge.score_steps("11_1", _gold_steps("11_1"), OFFICIAL)
    assert official.gold_identical and official.executable
    assert (official.success, official.node_matched) == (False, 0)
    corrected = judge.score_steps("11_1", _gold_steps("11_1"), only("gold_identical_judged"))
    assert (corrected.success, corrected.node_matched) == (True, 1)


def test_the_prompts_actions_are_not_hallucinations(judge):
    """PLUGIN is in EAI's prompt but not in its evaluator's list; corrected lets the simulator judge it
    (this lamp has no plug: an affordance error at the PLUGIN step)."""
    text = '{"WALK": ["floor_lamp"], "PLUGIN": ["floor_lamp"], "SWITCHON": ["floor_lamp"]}'
    assert judge.score_text("11_1", text, OFFICIAL).error_type == "hallucination"
    corrected = judge.score_text("11_1", text, only("prompt_actions_valid"))
    assert (corrected.error_type, corrected.failing_step) == ("affordance", 1)


def test_a_goal_that_holds_at_the_start_is_never_a_success(judge):
    """84_1 has no goal: the evaluator counts any executable output a success."""
    official = judge.score_text("84_1", '{"WALK": ["table"]}', OFFICIAL)
    assert official.scored and official.success
    corrected = judge.score_text("84_1", '{"WALK": ["table"]}', only("goal_at_start_dropped"))
    assert not corrected.scored and not corrected.success and corrected.goal_holds_at_start


def test_a_non_json_answer_counts_once(judge):
    bad = [judge.score_text("11_1", "First walk to the lamp, then switch it on.", s) for s in (OFFICIAL, CORRECTED)]
    empty = [judge.score_text("11_1", "{}", s) for s in (OFFICIAL, CORRECTED)]
    assert bad[0].parse_error == INVALID_JSON and empty[0].parse_error == "empty"
    assert aggregate("m", [bad[0], empty[0]], OFFICIAL).errors["parsing"] == 3  # 2 + 1, as the evaluator counts
    assert aggregate("m", [bad[1], empty[1]], CORRECTED).errors["parsing"] == 2


def test_additional_steps_count_tasks(judge):
    """Switching the lamp on three times: two additional steps, the plan still executable."""
    steps = [("WALK", ["floor_lamp"]), ("SWITCHON", ["floor_lamp"]), ("SWITCHON", ["floor_lamp"]),
             ("SWITCHON", ["floor_lamp"])]
    v = judge.score_steps("11_1", steps, OFFICIAL)
    assert (v.additional_steps, v.executable, v.success) == ([2, 3], True, True)
    assert aggregate("m", [v], OFFICIAL).errors["additional_step"] == 2
    assert aggregate("m", [v], only("additional_step_per_task")).errors["additional_step"] == 1


def test_steps_and_text_are_judged_alike(judge):
    """A planner's steps (no text) get the verdict the same program gets as an LLM's JSON answer."""
    text = '{"WALK": ["floor_lamp"], "SWITCHON": ["floor_lamp"]}'
    steps = parse_output(text, repeated_keys=True).steps
    for sem in (OFFICIAL, CORRECTED):
        a, b = judge.score_text("11_1", text, sem), judge.score_steps("11_1", steps, sem)
        assert a.to_dict() == b.to_dict() and a.success


def test_the_fence_is_cut_as_the_evaluator_cuts_it():
    assert parse_output('```json\n{"WALK": ["sink"]}', repeated_keys=False).steps == (("WALK", ("sink",)),)
    assert parse_output('```json\n{"WALK": ["sink"]}\n```', repeated_keys=False).error == INVALID_JSON
    assert parse_output("{'FIND': ['sink'], 'FIND': ['cup']}", repeated_keys=True).steps == (
        ("FIND", ("sink",)), ("FIND", ("cup",)))
