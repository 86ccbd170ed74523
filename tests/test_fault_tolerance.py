"""Fault tolerance: kill sim workers and the scorer mid-sweep (``ray.kill(handle, no_restart=False)``);
the sweep still records every episode exactly once, with no error caused by the kills."""
from __future__ import annotations

from collections import Counter

import pytest
from groundplan.pipelines.sweep import expand, run_sweep

from groundplan.config import EvalConfig
from groundplan.factory import make_env
from groundplan.rollout.traces import read_traces
from tests.fakes import slow_lm

ray = pytest.importorskip("ray")



def _cfg(tmp_path) -> EvalConfig:
    return EvalConfig.model_validate({
        "name": "ft",
        "planners": [{"name": "saycan", "label": "SayCan", "affordance": "kitchen_value"}, {"name": "saycan_novf", "label": "No-VF"}],
        "tasks": {"families": ["nl_single_primitive", "nl_nouns", "structured"], "per_family": 2},
        "seeds": [0, 1],
        "max_steps": 6,
        "output_dir": str(tmp_path),
        "runtime": {"workers": 3, "mlflow": False},
    })


def _check_exactly_once(cfg: EvalConfig, result) -> None:
    wanted = sorted(s.episode_id for s in expand(cfg, make_env(cfg.env)))
    ids = Counter(t.episode_id for t in read_traces(cfg.run_dir / "traces.jsonl"))
    assert sorted(ids) == wanted and set(ids.values()) == {1}
    assert sorted(t.episode_id for t in result.traces) == wanted
    assert [t.error for t in result.traces if t.error] == []


def test_killed_episode_runners_rerun_their_episodes(tmp_path, ray_local):
    cfg = _cfg(tmp_path)
    killed = []

    def kill_runners(trace, ctx):
        if not killed:  # the other lanes' runners are mid-episode now
            killed.extend(ctx["runners"])
            for w in ctx["runners"]:
                ray.kill(w, no_restart=False)

    result = run_sweep(cfg, lm_factory=slow_lm, progress=False, on_episode=kill_runners)
    assert killed and result.stats["episode_reruns"] >= 1
    _check_exactly_once(cfg, result)


def test_killed_scorer_is_restarted_and_requests_retried(tmp_path, ray_local):
    cfg = _cfg(tmp_path)
    done = []

    def kill_scorer(trace, ctx):
        done.append(trace.episode_id)
        if len(done) == 3:
            ray.kill(ctx["scorers"][0], no_restart=False)

    result = run_sweep(cfg, lm_factory=slow_lm, progress=False, on_episode=kill_scorer)
    assert len(done) == 24
    # the restarted scorer starts counting afresh: it saw fewer requests than the whole sweep made
    _check_exactly_once(cfg, result)
