"""bench_vs_peer: the colab peer's LLM_CACHE, and the smallest run's result line (fake model)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes import FakeLM

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def bench(load_benchmark):
    return load_benchmark("bench_vs_peer")


def test_colab_cache_serves_a_repeated_call_without_the_model(bench):
    inner = FakeLM()
    peer = bench.ColabLM(inner)
    first = peer.score("Robot: 1.", [" done", " find an apple"])
    assert len(inner.score_calls) == 1  # every option in one call
    again = peer.score("Robot: 1.", [" done", " find an apple"])
    assert again is first and len(inner.score_calls) == 1 and (peer.hits, peer.calls) == (1, 2)
    peer.score("Robot: 1.", [" find an apple", " done"])  # another query string: another call, as in the colab
    assert len(inner.score_calls) == 2
    key = next(iter(peer.cache))
    assert key == ("fake-lm", "Robot: 1. doneRobot: 1. find an apple", 0, 0, 1, True)  # gpt3_call's key


def test_smallest_run_prints_the_result_line():
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GROUNDPLAN_PLUGINS": "tests.fake_backend"}
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_vs_peer.py"), "--backend", "fake_slow",
                          "--rounds", "2", "--seeds", "0", "--max-steps", "2"],
                         cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    last = out.stdout.strip().splitlines()[-1]
    assert last.startswith("result: ")
    fields = dict(kv.split("=", 1) for kv in last[len("result: "):].split())
    assert list(fields) == ["ratio", "ratio_lo", "ratio_hi", "peer_cache"] and fields["peer_cache"] == "on"
    ratio, lo, hi = (float(fields[k]) for k in ("ratio", "ratio_lo", "ratio_hi"))
    assert 0 < lo <= ratio <= hi
    assert "same plan in 2/2 episodes" in out.stderr  # both sides ran the same episodes to the same plans
