"""bench_train_precision: the figures recomputed from its data file and the plot drawn from it; the committed
data's result line is the one docs/results/say.md quotes (no model runs here)."""
from __future__ import annotations

import json

import pytest


@pytest.fixture
def bench(load_benchmark):
    return load_benchmark("bench_train_precision")


def _data():
    return {"examples_file": "x.json", "model": "m", "decisions": 8, "validation_decisions": 4, "tokens_per_epoch": 1000,
            "steps_per_epoch": 2, "torch_threads": 2,
            "sides": {"float32": {"train_losses": [2.0, 1.5, 1.2, 1.0], "epoch_s": [4.0, 4.4], "val_losses": [2.1, 1.6, 1.3]},
                      "bfloat16": {"train_losses": [2.0, 1.6, 1.2, 1.1], "epoch_s": [2.0, 2.0], "val_losses": [2.1, 1.62, 1.33]}}}


def test_the_figures_are_recomputed_from_the_data(bench):
    s = bench.summary(_data())
    assert s["speedup"] == pytest.approx((2.0 * 2.2) ** 0.5, abs=1e-3)
    assert s["float32_tok_s"] == pytest.approx(1000 / 4.2, abs=0.1) and s["bfloat16_tok_s"] == 500.0
    assert s["val_gap"] == pytest.approx(0.03) and s["epochs"] == 2


def test_the_plot_is_drawn_from_the_data(bench, tmp_path):
    assert bench.plot(_data(), tmp_path / "p.png").stat().st_size > 10_000


def test_the_say_page_quotes_the_committed_data(bench):
    from benchmarks.harness import result_line

    data = json.loads(bench.DATA.read_text(encoding="utf-8"))
    line = result_line(bench.summary(data))
    assert line in (bench.ROOT / "docs" / "results" / "say.md").read_text(encoding="utf-8")
