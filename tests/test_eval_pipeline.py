"""The evaluation pipeline with a fake LM: every episode persisted once, resume, summary from traces."""
from __future__ import annotations

import json

import pytest

from groundplan.config import EvalConfig
from groundplan.core.errors import InvalidInputError
from groundplan.factory import make_env
from groundplan.evaluation.summary import summarize
from groundplan.pipelines.evaluate.sweep import expand, run_sweep
from groundplan.rollout.traces import read_traces
from tests.fakes import FakeLM, small_kitchen_config


def _cfg(tmp_path, **kw) -> EvalConfig:
    return small_kitchen_config(tmp_path, name="t", **kw)


def test_sweep_writes_each_episode_once_and_resumes(tmp_path):
    cfg = _cfg(tmp_path)
    lm = FakeLM()
    first = run_sweep(cfg, lm=lm, progress=False)
    n = 2 * 2 * 2 * 2  # planners x families x per_family x seeds
    assert len(first.traces) == n and first.skipped == 0
    calls = len(lm.score_calls)
    again = run_sweep(cfg, lm=lm, progress=False)
    assert again.skipped == n and len(lm.score_calls) == calls  # nothing re-run
    ids = [t.episode_id for t in read_traces(cfg.run_dir / "traces.jsonl")]
    assert len(ids) == len(set(ids)) == n
    saved = json.loads((cfg.run_dir / "summary.json").read_text())["rows"]
    assert {r["planner"] for r in saved} == {"SayCan", "No-VF"}


def test_interrupted_sweep_finishes_the_rest(tmp_path):
    cfg = _cfg(tmp_path)
    path = cfg.run_dir / "traces.jsonl"
    run_sweep(cfg.model_copy(update={"seeds": [0]}), lm=FakeLM(), progress=False)  # a "partial" earlier run
    with path.open("a") as f:
        f.write('{"torn": ')  # a crash mid-write leaves a torn line
    result = run_sweep(cfg, lm=FakeLM(), progress=False)
    assert result.skipped == 8 and len(result.traces) == 16


def test_summary_counts_match_traces(tmp_path):
    result = run_sweep(_cfg(tmp_path), lm=FakeLM(), progress=False)
    rows = summarize(result.traces)
    for r in rows:
        ts = [t for t in result.traces if t.planner == r.planner and (r.family == "all" or t.family == r.family)]
        assert r.episodes == len(ts)
        assert r.execution_success == sum(t.execution_success for t in ts) / len(ts)


def test_expand_and_bad_selection(tmp_path):
    cfg = _cfg(tmp_path)
    specs = expand(cfg, make_env(cfg.env))
    assert len(specs) == 16 and len({s.episode_id for s in specs}) == 16
    bad = _cfg(tmp_path, tasks={"families": ["nl_nounz"]})
    with pytest.raises(InvalidInputError, match="valid: nl_single_primitive"):
        expand(bad, make_env(bad.env))


def test_grid_sweep_reports_each_grids_best_variant(tmp_path):
    cfg = _cfg(tmp_path, planners=[
        {"name": "saycan", "label": "SayCan", "affordance": "kitchen_value", "grid": {"use_affordance": [False, True]}},
        {"name": "saycan_novf", "label": "No-VF"},
    ], select_by=["execution_success"])
    result = run_sweep(cfg, lm=FakeLM(), progress=False)
    overall = {r.planner: r.execution_success for r in result.summary if r.family == "all"}
    variants = cfg.grids["SayCan"]
    assert set(overall) == {*variants, "No-VF"}
    best = max(variants, key=lambda v: overall[v])  # max keeps the first on ties, as the selection does
    assert list(result.best) == ["SayCan"] and result.best["SayCan"].planner == best
    saved = json.loads((cfg.run_dir / "grid_selection.json").read_text())
    assert saved == {"select_by": ["execution_success"], "best": {"SayCan": best}}


def test_select_best_sums_the_ranking_metrics():
    from groundplan.evaluation.summary import ALL, SummaryRow, select_best

    def row(planner, family=ALL, **metrics):
        return SummaryRow(planner, "virtualhome", family, 8, None, 0.25, 5.0, 0, metrics)

    rows = [row("T [e=0]", executability=0.1, lcs=0.3), row("T [e=0.4]", executability=0.3, lcs=0.2),
            row("T [e=0.8]", executability=0.4, lcs=0.0), row("T [e=0.8]", family="Drink", executability=1.0, lcs=1.0),
            row("V [t=1]", executability=0.0, lcs=0.1), row("V [t=2]", executability=0.1, lcs=0.0)]
    grids = {"T": ["T [e=0]", "T [e=0.4]", "T [e=0.8]"], "V": ["V [t=1]", "V [t=2]"], "unrun": ["U [x=1]"]}
    best = select_best(rows, grids, ["executability", "lcs"])
    assert {g: r.planner for g, r in best.items()} == {"T": "T [e=0.4]", "V": "V [t=1]"}  # a tie keeps the first
    assert best["T"].family == ALL
    assert select_best(rows, grids, ["execution_success"])["T"].planner == "T [e=0]"
    # a tie-break ranks after select_by, never adds to it: T's best stays e=0.4, V's tie goes to t=2's executability
    tied = select_best(rows, grids, ["executability", "lcs"], ["executability"])
    assert {g: r.planner for g, r in tied.items()} == {"T": "T [e=0.4]", "V": "V [t=2]"}
    assert select_best(rows, grids, ["execution_success"], ["lcs"])["T"].planner == "T [e=0]"  # lcs 0.3 breaks the tie
    with pytest.raises(InvalidInputError, match=r"unknown metrics \['lsc'\]"):
        select_best(rows, grids, ["lcs"], ["lsc"])
    with pytest.raises(InvalidInputError, match=r"unknown metrics \['executabilty'\]; this sweep has: .*executability"):
        select_best(rows, grids, ["executabilty", "lcs"])


def test_method_rows_put_each_grid_at_its_best_variant():
    from groundplan.evaluation.summary import ALL, SummaryRow, method_rows

    def row(planner, lcs):
        return SummaryRow(planner, "virtualhome", ALL, 8, None, 0.0, 5.0, 0, {"lcs": lcs})

    rows = [row("V [t=1]", 0.1), row("V [t=2]", 0.3), row("SayCan", 0.2)]
    labels = [("V [t=1]", "V"), ("V [t=2]", "V"), ("SayCan", None)]
    out = method_rows(rows, labels, {"V": rows[1]})
    assert [(r.planner, r.metrics["lcs"]) for r in out] == [("V", 0.3), ("SayCan", 0.2)]
    assert rows[1].planner == "V [t=2]"  # the summary's own rows are not renamed


def test_a_grid_chosen_on_other_tasks_runs_only_its_best_variant_on_its_own(tmp_path):
    """``select_on``: every variant runs on the train tasks first (a run folder of its own), then only the
    best one, beside the planners outside the grid, on the config's test tasks; the record says where."""
    grid = [{"name": "saycan", "label": "SayCan", "affordance": "kitchen_value", "grid": {"use_affordance": [False, True]}},
            {"name": "saycan_novf", "label": "No-VF"}]
    cfg = _cfg(tmp_path, env={"name": "kitchen", "options": {"split": "test"}}, planners=grid,
               select_by=["execution_success"], select_on={"split": "train"})
    result = run_sweep(cfg, lm=FakeLM(), progress=False)
    chosen = read_traces(tmp_path / "t-selection" / "traces.jsonl")
    overall = {r.planner: r.execution_success for r in summarize(chosen) if r.family == "all"}
    best = max(cfg.grids["SayCan"], key=lambda v: overall[v])
    train_ids = {t.task_id for t in make_env(cfg.env.model_copy(update={"options": {"split": "train"}})).tasks()}
    assert {t.task_id for t in chosen} <= train_ids and set(overall) == set(cfg.grids["SayCan"])  # the grid alone
    assert {t.planner for t in result.traces} == {best, "No-VF"}  # the other variant never meets a test task
    assert not {t.task_id for t in result.traces} & train_ids
    saved = json.loads((cfg.run_dir / "grid_selection.json").read_text())
    assert saved["selected_on"] == {"split": "train"} and saved["best"] == {"SayCan": best}
    assert saved["selection_run"].endswith("t-selection")
    with pytest.raises(ValueError, match="select_on chooses among a planner grid"):
        _cfg(tmp_path, select_on={"split": "train"})
    with pytest.raises(ValueError, match="changes no env option"):
        _cfg(tmp_path, env={"name": "kitchen", "options": {"split": "test"}}, planners=grid, select_on={"split": "test"})
