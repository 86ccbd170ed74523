"""docs/results/improve.md's per-round tables are what its committed run files (docs/results/data/improve/)
render to, and their plots render from them."""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "results" / "improve.md"
DATA = ROOT / "docs" / "results" / "data" / "improve"


def test_the_page_is_rendered_from_the_committed_runs(tmp_path):
    from groundplan.pipelines.improve.report import render_page

    states = sorted(DATA.glob("*.json"))
    assert states, f"no committed improve runs under {DATA}"
    copy = tmp_path / "improve.md"
    copy.write_text(PAGE.read_text())
    assert render_page(copy, states, tmp_path / "figures") == PAGE.read_text(), (
        "docs/results/improve.md differs from its data: python -m groundplan.pipelines.improve.report "
        "docs/results/improve.md docs/results/figures docs/results/data/improve/*.json")
    for s in states:
        assert (tmp_path / "figures" / f"{s.stem}.png").stat().st_size > 1000
