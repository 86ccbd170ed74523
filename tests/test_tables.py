"""``groundplan tables RUN...``: each run gets the table its config declares (SayCanPay's for SayCanPay
planners, SayNav's for the house env, else the summary with its paired tests), and a folder that is not
a run, or runs needing different tables, are refused with a clear message."""
from __future__ import annotations

import json

import pytest

from groundplan.cli import main
from groundplan.core.errors import InvalidInputError
from groundplan.evaluation.tables import run_tables, table_kind
from groundplan.rollout.traces import EpisodeTrace, StepTrace


def _run(folder, env: str, planners: list[dict], traces: list[EpisodeTrace]):
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"env": {"name": env}, "planners": planners}))
    (folder / "traces.jsonl").write_text("".join(t.to_json() + "\n" for t in traces))
    return folder


def _trace(planner: str, env: str, task: str, ok: bool, **metrics) -> EpisodeTrace:
    return EpisodeTrace(f"{planner}-{task}", planner, env, task, "fam", "do it", 0, "fake",
                        steps=[StepTrace(0, "done", True)], execution_success=ok, metrics=metrics)


def test_the_table_is_the_one_the_run_declares():
    assert table_kind({"env": {"name": "babyai"}, "planners": [{"name": "saycanpay"}]}) == "saycanpay"
    assert table_kind({"env": {"name": "house"}, "planners": [{"name": "saynav"}]}) == "saynav"
    assert table_kind({"env": {"name": "kitchen"}, "planners": [{"name": "saycan"}]}) == "summary"
    # a benchmark env's own table, whatever the planners (EAI's leaderboard holds SayCanPay's rows too)
    assert table_kind({"env": {"name": "virtualhome_eai"}, "planners": [{"name": "saycan"}, {"name": "saycanpay"}]}) == "eai"


def test_a_kitchen_run_gets_the_summary_with_holm_adjusted_paired_tests(tmp_path, capsys):
    traces = [_trace(p, "kitchen", f"kitchen/nl_nouns/0{k}", ok=(p == "SayCan" or k == 0))
              for p in ("SayCan", "No-VF") for k in range(3)]
    run = _run(tmp_path / "k", "kitchen", [{"name": "saycan", "label": "SayCan"}, {"name": "saycan_novf",
                                                                                   "label": "No-VF"}], traces)
    assert main(["tables", str(run)]) == 0
    out = capsys.readouterr().out
    assert "SayCan" in out and "No-VF" in out and "100%" in out
    assert "SayCan vs No-VF on execution_success (n=3 shared episodes): only-SayCan 2 / only-No-VF 0" in out
    assert "Holm p=" in out


def test_a_house_run_gets_the_multion_table(tmp_path):
    traces = [_trace(p, "house", f"house/h{k}", ok=True, sr=1.0, spl=0.5) for p in ("SayNav", "Explore (no LLM)")
              for k in range(2)]
    _run(tmp_path / "out" / "saynav_house", "house", [{"name": "saynav"}], traces)
    out = run_tables([tmp_path / "out"])  # groundplan eval's --output folder: the run inside it
    assert "SPL" in out and "SayNav vs Explore (no LLM) (n=2 paired houses)" in out


def test_not_a_run_and_mixed_kinds_are_refused(tmp_path):
    with pytest.raises(InvalidInputError, match="is not a run folder"):
        run_tables([tmp_path])
    k = _run(tmp_path / "k", "kitchen", [{"name": "saycan"}], [_trace("SayCan", "kitchen", "t", True)])
    h = _run(tmp_path / "h", "house", [{"name": "saynav"}], [_trace("SayNav", "house", "t", True, sr=1.0, spl=1.0)])
    with pytest.raises(InvalidInputError, match="need different tables"):
        run_tables([k, h])


def test_cost_effectiveness_reads_the_experts_of_the_runs_own_draw(tmp_path):
    """A task id names another task in a draw of other sizes, so SayCanPay's cost-effectiveness (and the
    exported outcomes) read the expert plans of the env the run built, with its options; the default
    draw's experts, read before, would disagree with this draw's on some of these tasks."""
    pytest.importorskip("pybullet")
    from groundplan.evaluation.outcomes import export_outcomes
    from groundplan.factory import build_env

    options = {"train_size": 12, "test_size": 6, "generalize_size": 2}
    tasks = build_env("blocks_bowls", options).tasks()
    default = {t.task_id: t.reference_plan for t in build_env("blocks_bowls", None).tasks()}
    assert any(default.get(t.task_id) != t.reference_plan for t in tasks)
    traces = [EpisodeTrace(f"GT-{t.task_id}", "GT", "blocks_bowls", t.task_id, t.family, t.instruction, 0, "fake",
                           steps=[StepTrace(i, a, a == "done") for i, a in enumerate([*t.reference_plan, "done"])],
                           execution_success=True) for t in tasks]
    run = _run(tmp_path / "b", "blocks_bowls", [{"name": "saycanpay", "label": "GT"}], traces)
    config = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps({**config, "env": {"name": "blocks_bowls", "options": options}}))
    assert "| GT | 6 | 100% [61, 100] | 100% [61, 100] |" in run_tables([run])
    episodes = export_outcomes([run])["episodes"]
    assert [e["cost_effective"] for e in episodes] == [1.0] * 6
    assert [e["length"] for e in episodes] == [len([a for a in t.reference_plan if a != "done"]) for t in tasks]
