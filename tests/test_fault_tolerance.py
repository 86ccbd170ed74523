"""Fault tolerance: kill sim workers (``ray.kill(handle, no_restart=False)``) and the scorer process
(SIGKILL) mid-sweep; the sweep still records every episode exactly once, with no error caused by the
kills."""
from __future__ import annotations

from collections import Counter

import pytest

from groundplan.config import EvalConfig
from groundplan.factory import make_env
from groundplan.pipelines.evaluate.sweep import expand, run_sweep
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
    """The gate holds score requests inside the scorer; the scorer process is SIGKILLed with them pending;
    Ray restarts it and resends them (max_task_retries), so every episode is still recorded once, with no
    error and no rerun."""
    import functools
    import os
    import signal
    import threading
    import time

    gate = tmp_path / "gate"
    gate.mkdir()
    (gate / "closed").touch()  # the scorer answers its first 3 calls, then holds the rest
    cfg = _cfg(tmp_path)
    # no score memo: memo hits never reach the gated model
    cfg = cfg.model_copy(update={"runtime": cfg.runtime.model_copy(update={"memo_size": 0})})
    killed: list[int] = []
    pids: list[int] = []
    stop = threading.Event()

    def kill_at_the_gate() -> None:
        while not (gate / "waiting").exists() and not stop.is_set():
            time.sleep(0.01)
        if stop.is_set():
            return
        pid = int((gate / "waiting").read_text())
        killed.append(pid)
        os.kill(pid, signal.SIGKILL)
        (gate / "closed").unlink()  # the restarted scorer answers the resent requests

    def note_the_answering_scorer(trace, ctx):
        if killed and not pids:  # the first episode after the kill: a new process answers
            # Ray may not know of the death yet: a call sent at once can still go to the dead process's slot
            deadline = time.monotonic() + 60
            pid = ray.get(ctx["scorers"][0].stats.remote())["pid"]
            while pid == killed[0] and time.monotonic() < deadline:
                time.sleep(0.2)
                pid = ray.get(ctx["scorers"][0].stats.remote())["pid"]
            pids.append(pid)

    killer = threading.Thread(target=kill_at_the_gate, daemon=True)
    killer.start()
    try:
        result = run_sweep(cfg, lm_factory=functools.partial(GatedLM, str(gate)), progress=False,
                           on_episode=note_the_answering_scorer)
    finally:
        stop.set()
        killer.join()
    assert killed, "no score request reached the closed gate"
    _check_exactly_once(cfg, result)
    assert result.stats["episode_reruns"] == 0  # pending requests were resent, no episode had to rerun
    assert pids and pids[0] != killed[0]  # Ray restarted the scorer
