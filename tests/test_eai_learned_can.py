"""A learned Can for EAI's tasks: the model reads the prompt's task block (goal view ``eai_task``), its
train split shares no task name or task block with the test tasks, the expert plays the gold programs,
and the evaluation checks the test tasks against the model's lineage through the same view."""
from __future__ import annotations

import pytest

pytest.importorskip("virtualhome_eval")

from groundplan.config import EvalConfig  # noqa: E402
from groundplan.envs import ENVS  # noqa: E402
from groundplan.envs.virtualhome.eai.prompts import stored_prompts, task_view  # noqa: E402
from groundplan.envs.virtualhome.eai.tasks import disjoint_ids, held_out_ids, load_task  # noqa: E402
from groundplan.grounding.canpay.data import Trajectory, format_input  # noqa: E402
from groundplan.grounding.canpay.lineage import save_lineage, trajectories_lineage  # noqa: E402
from groundplan.pipelines.evaluate.lineage import LineageError, check_sweep_lineage  # noqa: E402
from groundplan.pipelines.evaluate.sweep import check_config  # noqa: E402

TEST = ["124_1", "813_2"]


def test_task_view_is_the_task_block_goals_first():
    prompt = stored_prompts()["409_2"]
    view = task_view(prompt)
    assert view.startswith("node goals: computer is ON; edge goals: none; action goals: none. objects: ")
    assert "computer (lookable, has_switch)" in view and "state: computer is off, clean; character inside bedroom" in view
    assert "id:" not in view and "Supported Actions" not in view and len(view) < len(prompt) / 10
    # the action goals of a task that has them, without EAI's 'A|B' duplicate line
    assert "action goals: RINSE or WASH." in task_view(stored_prompts()["813_2"])
    assert task_view("Put the cup in the sink") == "Put the cup in the sink"  # no EAI blocks: read whole


def test_train_split_shares_no_task_name_or_block_with_the_test_tasks():
    # 3_1 is another program of 124_1's task name ("Relax on sofa"); 84_1 is not in the full set
    assert disjoint_ids(["124_1"], pool=["3_1", "27_2", "11_1"]) == ["11_1", "27_2"]
    assert disjoint_ids(["124_1", "27_2"], pool=["3_1", "27_2", "11_1"]) == ["11_1"]
    with pytest.raises(Exception, match="split"):
        ENVS.get("virtualhome_eai")(ids=TEST, split="validation")


def test_the_expert_plays_each_gold_program_to_the_goal():
    from groundplan.envs.experts import EXPERTS

    env = ENVS.get("virtualhome_eai")(task_set="full", ids=["27_2", "11_1"])
    expert = EXPERTS.get("virtualhome_eai")(env)
    for task in env.tasks():
        obs, steps = env.reset(task, 0), 0
        while (action := expert.act(task, obs)) != env.done_skill:
            result = env.execute(action)
            assert result.success, result.feedback
            obs, steps = result.observation, steps + 1
        assert env.check_goal().success and steps == len(load_task(task.task_id).gold_script)
        # the task keeps the id-level script: it is hashed into every episode id of the stored runs
        assert task.reference_plan == load_task(task.task_id).gold_script
    assert expert.name == "eai_gold"


@pytest.fixture
def eai_can(tiny_encoder, tmp_path):
    """A saved (untrained) Can that reads the task block; its lineage is written by each test."""
    from groundplan.grounding.canpay.config import CanPayModelConfig
    from groundplan.grounding.canpay.model import CanPayModel

    return CanPayModel(CanPayModelConfig(kind="can", encoder=tiny_encoder, max_length=64,
                                         goal_view="eai_task")).save(tmp_path / "can")


def _trajectory(task_id: str) -> Trajectory:
    """A one-step trajectory of the task, its goal already through the model's view (as training reads it)."""
    task = load_task(task_id)
    return Trajectory(f"{task_id}|0", "virtualhome_eai", "train", task_id, task_view(task.prompt), "",
                      task.reference_skills[:1], (True,), (1.0,), True)


def _config(tmp_path, model) -> EvalConfig:
    planner = {"name": "saycan", "label": "SayCan (learned Can)", "affordance": "saycanpay_learned",
               "affordance_options": {"can_model": str(model), "device": "cpu"},
               "options": {"prompt": "saycan_eai", "max_instruction_chars": 20000, "llm_score": "mean"}}
    return EvalConfig.model_validate({"name": "eai_lineage", "env": {"name": "virtualhome_eai", "options": {"ids": TEST}},
                                      "planners": [planner], "seeds": [0], "output_dir": str(tmp_path / "out")})


def test_evaluation_checks_the_test_tasks_through_the_models_view(eai_can, tmp_path):
    cfg = _config(tmp_path, eai_can)
    save_lineage(eai_can, trajectories_lineage("can-eai", {"train": [_trajectory("27_2")]}, "eai_task"))
    specs = check_config(cfg)
    assert check_sweep_lineage(cfg, specs) == 1
    # broken on purpose: a test task among the validation tasks is found through the view
    save_lineage(eai_can, trajectories_lineage("can-eai", {"train": [_trajectory("27_2")],
                                                            "validation": [_trajectory("813_2")]}, "eai_task"))
    with pytest.raises(LineageError, match=r"1 test task\(s\) share their instruction.*813_2 \(= validation 813_2\)"):
        check_sweep_lineage(cfg, specs)


def test_the_learned_source_reads_the_view_of_the_instruction(eai_can, tiny_encoder, tmp_path):
    from groundplan.core.errors import InvalidInputError
    from groundplan.grounding.canpay.config import CanPayModelConfig
    from groundplan.grounding.canpay.model import CanPayModel
    from groundplan.grounding.saycanpay import LearnedCanPay

    prompt = load_task("124_1").prompt
    source = LearnedCanPay(can_model=str(eai_can), device="cpu")
    items = [((), "[WALK] <couch>"), (("[WALK] <couch>",), "[SIT] <couch>")]
    got = source.score_sequences(prompt, "", items).can
    want = source.can.predict([format_input(task_view(prompt), "", list(h), a) for h, a in items])
    assert got.tolist() == want.tolist()
    assert got.tolist() != source.can.predict([format_input(prompt, "", list(h), a) for h, a in items]).tolist()
    pay = CanPayModel(CanPayModelConfig(kind="pay", encoder=tiny_encoder, max_length=64)).save(tmp_path / "pay")
    with pytest.raises(InvalidInputError, match="different goal views"):
        LearnedCanPay(can_model=str(eai_can), pay_model=str(pay), device="cpu")
    with pytest.raises(ValueError, match="goal view"):
        CanPayModelConfig(kind="can", goal_view="summary")


def test_a_train_task_that_solves_a_test_tasks_goal_under_another_name_is_left_out():
    from groundplan.envs.virtualhome.eai.tasks import solves_same_goal

    work, email = load_task("409_2"), load_task("115_2")  # computer on; computer on + TYPE
    assert work.name != email.name
    assert solves_same_goal(work, email) and not solves_same_goal(email, work)  # Work requires no TYPE
    assert disjoint_ids(["409_2"], pool=["115_2", "3_1"]) == ["3_1"]
    assert not solves_same_goal(load_task("124_1"), email)


def test_the_held_out_side_is_every_task_apart_from_the_train_tasks():
    """A model trained on the train split is tested beyond the sample on every task that shares no task name or
    task block with a train task and whose goal no train program solves; the sample itself is among them."""
    # 3_1 shares 124_1's task name, not a train task's; 27_2 is a train task; Work (409_2) is solved by the
    # train program of Write an email (115_2) under another name
    assert held_out_ids(["124_1"], pool=["3_1", "27_2", "124_1", "409_2"], train=["27_2", "115_2"]) == ["124_1", "3_1"]
    sample = ["124_1", "813_2"]
    env = ENVS.get("virtualhome_eai")(ids=sample, split="held_out", task_set="official")
    held = [t.task_id for t in env.tasks()]
    train = disjoint_ids(sample)
    assert set(sample) <= set(held) and not set(held) & set(train)
    assert {load_task(i).name for i in held}.isdisjoint({load_task(i).name for i in train})


def test_done_can_gives_done_saycans_constant_and_leaves_every_other_action_to_the_model(eai_can):
    from groundplan.grounding.saycanpay import LearnedCanPay

    prompt = load_task("124_1").prompt
    items = [((), "[WALK] <couch>"), (("[WALK] <couch>",), "done"), (("[WALK] <couch>",), "[SIT] <couch>")]
    own = LearnedCanPay(can_model=str(eai_can), device="cpu").score_sequences(prompt, "", items).can
    fixed = LearnedCanPay(can_model=str(eai_can), device="cpu", done_can=0.1).score_sequences(prompt, "", items).can
    assert fixed[1] == 0.1 and own[1] != 0.1
    assert fixed[[0, 2]].tolist() == own[[0, 2]].tolist()
