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
