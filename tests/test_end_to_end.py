"""End to end with the real embedded model: one SayCan episode, the CLI, and (slow) the quick eval."""
from __future__ import annotations

import math

import pytest

from groundplan.cli import main
from groundplan.config import PlannerSpec
from groundplan.envs import ENVS
from groundplan.envs.kitchen import task_by_id
from groundplan.factory import make_planner
from groundplan.rollout.episode import run_episode
from groundplan.rollout.traces import read_traces


def test_saycan_episode_with_the_embedded_model(lm):
    env = ENVS.get("kitchen")()
    task = task_by_id("kitchen/nl_single_primitive/00")
    planner = make_planner(PlannerSpec(name="saycan", affordance="kitchen_value"), lm, max_steps=5)
    trace = run_episode(planner, env, task, seed=0, max_steps=5)
    assert trace.error is None
    assert 1 <= len(trace.steps) <= 5
    first = trace.steps[0]
    assert len(first.candidates) == len(env.skills) >= 50
    best = max(first.candidates, key=lambda c: c.combined)
    assert best.skill == first.chosen
    for c in first.candidates:
        if c.extra.get("pruned"):  # exact pruning: even with log p_LLM = 0 it could not have won
            assert c.llm is None and (c.affordance == 0 or math.log(c.affordance) < best.combined)
            continue
        expected = c.llm + (math.log(c.affordance) if c.affordance > 0 else -math.inf)
        assert c.combined == pytest.approx(expected)
    # an affordance of zero is never executed: the planner only chose feasible-looking skills
    for s in trace.steps:
        chosen = next(c for c in s.candidates if c.skill == s.chosen)
        assert chosen.affordance > 0


def test_cli_plan_prints_steps_and_writes_chart(tmp_path, capsys):
    chart = tmp_path / "plan.png"
    assert main(["plan", "--env", "kitchen", "--max-steps", "3", "--chart", str(chart), "How would you bring me a coke can?"]) == 0
    out = capsys.readouterr().out
    assert "step 1:" in out and "affordance" in out and "Robot: 1." in out
    assert chart.exists() and chart.stat().st_size > 1000


def test_cli_refuses_empty_instruction(capsys):
    assert main(["plan", "   "]) == 2
    assert "instruction is empty" in capsys.readouterr().out


def test_cli_unknown_env_lists_valid(capsys):
    assert main(["plan", "--env", "kitchn", "hi"]) == 2
    out = capsys.readouterr().out
    assert "unknown env 'kitchn'" in out and "kitchen" in out


def test_cli_eval_tiny(tmp_path, capsys):
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(
        "name: tiny\nplanners:\n  - {name: saycan, label: SayCan, affordance: kitchen_value}\n"
        "  - {name: generative, label: Generative}\n"
        f"tasks: {{families: [nl_single_primitive], per_family: 1}}\nmax_steps: 3\noutput_dir: {tmp_path}\n"
    )
    assert main(["eval", str(cfg), "--no-progress", "--local"]) == 0
    out = capsys.readouterr().out
    assert "nl_single_primitive" in out and "SayCan" in out and "Generative" in out
    traces = list(read_traces(tmp_path / "tiny" / "traces.jsonl"))
    assert len(traces) == 2 and all(t.error is None for t in traces)
    assert main(["report", str(tmp_path / "tiny")]) == 0
    index = (tmp_path / "tiny" / "report" / "index.html").read_text()
    assert "SayCan" in index and "Generative" in index


def test_cli_report_needs_a_run_folder(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    assert "no traces.jsonl" in capsys.readouterr().out


@pytest.mark.slow
def test_quick_kitchen_eval_saycan_beats_novf(tmp_path):
    from groundplan.config import load_config
    from groundplan.pipelines.evaluate.sweep import run_sweep

    cfg = load_config("configs/saycan_kitchen.yaml", [f"output_dir={tmp_path}", "runtime.executor=local",
                                                       "runtime.mlflow=false"])
    result = run_sweep(cfg, progress=False)
    overall = {r.planner: r for r in result.summary if r.family == "all"}
    assert overall["SayCan"].plan_success > overall["No-VF"].plan_success


def test_cli_list_options_shows_every_plugin_option(capsys):
    assert main(["list", "--options"]) == 0
    out = capsys.readouterr().out
    for needle in ("planner 'saycan' options", "llm_score", "env 'kitchen' options", "nav_failure_prob",
                   "affordance 'kitchen_value' options", "LLM backend 'hf' options", "prefix_cache_mb", "measure lcs"):
        assert needle in out, needle


def test_cli_refuses_bad_plan_flags_before_loading_the_model(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["plan", "--top", "-1", "bring me a coke"])
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["plan", "--chart", str(blocker / "x.png"), "bring me a coke"]) == 2
    assert "cannot write" in capsys.readouterr().out
