"""The evaluation pipeline with a fake LM: every episode persisted once, resume, summary from traces."""
from __future__ import annotations

import json

import pytest

from groundplan.config import EvalConfig
from groundplan.errors import InvalidInputError
from groundplan.pipelines.evaluate import expand, make_env, run_eval
from groundplan.pipelines.summary import summarize
from groundplan.traces import read_traces
from tests.fakes import FakeLM, small_kitchen_config


def _cfg(tmp_path, **kw) -> EvalConfig:
    return small_kitchen_config(tmp_path, name="t", **kw)


def test_sweep_writes_each_episode_once_and_resumes(tmp_path):
    cfg = _cfg(tmp_path)
    lm = FakeLM()
    first = run_eval(cfg, lm=lm, progress=False)
    n = 2 * 2 * 2 * 2  # planners x families x per_family x seeds
    assert len(first.traces) == n and first.skipped == 0
    calls = len(lm.score_calls)
    again = run_eval(cfg, lm=lm, progress=False)
    assert again.skipped == n and len(lm.score_calls) == calls  # nothing re-run
    ids = [t.episode_id for t in read_traces(cfg.run_dir / "traces.jsonl")]
    assert len(ids) == len(set(ids)) == n
    saved = json.loads((cfg.run_dir / "summary.json").read_text())
    assert {r["planner"] for r in saved} == {"SayCan", "No-VF"}


def test_interrupted_sweep_finishes_the_rest(tmp_path):
    cfg = _cfg(tmp_path)
    path = cfg.run_dir / "traces.jsonl"
    run_eval(cfg.model_copy(update={"seeds": [0]}), lm=FakeLM(), progress=False)  # a "partial" earlier run
    with path.open("a") as f:
        f.write('{"torn": ')  # a crash mid-write leaves a torn line
    result = run_eval(cfg, lm=FakeLM(), progress=False)
    assert result.skipped == 8 and len(result.traces) == 16


def test_summary_counts_match_traces(tmp_path):
    result = run_eval(_cfg(tmp_path), lm=FakeLM(), progress=False)
    rows = summarize(result.traces)
    for r in rows:
        ts = [t for t in result.traces if t.planner == r.planner and (r.family == "all" or t.family == r.family)]
        assert r.episodes == len(ts)
        assert r.execution_success == sum(t.execution_success for t in ts) / len(ts)


def test_expand_and_bad_selection(tmp_path):
    cfg = _cfg(tmp_path)
    specs = expand(cfg, make_env(cfg))
    assert len(specs) == 16 and len({s.episode_id for s in specs}) == 16
    bad = _cfg(tmp_path, tasks={"families": ["nl_nounz"]})
    with pytest.raises(InvalidInputError, match="valid: nl_single_primitive"):
        expand(bad, make_env(bad))
