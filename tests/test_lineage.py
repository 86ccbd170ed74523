"""A trained Can/Pay model carries the tasks it read (its lineage), a prompt's lineage is its few-shot
examples, and an evaluation whose test set repeats either is refused before any episode runs."""
from __future__ import annotations

import pytest

from groundplan.config import EvalConfig
from groundplan.envs import ENVS
from groundplan.envs.splits import visible_signature
from groundplan.grounding.canpay.data import Trajectory
from groundplan.grounding.canpay.lineage import (
    LINEAGE_FILE,
    Example,
    Lineage,
    inherit,
    load_lineage,
    prompt_lineage,
    save_lineage,
    trajectories_lineage,
)
from groundplan.pipelines.evaluate.lineage import LineageError, check_sweep_lineage
from groundplan.pipelines.evaluate.sweep import check_config, run_sweep


def checked(cfg: EvalConfig) -> int:
    """The episodes of ``cfg`` after the config and lineage checks (what run_sweep checks first)."""
    specs = check_config(cfg)
    check_sweep_lineage(cfg, specs)
    return len(specs)

SMALL = {"train_per_family": 3, "test_per_family": 2, "generalize_per_family": 2}


def _trajectories(env, tasks, split="train"):
    out = []
    for t in tasks:
        n = len(t.reference_plan)
        out.append(Trajectory(f"{t.task_id}|0", "babyai", split, t.task_id, t.instruction, env.reset(t, 0).text,
                              tuple(t.reference_plan), (True,) * n, (0.0,) * (n - 1) + (1.0,), True))
    return out


def _config(tmp_path, env: dict, planner: dict, out: str = "out") -> EvalConfig:
    return EvalConfig.model_validate({"name": "lineage", "env": env, "planners": [planner], "seeds": [0],
                                      "output_dir": str(tmp_path / out)})


def test_prompt_lineage_reads_every_example_block():
    from groundplan.planners.saycan import load_prompt

    text = load_prompt("saycanpay_babyai")
    lineage = prompt_lineage("prompt saycanpay_babyai", text)
    goals = [line[len("[Goal] "):] for line in text.splitlines() if line.startswith("[Goal] ")]
    inits = [line[len("[Initial State] "):] for line in text.splitlines() if line.startswith("[Initial State] ")]
    assert len(goals) == len(inits) == len(lineage.examples) >= 3
    assert [e.signature for e in lineage.examples] == [visible_signature(g, o) for g, o in zip(goals, inits)]
    assert {e.role for e in lineage.examples} == {"prompt"}
    assert prompt_lineage("x", "Human: how would you?\nRobot: 1. done").examples == []  # another format


def test_training_lineage_lists_each_train_and_validation_task(tmp_path):
    """build_examples's lineage holds every trajectory's task under the side it was used on, keyed by
    what the model read (goal and first observation), and survives a save and load."""
    import yaml

    from groundplan.grounding.canpay.config import TrainConfig
    from groundplan.grounding.canpay.data import read_trajectories
    from groundplan.pipelines.train.canpay import build_examples
    from tests.kitchen_data import collect_kitchen

    data = collect_kitchen(tmp_path, seeds=[0], splits=("train",))
    raw = yaml.safe_load(open("configs/train_can_kitchen.yaml").read())
    cfg = TrainConfig(**{**raw, "data": [str(data)], "max_trajectories": None})
    _, _, counts, lineage = build_examples(cfg)
    trajs = read_trajectories([str(data)], env="kitchen", split="train")
    by_role = {r: {e.signature for e in lineage.examples if e.role == r} for r in ("train", "validation")}
    assert len({e.task_id for e in lineage.examples if e.role == "validation"}) == counts["val_tasks"]
    assert by_role["train"] and by_role["validation"] and not by_role["train"] & by_role["validation"]
    assert {visible_signature(t.goal, t.init_obs) for t in trajs} == by_role["train"] | by_role["validation"]
    save_lineage(tmp_path, lineage)
    assert load_lineage(tmp_path, "m").by_signature().keys() == lineage.by_signature().keys()


def test_a_model_trained_further_keeps_its_bases_tasks_and_train_outranks_validation():
    """What the weights have read is both runs' tasks: a task either run trained on stays train, so a
    selection sweep cannot treat it as validation; the validation tasks of both stay validation."""
    def ex(role, name):
        return Example(role, name, f"sig {name}", f"instr {name}")

    base = Lineage("models:/say-x/1", [ex("train", "a"), ex("validation", "b"), ex("validation", "c")])
    new = Lineage("models:/say-x/2", [ex("train", "b"), ex("train", "d"), ex("validation", "e")])
    got = inherit(new, base)
    assert got.source == "models:/say-x/2"
    assert {e.task_id: e.role for e in got.examples} == {"a": "train", "b": "train", "c": "validation",
                                                          "d": "train", "e": "validation"}
    assert len(got.examples) == 5  # b once, as train
    assert got.by_signature()["sig b"].role == got.by_instruction()["instr b"].role == "train"
    with pytest.raises(ValueError, match="goal view"):
        inherit(new, Lineage("models:/say-x/1", [], goal_view="other"))


@pytest.fixture
def babyai_model(tiny_encoder, tmp_path):
    """A saved (untrained) Can model folder; its lineage is written by each test."""
    pytest.importorskip("minigrid")
    from groundplan.grounding.canpay.config import CanPayModelConfig
    from groundplan.grounding.canpay.model import CanPayModel

    return CanPayModel(CanPayModelConfig(kind="can", encoder=tiny_encoder, max_length=64)).save(tmp_path / "can")


def _scp_planner(model_folder) -> dict:
    return {"name": "saycanpay", "label": "GA-SC",
            "options": {"prompt": "saycanpay_babyai", "done_skill": "done picking up", "decoding": "greedy_action",
                        "score": "saycan"},
            "affordance": "saycanpay_learned", "affordance_options": {"can_model": str(model_folder), "device": "cpu"}}


def test_evaluation_refuses_a_test_set_the_model_was_trained_on(babyai_model, tmp_path):
    make = ENVS.get("babyai")
    train_env, test_env = make(**SMALL, split="train"), make(**SMALL, split="test")
    cfg = _config(tmp_path, {"name": "babyai", "options": {**SMALL, "split": "test"}}, _scp_planner(babyai_model))

    # the lineage of a model trained on the train split: the test split is unseen, the config runs
    save_lineage(babyai_model, trajectories_lineage("can", {"train": _trajectories(train_env, train_env.tasks())}))
    assert checked(cfg) == len(test_env.tasks())

    # broken on purpose: the model's validation data held two test tasks
    leaked = test_env.tasks()[:2]
    save_lineage(babyai_model, trajectories_lineage("can", {
        "train": _trajectories(train_env, train_env.tasks()),
        "validation": _trajectories(test_env, leaked, split="test")}))
    broken = _config(tmp_path, {"name": "babyai", "options": {**SMALL, "split": "test"}}, _scp_planner(babyai_model),
                     out="broken")
    with pytest.raises(LineageError) as err:
        run_sweep(broken, progress=False)
    message = str(err.value)
    assert "planner 'GA-SC': 2 test task(s)" in message and str(babyai_model) in message
    assert all(f"{t.task_id} (= validation {t.task_id})" in message for t in leaked)
    assert not list(broken.run_dir.iterdir())  # refused before the run folder holds a config or a trace


def test_a_selection_sweep_may_run_on_the_models_validation_tasks_never_on_its_train_tasks(babyai_model, tmp_path):
    """``select_on`` chooses settings on held-out tasks: a model's validation tasks are what they were held out
    for, so the selection sweep's check allows them; a train task stays refused there, and a test sweep refuses
    both."""
    make = ENVS.get("babyai")
    train_env, test_env = make(**SMALL, split="train"), make(**SMALL, split="test")
    held, trained = test_env.tasks()[:2], train_env.tasks()
    save_lineage(babyai_model, trajectories_lineage("can", {
        "train": _trajectories(train_env, trained), "validation": _trajectories(test_env, held, split="test")}))
    cfg = _config(tmp_path, {"name": "babyai", "options": {**SMALL, "split": "test"}}, _scp_planner(babyai_model))
    cfg = cfg.model_copy(update={"tasks": cfg.tasks.model_copy(update={"ids": [t.task_id for t in held]})})
    specs = check_config(cfg)
    assert check_sweep_lineage(cfg, specs, allow_roles=("validation",)) >= 1  # checked, and no refusal
    with pytest.raises(LineageError, match="= validation"):
        check_sweep_lineage(cfg, specs)
    on_train = _config(tmp_path, {"name": "babyai", "options": {**SMALL, "split": "train"}}, _scp_planner(babyai_model))
    with pytest.raises(LineageError, match="= train"):
        check_sweep_lineage(on_train, check_config(on_train), allow_roles=("validation",))


def test_evaluation_refuses_a_model_without_lineage(babyai_model, tmp_path):
    (babyai_model / LINEAGE_FILE).unlink(missing_ok=True)
    cfg = _config(tmp_path, {"name": "babyai", "options": {**SMALL, "split": "test"}}, _scp_planner(babyai_model))
    with pytest.raises(LineageError, match="carries no lineage"):
        checked(cfg)


def test_a_prompt_example_with_a_test_instruction_is_refused_in_virtualhome(tmp_path):
    """VirtualHome is split by task name: a prompt whose example names a test task is refused, whatever
    its initial state says."""
    pytest.importorskip("virtualhome_eval")
    test_names = ENVS.get("virtualhome_scp")().test_names()
    prompt = tmp_path / "prompt.txt"
    prompt.write_text(f"[Goal] {test_names[0].upper()}\n[Initial State] Somewhere else entirely.\n"
                      "[Step 1] walk to bathroom\n[Step 2] done\n")
    planner = {"name": "saycanpay", "label": "GA-Say",
               "options": {"prompt": str(prompt), "decoding": "greedy_action", "score": "say"}}
    cfg = _config(tmp_path, {"name": "virtualhome_scp", "options": {}}, planner)
    with pytest.raises(LineageError, match="share their instruction with prompt"):
        checked(cfg)
    shipped = _config(tmp_path, {"name": "virtualhome_scp", "options": {}},
                      {**planner, "options": {**planner["options"], "prompt": "saycanpay_virtualhome"}})
    assert checked(shipped)


def test_shipped_saycanpay_configs_evaluate_on_their_collection_split():
    """Every SayCanPay eval config that loads trained models draws its env with the options of the
    collection those models were trained on, so its lineage check compares like with like."""
    import yaml

    for env in ("babyai", "hanoi", "blocks", "virtualhome"):
        evaluation = yaml.safe_load(open(f"configs/saycanpay_{env}.yaml").read())
        collect = yaml.safe_load(open(f"configs/collect_{'blocks_bowls' if env == 'blocks' else env}.yaml").read())
        assert evaluation["env"] == collect["env"], env
        data = {yaml.safe_load(open(f"configs/train_{k}_{env}.yaml").read())["data"][0] for k in ("can", "pay")}
        assert data == {f"{collect['output_dir']}/data"}, env


@pytest.mark.parametrize("env", ["babyai", "hanoi", "blocks", "virtualhome", "kitchen"])
def test_shipped_prompts_share_no_task_with_their_test_split(env, tmp_path):
    """The shipped SayCanPay configs' prompt-only rows pass the lineage check on their own test split
    (the learned rows need trained models, which CI does not have)."""
    import yaml

    pytest.importorskip({"babyai": "minigrid", "virtualhome": "virtualhome_eval"}.get(env, "pybullet"))
    raw = yaml.safe_load(open(f"configs/saycanpay_{env}.yaml").read())
    raw["planners"] = [p for p in raw["planners"] if "affordance" not in p and not p["options"].get("perfect_say")]
    raw["output_dir"] = str(tmp_path)
    cfg = EvalConfig.model_validate(raw)
    from groundplan.pipelines.evaluate.lineage import check_lineage
    from groundplan.factory import make_env
    from groundplan.pipelines.evaluate.sweep import select_tasks

    made = make_env(cfg.env)
    tasks = select_tasks(made, cfg)
    assert tasks and check_lineage(cfg, tasks, made) == len(raw["planners"])


def test_a_grounding_model_split_like_the_say_model_validates_on_its_validation_tasks(tmp_path):
    """split_like: the reference model's validation tasks (with their whole task groups) are this model's
    validation and nothing else is, so the planner's options can be searched on them with both models."""
    import yaml

    from groundplan.core.errors import InvalidInputError
    from groundplan.grounding.canpay.config import TrainConfig
    from groundplan.grounding.canpay.data import read_trajectories
    from groundplan.pipelines.train.canpay import build_examples, reference_lineage
    from tests.kitchen_data import collect_kitchen

    data = collect_kitchen(tmp_path, seeds=[0, 1], splits=("train",))
    trajs = read_trajectories([str(data)], env="kitchen", split="train")
    chosen = {trajs[0].task_id, trajs[-1].task_id}
    say = Lineage("models:/say-kitchen/1", [Example("validation", t, f"sig {t}", f"instr {t}") for t in chosen])
    (tmp_path / "say").mkdir()
    save_lineage(tmp_path / "say", say)
    raw = yaml.safe_load(open("configs/train_can_kitchen.yaml").read())
    cfg = TrainConfig(**{**raw, "data": [str(data)], "max_trajectories": None, "split_like": str(tmp_path / "say")})
    _, _, counts, lineage = build_examples(cfg, reference=reference_lineage(cfg, None))
    val = {e.task_id for e in lineage.examples if e.role == "validation"}
    assert val == chosen and counts["val_trajectories"] == sum(t.task_id in chosen for t in trajs) == 4
    assert not val & {e.task_id for e in lineage.examples if e.role == "train"}
    with pytest.raises(InvalidInputError, match="carries no lineage"):
        reference_lineage(cfg.model_copy(update={"split_like": str(tmp_path)}), None)
    stranger = Lineage("models:/say-x/1", [Example("validation", "nowhere", "s", "i")])
    with pytest.raises(InvalidInputError, match="none of the"):
        build_examples(cfg, reference=stranger)
