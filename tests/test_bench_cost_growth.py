"""bench_cost_growth: the FLOP count, the growth figure, the table and plot drawn from its data, and
docs/performance.md's block re-rendered from the committed data file (no model runs here)."""
from __future__ import annotations

import json

import pytest

SHAPE = {"body": 1000, "layers": 2, "attn": 8, "hidden": 8, "vocab": 100}


@pytest.fixture
def bench(load_benchmark):
    return load_benchmark("bench_cost_growth")


def test_flops_count_the_weights_the_attention_and_the_logits(bench):
    # one 2-token option after a 10-token cached prompt: 2 tokens x 2P, attention at positions 10 and 11
    # (4 L d c each), and 2 logit rows (2 d V each)
    assert bench.flops(SHAPE, 10, [2], cold=False) == 2 * 2000 + 4 * 2 * 8 * (10 + 11) + 2 * 2 * 8 * 100
    # cold adds the prompt: 10 tokens x 2P, causal attention over positions 0..9, and its last logit
    extra = 10 * 2000 + 4 * 2 * 8 * sum(range(10)) + 2 * 8 * 100
    assert bench.flops(SHAPE, 10, [2], cold=True) == bench.flops(SHAPE, 10, [2], cold=False) + extra


def test_options_cost_more_after_a_longer_prompt_only_through_attention(bench):
    short, long = bench.flops(SHAPE, 10, [3] * 5, False), bench.flops(SHAPE, 1000, [3] * 5, False)
    assert long - short == pytest.approx(4 * 2 * 8 * 990 * 15)


def _data():
    points = [{"curve": "options", "prompt_tokens": 1000, "options": n, "option_tokens": 6 * n, "cold": False,
               "gflop": 0.8 * n, "seconds": {"groundplan": 0.01 * n, "llama.cpp": 0.03 * n * (n / 51) ** 0.5}}
              for n in (51, 250)]
    points += [{"curve": "prompt", "prompt_tokens": t, "options": 51, "option_tokens": 300, "cold": True,
                "gflop": 0.3 * t, "seconds": {"groundplan": 0.001 * t, "llama.cpp": 0.002 * t}} for t in (500, 1000)]
    return {"model": "m", "threads": 2, "machine": "cpu", "load_start": 0.1, "sides": ["groundplan", "llama.cpp"],
            "points": points}


def test_growth_is_one_for_a_side_whose_seconds_follow_the_flops(bench):
    data = _data()
    opts = [p for p in data["points"] if p["curve"] == "options"]
    assert bench.growth(opts, "groundplan") == pytest.approx(1.0)
    assert bench.growth(opts, "llama.cpp") == pytest.approx((250 / 51) ** 0.5)
    table = bench.render_markdown(data)
    assert "| options (warm) | 1000 | 51 (306) | 40.8 | 0.510 | 80.0 |" in table
    assert "(1.00 of the FLOPs' growth)" in table and "(2.21 of the FLOPs' growth)" in table


def test_the_plot_is_drawn_from_the_data(bench, tmp_path):
    path = bench.plot(_data(), tmp_path / "growth.png")
    assert path.stat().st_size > 10_000


def test_the_performance_page_block_is_what_its_committed_data_renders(bench):
    text = bench.PAGE.read_text(encoding="utf-8")
    assert "<!-- cost-growth: " in text
    assert bench.render_page(write=False) == text
    data = json.loads(bench.DATA.read_text(encoding="utf-8"))
    assert {p["curve"] for p in data["points"]} == {"options", "prompt"}
