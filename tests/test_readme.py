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


def test_every_relative_link_in_the_docs_points_to_a_file():
    """README.md and docs/**/*.md link each other and their pictures by relative paths; a moved page must
    not leave a dead link behind."""
    import re

    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "cluster").rglob("*.md"))]
    dead = []
    for page in pages:
        text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)  # code blocks hold no links
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            if not (page.parent / target.split("#", 1)[0]).exists():
                dead.append(f"{page.relative_to(ROOT)} -> {target}")
    assert dead == []


def test_readme_shows_the_main_jobs_outcomes():
    """The README's table (re-rendered from its outcomes file by tests/test_outcomes.py) is the main job's: the
    episodes of the shipped config as it is now, every one of them, under the config's own hash."""
    import json

    from groundplan.config import load_config
    from groundplan.factory import make_env
    from groundplan.pipelines.evaluate.sweep import episode_specs, select_tasks

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    first = readme[readme.index("## Set up"):readme.index("Install and run the tests")]
    data = "docs/results/data/saycan/kitchen_quick.json"
    assert f"<!-- outcomes: {data} " in first
    doc = json.loads((ROOT / data).read_text())
    cfg = load_config(ROOT / "configs" / "saycan_kitchen.yaml")
    specs = episode_specs(cfg, select_tasks(make_env(cfg.env), cfg))
    assert sorted((s.planner.label, s.task.task_id, s.seed) for s in specs) == \
        sorted((e["planner"], e["task_id"], e["seed"]) for e in doc["episodes"])
    assert {e["config_hash"] for e in doc["episodes"]} == {cfg.hash()}, "rerun the main job and export it again"
