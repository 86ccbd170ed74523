"""EAI's action-sequencing tasks as groundplan loads them (Li et al. 2024, Sec. 3.3): the inputs are EAI's
own (the stored prompt is rebuilt from them exactly), and the two task sets drop what they drop for the
stated reason."""
from __future__ import annotations

import re

import pytest

pytest.importorskip("virtualhome_eval")

from groundplan.envs.virtualhome.eai.prompts import evaluator_actions, prompt_actions  # noqa: E402
from groundplan.envs.virtualhome.eai.tasks import (  # noqa: E402
    EDGE_COUNT_BREAK,
    GOAL_HOLDS_AT_START,
    load_task,
    load_tasks,
)


def _rebuild_prompt(task) -> str:
    """EAI's ``generate_prompts``: the one-shot template with the task's blocks."""
    import virtualhome_eval.evaluation.action_sequence.prompts.one_shot as one_shot

    return (one_shot.prompt.replace("<object_in_scene>", task.objects_text).replace("<cur_change>", task.initial_state)
            .replace("<node_goals>", task.node_goal_text).replace("<edge_goals>", task.edge_goal_text)
            .replace("<action_goals>", task.action_goal_text))


def _sorted_lists(text: str) -> str:
    """Every ``['A', 'B']`` list with its items sorted: a node's properties and states are sets of enums,
    hashed by name, so the order EAI's prompt prints them in (as the order of its edge lines) depends on
    PYTHONHASHSEED."""
    return re.sub(r"\[([^\[\]]*)\]", lambda m: "[" + ", ".join(sorted(m.group(1).split(", "))) + "]", text)


@pytest.mark.parametrize("task_id", ["11_1", "27_2", "481_2", "84_1"])
def test_the_stored_prompt_is_rebuilt_from_the_task_inputs(task_id):
    task = load_task(task_id)
    def lines(text):  # the edge lines come from a set of dictionaries too: compared as a multiset
        return sorted(_sorted_lists(text).splitlines())

    assert task.prompt and lines(_rebuild_prompt(task)) == lines(task.prompt)


def test_a_task_carries_eais_inputs():
    t = load_task("11_1")
    assert (t.name, t.in_official, t.in_full, t.official_drop, t.full_drop) == ("Turn on light", True, True, None, None)
    assert t.node_goals == ({"id": 1000, "class_name": "floor_lamp", "state": "ON"},)
    assert t.edge_goals == () and t.action_goals == ()
    assert t.name_to_id == {"floor_lamp": 1000, "character": 65, "bedroom": 67, "dining_room": 201}
    assert {(o.name, o.id) for o in t.objects} == {(n, i) for n, i in t.name_to_id.items()}
    assert t.gold_script[-1] == "[SWITCHON] <floor_lamp> (1000)"
    task = t.as_task()
    assert task.instruction == t.prompt and task.goal["node_goals"] == [t.node_goals[0]]


def test_two_edge_goals_are_dropped_by_the_official_set_only():
    """27_2 (wash clothes): its final graph holds both edge goals, but EAI's check counts one of them."""
    t = load_task("27_2")
    assert len(t.edge_goals) == 2 and t.final_graph_misses == ()
    assert (t.in_official, t.official_drop) == (False, EDGE_COUNT_BREAK)
    assert (t.in_full, t.full_drop) == (True, None)


def test_a_task_whose_goal_holds_at_the_start_is_flagged():
    """84_1 (set up table) has no goal at all: the evaluator scores it, and any output succeeds."""
    t = load_task("84_1")
    assert t.node_goals == t.edge_goals == t.action_goals == ()
    assert t.goal_holds_at_start and t.in_official
    assert (t.in_full, t.full_drop) == (False, GOAL_HOLDS_AT_START)


def test_action_goals_keep_the_file_order():
    assert load_task("481_2").action_goals == ("TYPE", "SWITCHOFF")
    assert [t.task_id for t in load_tasks("official", ids=["11_1", "27_2", "84_1"])] == ["11_1", "84_1"]
    assert [t.task_id for t in load_tasks("full", ids=["11_1", "27_2", "84_1"])] == ["11_1", "27_2"]


def test_the_prompt_offers_actions_the_evaluator_calls_hallucinations():
    offered = {a.name: a.arity for a in prompt_actions()}
    assert len(offered) == 39 and offered["POUR"] == 2 and offered["STANDUP"] == 0
    assert sorted(set(offered) - set(evaluator_actions())) == ["PLUGIN", "PLUGOUT", "RELEASE"]
