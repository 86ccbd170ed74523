"""The README's two set-up commands are the ones CI and users run."""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ci_runs_the_readme_test_command():
    ci = [l for l in (ROOT / ".ci" / "run").read_text().splitlines() if l.startswith("python3 -m venv")]
    assert len(ci) == 1
    assert ci[0] in (ROOT / "README.md").read_text()


def test_readme_main_job_runs_the_shipped_config():
    readme = (ROOT / "README.md").read_text()
    assert "groundplan eval configs/saycan_kitchen.yaml" in readme
    assert (ROOT / "configs" / "saycan_kitchen.yaml").exists()
