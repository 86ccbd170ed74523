"""bench_tabletop's measurement: workers behind one barrier, one shared window, so the throughput it
reports is of workers running together, not of each alone."""
from __future__ import annotations

import pytest

pytest.importorskip("pybullet")


@pytest.fixture
def bench(load_benchmark):
    return load_benchmark("bench_tabletop")


def test_two_workers_are_timed_over_one_window(bench):
    out = bench.measure(2, 1)
    assert out.totals["pickplace"] == 2  # both workers' pick-and-places, over the window from first start to last end
    assert out.window_s > 0 and out.rate("pickplace") == pytest.approx(2 / out.window_s)
    assert 0 <= out.start_skew_s <= out.window_s  # both started inside the window (after the barrier)
    one = bench.measure(1, 1)  # the baseline: the same code path, one fresh process
    assert one.totals["pickplace"] == 1 and one.start_skew_s == 0


def test_a_worker_that_dies_stops_the_measurement(bench):
    with pytest.raises(RuntimeError, match="worker 0 failed: TypeError"):
        bench.measure(1, "not a count")  # the worker raises in range(n), after the barrier
