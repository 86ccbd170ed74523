"""Chaos: faults change nothing. A kitchen sweep with the real embedded model runs through Ray twice,
clean and with ``benchmarks/chaos.py``'s fault injector SIGKILLing episode runners and the LLM scorer
(their processes, found through Ray's actor table); the faulty run records every episode exactly once,
without error, with the clean run's chosen skills, outcomes and scores (within the Ray path's golden
tolerance). A ``groundplan eval`` driver SIGKILLed mid-sweep and run again resumes to the same traces.

The CI form is small (12 episodes of at most 2 steps, 4 kills: runner, scorer, runner, scorer); the driver
kill on that form and the full form (30 episodes, a kill every 4 s until the end, the driver kill) are the
slow tests, the latter the command in docs/fault-tolerance.md.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from groundplan.factory import make_env
from groundplan.pipelines.evaluate.sweep import expand, run_sweep
from groundplan.rollout.traces import read_traces

ray = pytest.importorskip("ray")
ROOT = Path(__file__).resolve().parents[1]

#: 2 instructions x 3 seeds x (SayCan, No-VF) = 12 episodes of at most 2 steps, on 3 runners. The seeds of an
#: instruction share most prompts (No-VF's are the same), so the score memo keeps the model's work small. One
#: torch thread in the scorer: beside Ray's own processes, the runners and the driver on 2 cores, two intra-op
#: threads stall on each other (a clean sweep of this form took 124 s with two, 46 s with one, on this machine)
CI_FORM = {"families": ["nl_single_primitive", "nl_nouns"], "per_family": 1, "seeds": [0, 1, 2], "max_steps": 2,
           "workers": 3, "scorer_threads": 1}


@pytest.fixture(scope="module")
def overrides(chaos) -> list[str]:
    return chaos.sweep_overrides(**CI_FORM)


@pytest.fixture(scope="module")
def clean(chaos, overrides, ray_local, tmp_path_factory):
    """The sweep without faults, on the same Ray, and its episode ids."""
    cfg = chaos.sweep_config(overrides, tmp_path_factory.mktemp("clean"))
    wanted = [s.episode_id for s in expand(cfg, make_env(cfg.env))]
    assert len(wanted) == 12
    result = run_sweep(cfg, progress=False, resume=False)
    assert chaos.exactly_once(cfg.run_dir / "traces.jsonl", wanted) == []
    assert [t.error for t in result.traces if t.error] == []
    return result, wanted


def test_sigkilled_runners_and_scorer_change_no_episode(chaos, overrides, clean, tmp_path):
    clean_result, wanted = clean
    cfg = chaos.sweep_config(overrides, tmp_path)
    traces = cfg.run_dir / "traces.jsonl"
    injector = chaos.FaultInjector(interval_s=1.5, scorer_kills=2, max_faults=4, seed=0,
                                   progress=lambda: chaos.recorded_episodes(traces), echo=print)
    with injector:
        result = run_sweep(cfg, progress=False, resume=False)
    print(f"faults landed: {len(injector.landed)} of {len(injector.faults)} tried; "
          f"episodes rerun: {result.stats['episode_reruns']} {result.stats['rerun_episodes']}")

    # the faults happened: every planned kill found its actor alive and Ray saw the process die
    assert [f.target for f in injector.landed] == ["runner", "scorer", "runner", "scorer"]
    assert len({f.pid for f in injector.landed if f.target == "scorer"}) == 2  # the restarted scorer died too
    assert result.stats["episode_reruns"] >= 1 and result.stats["failed_after_retries"] == 0
    # and changed nothing
    assert chaos.exactly_once(traces, wanted) == []
    assert [t.error for t in result.traces if t.error] == []
    assert chaos.compare_traces(clean_result.traces, result.traces) == []


@pytest.mark.slow
def test_a_sigkilled_driver_resumes_to_the_clean_traces(chaos, overrides, clean, tmp_path):
    """``groundplan eval`` (joining this test's Ray, as a job on a cluster would) is SIGKILLed once 3
    episodes are recorded; the same command again skips those and runs the rest. Slow (two model loads in
    subprocesses, about 40 s): CI's chaos form is the actor kills above; in-process resume is tested in
    ``test_distributed_eval.py``, and the full form below kills its driver too."""
    clean_result, wanted = clean
    cmd = chaos.eval_command(overrides, tmp_path, ray.get_runtime_context().gcs_address)
    traces = tmp_path / "saycan_kitchen" / "traces.jsonl"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    killed = chaos.kill_driver_and_resume(cmd, traces, after=3, log_path=tmp_path / "killed_driver.log", env=env)
    print(f"driver killed with {killed.recorded_at_kill} episode(s) recorded; rerun exit status {killed.rc}")

    assert killed.killed and 3 <= killed.recorded_at_kill < len(wanted), (tmp_path / "killed_driver.log").read_text()
    assert killed.rc == 0, killed.output
    # resumed: the episodes recorded before the kill were not run again (they would be in the file twice)
    # and none is lost
    assert chaos.exactly_once(traces, wanted) == []
    assert chaos.compare_traces(clean_result.traces, list(read_traces(traces))) == []


@pytest.mark.slow
def test_full_chaos_command(tmp_path):
    """The documented full form: 30 episodes, a runner kill every 4 s until the end, the scorer twice, and a
    driver kill; the command exits 0 only when everything equals the clean run."""
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "chaos.py"), "--dashboard", "--kill-driver-after",
                          "10", "--output", str(tmp_path), "--no-progress"], capture_output=True, text=True,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    print(out.stdout[-6000:])
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-4000:]
    result = next(line for line in out.stdout.splitlines() if line.startswith("result:"))
    fields = dict(item.split("=") for item in result.split()[1:])
    assert int(fields["episodes"]) == 30 and fields["equal"] == "yes" and fields["exactly_once"] == "yes"
    assert int(fields["scorer_faults"]) >= 2 and int(fields["faults"]) >= 6 and int(fields["reruns"]) >= 1
