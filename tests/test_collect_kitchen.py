"""The kitchen through ``groundplan collect``: SayCanPay's kitchen split (tasks 00-07 of each family train,
08-11 test) drawn by the env, the reference plans replayed in the language mode, a store that the Can/Pay
reader and the prompt examples find."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

from groundplan.core.errors import InvalidInputError
from groundplan.datasets import TRAJECTORY_SCHEMA, load_trajectories, prompt_examples
from groundplan.envs.kitchen import TASKS, KitchenEnv, kitchen_split

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "collect_kitchen.yaml"


def test_the_env_draws_each_split():
    train, test = KitchenEnv(split="train").tasks(), KitchenEnv(split="test").tasks()
    assert len(train) == 56 and len(test) == 28 and len(KitchenEnv().tasks()) == len(TASKS) == 84
    assert all(int(t.task_id[-2:]) < 8 for t in train) and all(int(t.task_id[-2:]) >= 8 for t in test)
    assert {kitchen_split(t.task_id) for t in test} == {"test"}
    assert KitchenEnv(split="test").tasks(["long_horizon"]) == [t for t in test if t.family == "long_horizon"]
    with pytest.raises(InvalidInputError, match="split"):
        KitchenEnv(split="test-generalize")


def test_the_shipped_config_plans_280_train_and_140_test_trajectories():
    from groundplan.pipelines.collect.collect import plan_items
    from groundplan.pipelines.collect.config import load_collect_config

    cfg = load_collect_config(CONFIG)
    assert cfg.env.options == {"mode": "language"}
    assert Counter(item.split for item in plan_items(cfg)) == {"train": 280, "test": 140}


def test_groundplan_collect_writes_a_store_the_readers_find(tmp_path, capsys):
    from groundplan.cli import main
    from groundplan.grounding.canpay.data import read_trajectories

    out = tmp_path / "kitchen"
    args = ["collect", str(CONFIG), "--no-progress"]
    for override in ("seeds=[3]", f"output_dir={out}", "runtime.executor=local", "runtime.mlflow=false"):
        args += ["--set", override]
    assert main(args) == 0, capsys.readouterr()
    table = load_trajectories(out / "data")
    assert table.schema.equals(TRAJECTORY_SCHEMA) and table.schema.field("rewards").type == pa.list_(pa.float64())
    rows = table.to_pylist()
    assert Counter(r["split"] for r in rows) == {"train": 56, "test": 28}
    for split in ("train", "test"):
        assert {r["task_id"] for r in rows if r["split"] == split} == {t.task_id for t in KitchenEnv(split=split).tasks()}
    plans = {t.task_id: list(t.reference_plan) for t in TASKS}
    for r in rows:
        assert r["actions"] == plans[r["task_id"]] and r["actions"][-1] == "done" and all(r["feasible"])
        assert r["success"] and r["rewards"] == [0.0] * (len(r["actions"]) - 1) + [1.0]
        assert r["source"] == "reference_plan" and r["observations"][0] == r["init_obs"]
    assert len(prompt_examples(out / "data", env="kitchen")) == 56  # expert rows of the train split
    assert len(read_trajectories([str(out / "data")], env="kitchen", split="train")) == 56


def test_groundplan_prompt_writes_the_few_shot_prompt_from_train_trajectories(tmp_path, capsys):
    """SayCanPay App. A.1's prompt: `groundplan prompt DATA ENV OUT` (the configs' headers give the command)."""
    from groundplan.cli import main
    from tests.kitchen_data import collect_kitchen

    data = collect_kitchen(tmp_path / "kitchen", seeds=(0,), splits=("train",))
    out = tmp_path / "prompt.txt"
    assert main(["prompt", str(data), "kitchen", str(out), "--examples", "2"]) == 0
    text = out.read_text()
    assert text.count("[Goal]") == 2 and text.count("[Initial State]") == 2 and "[Step 1]" in text
    goals = [line.removeprefix("[Goal] ") for line in text.splitlines() if line.startswith("[Goal]")]
    train_goals = {t.instruction for t in KitchenEnv(split="train").tasks()}
    assert set(goals) <= train_goals and len(set(goals)) == 2  # distinct goals, train tasks only
    capsys.readouterr()
    assert main(["prompt", str(data), "babyai", str(tmp_path / "none.txt")]) == 2  # no such trajectories
    assert "collect them first" in capsys.readouterr().out and not (tmp_path / "none.txt").exists()
