"""The benchmarks' shared harness: the ratio interval, the result line and its JSON copy."""
from __future__ import annotations

import json
import math

import pytest


@pytest.fixture
def harness(load_benchmark):
    return load_benchmark("harness")


def test_log_interval_brackets_the_geometric_mean(harness):
    ratio, lo, hi = harness.log_interval([2.0, 8.0])
    assert ratio == pytest.approx(4.0) and lo < ratio < hi
    # df = 1: half-width t(1) * stdev(log 2, log 8) / sqrt(2) = 12.706 * log 2 on the log scale
    assert math.log(hi / ratio) == pytest.approx(12.706 * math.log(2.0))
    assert math.log(ratio / lo) == pytest.approx(12.706 * math.log(2.0))
    one = harness.log_interval([3.0])
    assert one[0] == pytest.approx(3.0) and math.isnan(one[1]) and math.isnan(one[2])


def test_t95_uses_the_smaller_df_between_entries(harness):
    assert harness.t95(11) == harness.T95[10] and harness.t95(500) == harness.T95[120] and math.isnan(harness.t95(0))


def test_percentile_is_the_nearest_rank(harness):
    xs = list(range(101))
    assert harness.percentile(xs, 0.99) == 99 and harness.percentile(xs, 0.5) == 50 and harness.percentile([7], 0.99) == 7


def test_report_prints_the_line_and_appends_json(harness, tmp_path, monkeypatch, capsys):
    out = tmp_path / "bench.jsonl"
    monkeypatch.setenv(harness.JSON_ENV, str(out))
    line = harness.report({"ratio": "1.04", "options": 51})
    harness.report({"ratio": "0.90", "options": 8})
    assert line == "result: ratio=1.04 options=51"
    assert capsys.readouterr().out.splitlines() == [line, "result: ratio=0.90 options=8"]
    records = [json.loads(x) for x in out.read_text().splitlines()]
    assert [(r["ratio"], r["options"]) for r in records] == [("1.04", 51), ("0.90", 8)]
    assert all("benchmark" in r and "time" in r and len(r["load_average"]) == 3 and r["cpus"] >= 1 for r in records)


def test_result_keys_must_be_single_words(harness):
    with pytest.raises(ValueError, match="single words"):
        harness.result_line({"two words": 1})
    with pytest.raises(ValueError):
        harness.result_line({"a=b": 1})


def _sleepy_setup(rank: int, seconds: float):
    """A worker whose work takes ``seconds`` and counts one item (module level: spawned processes import it)."""
    import time as _time

    def work():
        _time.sleep(seconds)
        return {"items": 1, "ranks": [rank]}

    return work


def _failing_setup(rank: int):
    if rank == 1:
        raise ValueError("no env for rank 1")
    return lambda: {"items": 1}


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_parallel_work_is_timed_over_one_shared_window(harness, mode):
    """Two workers that each work 0.3 s at once: the window is about 0.3 s, not the 0.6 s a sum of
    per-worker times would give, so the rate is the rate of both together."""
    w = harness.run_in_window(_sleepy_setup, [(0, 0.3), (1, 0.3)], mode=mode)
    assert w.totals == {"items": 2, "ranks": [0, 1]}
    assert 0.3 <= w.window_s < 0.6 and 0 <= w.start_skew_s < w.window_s
    assert w.rate("items") == pytest.approx(2 / w.window_s) and w.rate("ranks") == w.rate("items")


def test_a_failing_worker_is_named_and_stops_the_others(harness):
    """Rank 1 fails in its set-up: rank 0, waiting at the barrier, is released (the barrier breaks)
    and the run raises with the failing rank's error instead of hanging."""
    with pytest.raises(RuntimeError, match="worker 1 failed: ValueError: no env for rank 1"):
        harness.run_in_window(_failing_setup, [(0,), (1,)], mode="thread")


def test_alternating_rounds_flip_the_order(harness):
    calls = []
    out = harness.alternating({"a": lambda: calls.append("a") or 1, "b": lambda: calls.append("b") or 2}, 3)
    assert calls == ["a", "b", "b", "a", "a", "b"] and out == {"a": [1, 1, 1], "b": [2, 2, 2]}
    with pytest.raises(ValueError):
        harness.alternating({"a": lambda: 1}, 0)


def test_timed_is_the_median_after_untimed_warmups_with_sync_around_each_call(harness):
    events, durations = [], iter([0.0, 0.0, 0.05, 0.0, 0.0])  # warm-up, then repeats: one slow outlier

    def fn():
        events.append("call")
        import time as _time

        _time.sleep(next(durations))

    t = harness.timed(fn, 3, warmup=1, sync=lambda: events.append("sync"))
    assert t < 0.05  # the median ignores the one slow call
    assert events == ["call"] + ["sync", "call", "sync"] * 3  # no sync around the warm-up; one before and after each timed call
    with pytest.raises(ValueError):
        harness.timed(fn, 0)
