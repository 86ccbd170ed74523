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


def kitchen_figures() -> dict[str, dict[str, tuple[int, int]]]:
    """The quick-selection kitchen table of docs/results/saycan.md: family -> planner -> (plan successes,
    execution successes) of its n episodes, read back from the percentages."""
    import re

    text = (ROOT / "docs" / "results" / "saycan.md").read_text(encoding="utf-8")
    head = "| family | n | SayCan | No-VF | Generative |"
    lines = text[text.index(head):].splitlines()
    planners = [c.strip() for c in lines[0].strip("|").split("|")][2:]
    figures: dict[str, dict[str, tuple[int, int]]] = {}
    for line in lines[2:]:
        if not line.startswith("| ") or line.startswith("| **"):
            break
        family, n, *cells = [c.strip() for c in line.strip("|").split("|")]
        rates = [tuple(int(x) for x in re.findall(r"(\d+)%", c)) for c in cells]
        figures[family] = {p: (round(plan * int(n) / 100), round(ex * int(n) / 100))
                           for p, (plan, ex) in zip(planners, rates)}
    return figures


def test_readme_shows_the_table_the_main_job_prints():
    """The table in the README's first set-up paragraph is what ``groundplan eval configs/saycan_kitchen.yaml``
    prints for the figures docs/results/saycan.md records: episodes of the shipped config with those
    outcomes, summarised and printed by the eval command's own code (a non-terminal output, as in a log)."""
    import dataclasses
    import io

    from rich.console import Console

    from groundplan.config import load_config
    from groundplan.evaluation.summary import print_table, summarize
    from groundplan.evaluation.tables import summary_table
    from groundplan.factory import make_env
    from groundplan.pipelines.evaluate.sweep import episode_specs, select_tasks
    from groundplan.rollout.runner import failed_trace

    figures = kitchen_figures()
    cfg = load_config(ROOT / "configs" / "saycan_kitchen.yaml")
    specs = episode_specs(cfg, select_tasks(make_env(cfg.env), cfg))
    assert len(specs) == 63 and set(figures) == {s.task.family for s in specs}
    seen: dict[tuple[str, str], int] = {}
    traces = []
    for spec in specs:  # the first k episodes of a family succeed: the table shows counts, not which
        key = (spec.planner.display, spec.task.family)
        i = seen[key] = seen.get(key, -1) + 1
        plan, execution = figures[spec.task.family][spec.planner.label]
        trace = failed_trace(spec, cfg.env.name, cfg.llm.model, cfg.hash(), error=None)
        traces.append(dataclasses.replace(trace, terminated=True, plan_success=i < plan, execution_success=i < execution))
    buf = io.StringIO()
    print_table(summary_table(summarize(traces, planner_order=[p.display for p in cfg.planners]), cfg.env.name,
                              cfg.name), Console(file=buf))
    printed = buf.getvalue()
    assert "│ all                 │ 21 │ 14% [5–35] │ 19% [8–40] │" in printed  # the headline row of the results
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    first = readme[readme.index("## Set up"):readme.index("Install and run the tests")]
    assert f"```text\n{printed}```" in first, "README's kitchen table differs from what eval prints:\n" + printed

