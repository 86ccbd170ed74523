"""The precision check: how a decision is re-decided, the default's rule, and docs/models.md's block re-rendered
from its committed data."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from groundplan.evaluation.precision import (
    check,
    decide,
    from_json,
    passes,
    render_markdown,
    render_page,
    summarise,
    to_json,
)

ROOT = Path(__file__).resolve().parents[1]


def test_saycan_decides_by_llm_plus_log_affordance_and_zero_affordance_cannot_win():
    # LLM alone picks option 0; the affordance moves the decision to option 1 (log 0.9 - log 0.1 > 1)
    assert decide([-1.0, -2.0], None) == (0, pytest.approx(1.0))
    best, gap = decide([-1.0, -2.0], [0.1, 0.9])
    assert best == 1 and gap == pytest.approx(-2.0 + math.log(0.9) - (-1.0 + math.log(0.1)))
    assert decide([-0.1, -5.0], [0.0, 0.5])[0] == 1
    assert decide([-3.0], None) == (0, math.inf)


def test_ties_go_to_the_first_option_as_the_planner_breaks_them():
    assert decide([-1.0, -1.0, -2.0], None) == (0, 0.0)


def _checks(change_gap: float):
    same = check("bfloat16", "SayCan", "e0", 0, ["a", "b"], [-1.0, -3.0], [-1.1, -2.9], None)
    # float32 prefers "a" by change_gap; the other precision flips it
    flipped = check("bfloat16", "No-VF", "e1", 2, ["a", "b"], [-1.0, -1.0 - change_gap], [-1.2, -1.0], None)
    return [same, flipped]


def test_the_default_rule_fails_only_on_a_change_above_the_gap_threshold():
    near_tie = summarise(_checks(0.05))
    assert near_tie[("bfloat16", "all")]["changed"] == 1 and passes(near_tie, "bfloat16")
    clear = summarise(_checks(0.5))
    assert clear[("bfloat16", "all")]["changed_above_threshold"] == 1 and not passes(clear, "bfloat16")
    assert clear[("bfloat16", "No-VF")]["changed_gaps"] == [0.5]
    assert clear[("bfloat16", "all")]["max_abs_dlogp"] == pytest.approx(0.5)
    assert list(clear) == [("bfloat16", "SayCan"), ("bfloat16", "No-VF"), ("bfloat16", "all")]


def test_rows_round_trip_through_the_data_file_with_an_infinite_gap():
    checks = _checks(0.5) + [check("bfloat16", "SayCan", "e2", 0, ["done"], [-0.5], [-0.6], None)]
    back = from_json(to_json(checks))
    assert [c.gap for c in back] == [pytest.approx(c.gap) for c in checks]
    assert "| bfloat16 | all | 3 (3) | 1 |" in render_markdown({"decisions": to_json(checks)})


def test_the_models_page_block_is_what_its_committed_data_renders():
    page = ROOT / "docs" / "models.md"
    assert "<!-- precision: " in page.read_text(encoding="utf-8")
    assert render_page(page, write=False) == page.read_text(encoding="utf-8")


def test_groundplan_tables_render_rewrites_a_precision_block_and_refuses_a_page_without_blocks(tmp_path, capsys):
    from groundplan.cli import main

    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "p.json").write_text(json.dumps({"decisions": to_json(_checks(0.5))}))
    page = tmp_path / "page.md"
    page.write_text("# p\n\n<!-- precision: data/p.json -->\nstale\n<!-- /precision -->\n")
    assert main(["tables", "--render", str(page)]) == 0
    text = page.read_text()
    assert "stale" not in text and "| bfloat16 | all | 2 (2) | 1 | 0.50 | 1 of 2 |" in text
    (tmp_path / "bare.md").write_text("# nothing to render\n")
    assert main(["tables", "--render", str(tmp_path / "bare.md")]) == 2
    assert "holds no block" in " ".join(capsys.readouterr().out.split())
