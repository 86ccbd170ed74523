"""Fault tolerance: kill sim workers and the scorer mid-sweep (``ray.kill(handle, no_restart=False)``);
the sweep still records every episode exactly once, with no error caused by the kills."""
from __future__ import annotations

from collections import Counter

import pytest

from groundplan.config import EvalConfig
from groundplan.factory import make_env
from groundplan.pipelines.sweep import expand, run_sweep
from groundplan.rollout.traces import read_traces
from tests.fakes import GatedLM, slow_lm

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


def test_scorer_killed_with_requests_pending_is_restarted_and_they_are_answered(tmp_path, ray_local):
    """The gate holds score requests inside the scorer; the scorer dies with them pending; Ray restarts it
    and resends them (max_task_retries), so every episode is still recorded once, with no error."""
    import functools
    import time

    gate = tmp_path / "gate"
    gate.mkdir()
    cfg = _cfg(tmp_path)
    # no score memo: seeds of a task ask for the same scores, and memo hits never reach the gated model,
    # so whether a request arrives at the closed gate would depend on which episodes are in flight
    # and twice the episodes in flight that the workers play: the hook blocks the driver, so episodes
    # queued at the actors must still be there to send the request that reaches the closed gate
    cfg = cfg.model_copy(update={"runtime": cfg.runtime.model_copy(update={"memo_size": 0, "in_flight": 6})})
    killed, pids = [], []

    def kill_scorer_mid_request(trace, ctx):
        if killed:
            if len(pids) == 1:  # the next episode: the scorer that answers is a new process
                # ray.kill is asynchronous: a call sent at once may still reach the dying process
                deadline = time.monotonic() + 60
                pid = ray.get(ctx["scorers"][0].stats.remote())["pid"]
                while pid == pids[0] and time.monotonic() < deadline:
                    time.sleep(0.2)
                    pid = ray.get(ctx["scorers"][0].stats.remote())["pid"]
                pids.append(pid)
            return
        (gate / "closed").touch()
        deadline = time.monotonic() + 60
        while not (gate / "waiting").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert (gate / "waiting").exists(), "no score request reached the closed gate"
        scorer = ctx["scorers"][0]
        pids.append(ray.get(scorer.stats.remote())["pid"])
        killed.append(scorer)
        ray.kill(scorer, no_restart=False)
        (gate / "closed").unlink()  # the restarted scorer answers the resent requests

    factory = functools.partial(GatedLM, str(gate))
    result = run_sweep(cfg, lm_factory=factory, progress=False, on_episode=kill_scorer_mid_request)
    assert killed
    _check_exactly_once(cfg, result)
    assert result.stats["episode_reruns"] == 0  # pending requests were resent, no episode had to rerun
    assert len(pids) == 2 and pids[0] != pids[1]  # Ray restarted the scorer
