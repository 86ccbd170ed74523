"""Online self-improvement (``groundplan improve``): the config refuses an oracle in the loop, kept episodes are
the env's successes replayed into the collect schema, the stop rule reads validation success, and a tiny
random Llama runs a round end to end (rollouts, data, Ray Train, registry, validation and test), resuming
after a failure without rolling out again and doing nothing when run once more."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from groundplan.core.errors import InvalidInputError

pytest.importorskip("minigrid")

from tests.conftest import BABYAI_SMALL as SMALL  # noqa: E402
SCP = {"prompt": "saycanpay_babyai_plain", "done_skill": "done picking up", "decoding": "greedy_action", "score": "say"}


def improve_config(out: Path, **kw):
    from groundplan.pipelines.improve.config import ImproveConfig

    doc = {"name": "improve-test", "env": {"name": "babyai", "options": SMALL},
           "planner": {"name": "saycanpay", "label": "GA-Say", "options": SCP},
           "rollout_planner": {"name": "saycanpay", "label": "GA-Say sampled",
                               "options": {**SCP, "sample_temperature": 1.0}},
           "tasks": {"per_family": 2}, "validation_fraction": 0.25, "rollout_seeds": [0],
           "test_tasks": {"per_family": 1}, "rounds": 1, "max_steps": 4,
           "train": {"epochs": 1, "batch_size": 2, "max_length": 256, "lr": 1e-3},
           "runtime": {"executor": "local", "mlflow": False}, "output_dir": str(out)}
    doc.update(kw)
    return ImproveConfig.model_validate(doc)


@pytest.mark.parametrize("change, words", [
    ({"env": {"name": "babyai", "options": {"split": "test"}}}, "train split"),
    ({"test_split": "train"}, "held out"),
    ({"train": {"name": "x"}}, "set by each round"),
    ({"train": {"epochs": 0}}, "epochs"),
    ({"rollout_planner": {"name": "saycanpay", "label": "P", "options": {**SCP, "perfect_say": True, "oracle": True}}},
     "no expert and no oracle"),
    ({"planner": {"name": "house_explore"}}, "declares no prompt format"),
])
def test_bad_configs_are_refused_when_they_load(tmp_path, change, words):
    with pytest.raises(ValidationError, match=words):
        improve_config(tmp_path, **change)


def test_sampling_is_greedy_action_only_and_seeded():
    from groundplan.planners.saycanpay import SayCanPayConfig

    with pytest.raises(ValidationError, match="greedy_action"):
        SayCanPayConfig(**{**SCP, "decoding": "beam_action", "sample_temperature": 1.0})


def test_validation_tasks_are_held_out_by_what_the_model_reads(tmp_path):
    from groundplan.pipelines.improve.rounds import _signature, split_tasks

    rollout, val = split_tasks(improve_config(tmp_path))
    assert len(rollout) + len(val) == 8 and val and rollout
    assert {_signature(t) for t in rollout}.isdisjoint({_signature(t) for t in val})
    assert split_tasks(improve_config(tmp_path)) == (rollout, val)  # deterministic


def test_the_stop_rule_reads_validation_success(tmp_path):
    from groundplan.pipelines.improve.rounds import _stop_reason

    cfg = improve_config(tmp_path, rounds=5, patience=1)
    v = lambda x: {"rate": x}  # noqa: E731
    assert _stop_reason(cfg, [{"round": 0, "validation": v(0.1)}, {"round": 1, "validation": v(0.2)}]) is None
    reason = _stop_reason(cfg, [{"round": 0, "validation": v(0.1)}, {"round": 1, "validation": v(0.1)}])
    assert reason is not None and "round 0" in reason  # a tie is not a rise
    assert "5 round" in _stop_reason(cfg, [{"round": 5, "validation": v(0.9)}])
    assert _stop_reason(cfg, [{"round": 1, "stopped": "nothing to learn from"}]) == "nothing to learn from"


def test_kept_episodes_are_successes_replayed_into_the_collect_schema(tmp_path):
    """A successful episode becomes a row with what each step showed, ending with the done step where the
    goal first held (an episode that went on past it, or never said done, is cut there); a failed one is
    not kept; a stored one is not stored twice."""
    from groundplan.datasets.store import load_trajectories
    from groundplan.envs.base import opened
    from groundplan.envs.experts import EXPERTS
    from groundplan.factory import build_env
    from groundplan.pipelines.improve.rounds import keep
    from groundplan.rollout.episode import run_episode
    from groundplan.rollout.traces import StepTrace
    from groundplan.rollout.trajectory import ExpertPlanner

    cfg = improve_config(tmp_path)
    with opened(build_env("babyai", {**SMALL, "split": "train"})) as env:
        task = env.tasks()[0]
        expert = ExpertPlanner(EXPERTS.get("babyai")(env), env.done_skill)
        good = run_episode(expert, env, task, 0, max_steps=30, episode_id="good")
    assert good.execution_success and good.steps[-1].done
    played = [s.chosen for s in good.steps[:-1]]
    failed = type(good)(**{**good.__dict__, "episode_id": "failed", "execution_success": False})
    out = keep(cfg, 1, [good, failed], tmp_path / "data")
    assert out == {"episodes": 2, "kept": 1, "stored": 1, "trimmed": 0, "kept_tasks": 1}
    rows = load_trajectories(tmp_path / "data").to_pylist()
    assert len(rows) == 1 and rows[0]["success"] and rows[0]["source"] == "improve-r1"
    assert rows[0]["actions"] == played + [env.done_skill]
    assert rows[0]["init_obs"] and all(rows[0]["admissible"])
    assert keep(cfg, 1, [good], tmp_path / "data")["stored"] == 1
    assert len(load_trajectories(tmp_path / "data").to_pylist()) == 1
    # went on after the goal held (a step that fails changes nothing) and never said done: cut at the goal
    on = [StepTrace(index=i, chosen=a, done=False) for i, a in enumerate(played + ["juggle the fridge"] * 3)]
    overshoot = type(good)(**{**good.__dict__, "episode_id": "on", "steps": on})
    out = keep(cfg, 2, [overshoot], tmp_path / "data2")
    assert out["stored"] == 1 and out["trimmed"] == 1
    assert load_trajectories(tmp_path / "data2").to_pylist()[0]["actions"] == played + [env.done_skill]


def test_a_round_runs_end_to_end_and_resumes_without_rolling_out_again(babyai_data, tmp_path, monkeypatch):
    import groundplan.pipelines.train.say as say
    from groundplan.pipelines.improve.report import plot_rounds, round_table
    from groundplan.pipelines.improve.rounds import STATE_FILE, run_dir, run_improve
    from tests.conftest import tiny_llama_lm

    tiny_llama_lm(tmp_path / "tiny", seed=3)
    cfg = improve_config(tmp_path, base_model=str(tmp_path / "tiny"), expert_data=[babyai_data])
    real = say.run_train_say

    def killed(*a, **k):
        raise RuntimeError("killed during training")

    monkeypatch.setattr(say, "run_train_say", killed)
    with pytest.raises(RuntimeError, match="killed"):
        run_improve(cfg, progress=False)
    rollouts = run_dir(cfg) / "round-1" / "rollouts" / "traces.jsonl"
    first = rollouts.read_text()
    state = json.loads((run_dir(cfg) / STATE_FILE).read_text())
    assert [r["round"] for r in state["rounds"]] == [0, 1] and "test" in state["rounds"][0]
    monkeypatch.setattr(say, "run_train_say", real)

    state = run_improve(cfg, progress=False)
    assert rollouts.read_text() == first  # resumed: no episode rolled out twice
    r0, r1 = state["rounds"]
    assert r1["model"] == "models:/improve-test/1" and r1["rollout_model"] == str(tmp_path / "tiny")
    assert r1["rollouts"]["n"] == len(state["tasks"]["rollout"]) and r1["kept"]["episodes"] == r1["rollouts"]["n"]
    assert r1["train"]["counts"]["train_rows"] > 0 and "eval_loss" in r1["train"]["metrics"]
    for rec in (r0, r1):
        assert rec["validation"]["n"] == len(state["tasks"]["validation"]) and rec["test"]["n"] == 4
    assert "1 round(s) ran" in state["stopped"]
    lineage = json.loads((run_dir(cfg) / "round-1" / "train" / "improve-test" / "model" / "lineage.json").read_text())
    seen = {e["task_id"] for e in lineage["examples"]}
    assert seen and seen.isdisjoint(state["tasks"]["validation"])  # validation tasks never trained on
    again = run_improve(cfg, progress=False)  # finished: nothing new
    assert again["rounds"] == state["rounds"]
    from mlflow import MlflowClient

    from groundplan.pipelines.improve.rounds import tracking_uri_of

    assert len(MlflowClient(tracking_uri_of(cfg)).search_model_versions("name='improve-test'")) == 1
    table = round_table(state)
    assert "| 1 | `models:/improve-test/1` |" in table and "Stopped" in table
    assert plot_rounds(state, tmp_path / "rounds.png").stat().st_size > 1000
    with pytest.raises(InvalidInputError, match="another config"):
        run_improve(improve_config(tmp_path, base_model=str(tmp_path / "tiny"), expert_data=[babyai_data],
                                   rollout_seeds=[0, 1]), progress=False)
