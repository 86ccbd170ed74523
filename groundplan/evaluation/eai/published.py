"""EAI's published action-sequencing figures (Li et al. 2024, Sec. 3.3 and the project page's leaderboard)
against the judge's ``official`` semantics, run by run.

The official figures depend on two choices EAI's evaluator leaves to string hashing (the order of a task's
action goals, ``list(set(goals))``, and the node a shared class name maps to), so one evaluator run's
figures are reproduced only with that run's choices (:data:`~groundplan.evaluation.eai.semantics.EVALUATOR_RUNS`).
``published.json`` beside this module holds the figures, each with its source (repository, commit, path);
:func:`compare` judges every stored answer under the official semantics of each run and says, per source
and model, whether the published success and execution rates are the reproduced ones, task for task.

Only the 13 tasks with two action goals and the tasks whose shared names a run pins can change between
runs; :func:`compare` also records each model's counts on the other tasks (``fixed``), so a check that
judges only the changing tasks (the test) rebuilds every run's figures in seconds.

``python -m groundplan.evaluation.eai.published OUT.json`` writes the comparison and prints its table and
what each run matches. The table of docs/results/eai.md ("The published figures") is not pasted from that
output: it is rendered from the committed file (:meth:`Comparison.from_dict`, no judging) into the page
between markers naming the file (relative to the page's folder), so the page cannot keep a figure the data
no longer gives::

    <!-- published-table: data/eai/published_vs_reproduced.json -->
    ...the table...
    <!-- /published-table -->

``python -m groundplan.evaluation.eai.published --render PAGE`` rewrites every such block, and a test
re-renders the page and fails on any difference.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Sequence

from groundplan.evaluation.eai.semantics import EVALUATOR_RUNS, OFFICIAL, EAISemantics, official_run
from groundplan.evaluation.page_blocks import markdown_table

log = logging.getLogger(__name__)

PUBLISHED = Path(__file__).with_name("published.json")
#: the runs compared: the judge's own process (its PYTHONHASHSEED) and every pinned evaluator run
RUNS = ("process", *EVALUATOR_RUNS)


@lru_cache(maxsize=1)
def sources() -> dict[str, dict[str, Any]]:
    """Source id -> its citation fields and ``models``: model -> ``{"success": %, "executable": %}``."""
    return json.loads(PUBLISHED.read_text())["sources"]


def count_of(rate: float, n: int) -> int | None:
    """The number of tasks out of ``n`` that a published rate (%) stands for: the count whose rate is within
    the rate's rounding (0.05 points at one decimal; a four-decimal rate is closer still), None when no count
    is. At n = 305 one task is 0.33 points, so the count is unique."""
    k = round(rate * n / 100)
    return k if abs(100 * k / n - rate) <= 0.05 + 1e-9 else None


def run_semantics(run: str) -> EAISemantics:
    """``official`` as the judge's process makes the hash-dependent choices (``process``), or as the named
    evaluator run made them."""
    return OFFICIAL if run == "process" else official_run(run)


def sensitive_tasks(tasks: Iterable[Any]) -> list[str]:
    """The ids of the tasks whose official verdicts can differ between runs: two or more action goals, or a
    class name some run pins."""
    pinned = {task_id for spec in EVALUATOR_RUNS.values() for task_id, _, _ in spec.get("name_nodes", ())}
    return sorted(t.task_id for t in tasks if len(t.action_goals) >= 2 or t.task_id in pinned)


@dataclass
class RunCounts:
    """One model's official figures under one run: successes and executable plans of the ``n`` scored tasks,
    and how many verdicts ``action_goal_order`` (the task file's order) changes there."""

    successes: int
    executable: int
    n: int
    order_correction_changes: int = 0
    order_correction_success_delta: int = 0

    def rate(self, kind: str) -> float:
        return 100.0 * getattr(self, kind) / self.n


@dataclass
class Comparison:
    """Per model, the reproduced counts of every run, the counts on the tasks no run changes, and per source
    what the published rates stand for and whether each run gives them."""

    n: int
    runs: dict[str, dict[str, RunCounts]] = field(default_factory=dict)
    #: model -> the sums of :data:`FIXED_FIELDS` over the official tasks outside :func:`sensitive_tasks`
    fixed: dict[str, dict[str, int]] = field(default_factory=dict)
    sensitive: list[str] = field(default_factory=list)
    #: source -> model -> {"success", "executable" (published %), their counts, and run -> exact match}
    published: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    #: model -> run -> whether the evaluator-format summary equals the one a source gives, every figure
    summary_matches: dict[str, dict[str, bool]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"n": self.n, "sensitive_tasks": self.sensitive, "fixed": self.fixed,
                "runs": {r: {m: vars(c) for m, c in per.items()} for r, per in self.runs.items()},
                "published": self.published, "summary_matches": self.summary_matches}

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> Comparison:
        """The comparison :meth:`to_dict` wrote (the committed file), so the page's table is rendered from
        the data without judging every answer again; ``from_dict(d).to_dict() == d``."""
        return cls(n=doc["n"], sensitive=list(doc["sensitive_tasks"]), fixed=doc["fixed"],
                   runs={r: {m: RunCounts(**c) for m, c in per.items()} for r, per in doc["runs"].items()},
                   published=doc["published"], summary_matches=doc["summary_matches"])


def _outcome(v: Any) -> tuple[Any, ...]:
    return (v.success, v.executable, v.error_type)


def match(published: dict[str, Any], counts: RunCounts) -> dict[str, bool]:
    """Whether a run's counts are a source's rates: each published rate against the rate of the count, as
    the source rounds (one decimal, or the evaluator's four)."""
    out = {}
    for kind, attr in (("success", "successes"), ("executable", "executable")):
        rate = published.get(kind)
        if rate is not None:
            digits = len(str(rate).split(".")[1]) if "." in str(rate) else 0
            out[kind] = round(counts.rate(attr), digits) == rate
    return out


#: the verdict fields :func:`compare` sums over the tasks no run changes (``Comparison.fixed``)
FIXED_FIELDS = ("success", "executable", "node_matched", "edge_matched", "action_matched", "node_total",
                "edge_total", "action_total")


def compare(models: Sequence[str] | None = None, runs: Sequence[str] = RUNS) -> Comparison:
    """Judge every stored answer of ``models`` on the official set under each run's official semantics and
    with ``action_goal_order`` on top (to count the correction at that run), then set every source's
    figures beside them (see the module). A source that gives a model's whole ``summary`` (the evaluator's
    own output) is compared figure for figure (``summary_matches``)."""
    from groundplan.envs.virtualhome.eai.tasks import load_tasks
    from groundplan.evaluation.eai.judge import EAIJudge
    from groundplan.evaluation.eai.leaderboard import stored_entries
    from groundplan.evaluation.eai.table import aggregate, official_summary

    entries = stored_entries(models=models)
    tasks = load_tasks("official")
    log.info("loaded %d official EAI tasks", len(tasks))
    sensitive = set(sensitive_tasks(tasks))
    judge = EAIJudge()
    semantics = {r: run_semantics(r) for r in runs}
    file_order = {r: s.model_copy(update={"name": f"{s.name}+action_goal_order", "action_goal_order": True})
                  for r, s in semantics.items()}
    summaries = {m: fig["summary"] for info in sources().values() for m, fig in info["models"].items()
                 if "summary" in fig}
    result = Comparison(n=len(tasks), sensitive=sorted(sensitive))
    for entry in entries:
        counts = {r: RunCounts(0, 0, 0) for r in runs}
        fixed = dict.fromkeys(FIXED_FIELDS, 0)
        verdicts: dict[str, list[Any]] = {r: [] for r in runs}
        for task in tasks:
            text = entry.answers.get(task.task_id)
            if text is None:
                continue
            for r in runs:
                v = judge.score_text(task.task_id, text, semantics[r])
                verdicts[r].append(v)
                c = counts[r]
                c.n += 1
                c.successes += v.success
                c.executable += v.executable
                if task.task_id in sensitive:
                    w = judge.score_text(task.task_id, text, file_order[r])
                    c.order_correction_changes += _outcome(v) != _outcome(w)
                    c.order_correction_success_delta += w.success - v.success
            if task.task_id not in sensitive:  # every run judges these tasks alike: the last run's verdict
                for f in FIXED_FIELDS:
                    fixed[f] += int(getattr(v, f))
        for r in runs:
            result.runs.setdefault(r, {})[entry.name] = counts[r]
        result.fixed[entry.name] = fixed
        if entry.name in summaries:  # its own counts: the run behind the source scored this model first
            result.summary_matches[entry.name] = {
                r: official_summary(aggregate(entry.name, verdicts[r], semantics[r])) == summaries[entry.name]
                for r in runs}
        log.info("%s: %s", entry.name, {r: (c.successes, c.executable) for r, c in counts.items()})
    result.published = published_against(result.runs, result.n)
    return result


def published_against(runs: dict[str, dict[str, RunCounts]], n: int) -> dict[str, dict[str, dict[str, Any]]]:
    """Every source's rates, the counts they stand for at ``n`` tasks, and per run whether it gives them."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for source, info in sources().items():
        per = {}
        for model, fig in info["models"].items():
            row = {k: fig[k] for k in ("success", "executable")}
            row.update({f"{k}_count": count_of(fig[k], n) for k in ("success", "executable")})
            row["matches"] = {r: match(fig, per_run[model]) for r, per_run in runs.items() if model in per_run}
            per[model] = row
        out[source] = per
    return out


#: the sources whose columns :func:`render_markdown` shows (those of all 15 models), the first marked
TABLE_SOURCES = ("leaderboard_2024_06", "leaderboard_2024_09")
_TITLES = {"leaderboard_2024_06": "June 2024 leaderboard", "leaderboard_2024_09": "September 2024 leaderboard",
           "process": "official, `PYTHONHASHSEED=0`"}


def render_markdown(comparison: Comparison, shown: Sequence[str] = TABLE_SOURCES, runs: Sequence[str] = RUNS) -> str:
    """The page's table: per model, each shown source's success / executable (%), then each run's with its
    counts (a figure equal to the first shown source's marked ✓), then what ``action_goal_order`` changes at
    each run (verdicts). The judge's own run is titled seed 0's, the only seed :func:`main` writes."""
    head = (["model"] + [_TITLES.get(src, src) for src in shown]
            + [_TITLES["process"] if r == "process" else f"official `[{r}]`" for r in runs]
            + ["`action_goal_order`: " + " / ".join("seed 0" if r == "process" else r for r in runs)])
    rows = []
    marked = comparison.published[shown[0]]
    for model in marked:
        cells = [model] + [f"{comparison.published[src][model]['success']} / "
                           f"{comparison.published[src][model]['executable']}" for src in shown]
        for r in runs:
            c = comparison.runs[r][model]
            ok = marked[model]["matches"][r]
            cells.append(f"{c.rate('successes'):.1f}{' ✓' if ok.get('success') else ''} / "
                         f"{c.rate('executable'):.1f}{' ✓' if ok.get('executable') else ''} "
                         f"({c.successes}, {c.executable})")
        cells.append(" / ".join(str(comparison.runs[r][model].order_correction_changes) for r in runs))
        rows.append(cells)
    return "\n".join(markdown_table(head, rows)) + "\n"


def render_matches(comparison: Comparison) -> str:
    """Per source and run, the models whose published success and execution rates the run gives exactly."""
    lines = []
    for source, per in comparison.published.items():
        for r in comparison.runs:
            both = [m for m, row in per.items() if all(row["matches"].get(r, {}).values())]
            lines.append(f"{source} [{r}]: {len(both)} of {len(per)} models exact")
    for model, per_run in comparison.summary_matches.items():
        lines.append(f"{model} summary.json figure for figure: "
                     + ", ".join(f"{r} {'yes' if ok else 'no'}" for r, ok in per_run.items()))
    return "\n".join(lines) + "\n"


def load_comparison(path: str | Path) -> Comparison:
    """The comparison a run of :func:`main` wrote to ``path``."""
    return Comparison.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))


#: a page's block holding the table of a committed comparison, the file named relative to the page's folder
MARK = re.compile(r"(?P<open><!-- published-table: (?P<path>\S+) -->\n)(?P<body>.*?)"
                  r"(?P<close><!-- /published-table -->)", re.S)
#: the command that rewrites a page's blocks (followed by the page), named where a stale block is reported
RENDER_COMMAND = "python -m groundplan.evaluation.eai.published --render"


def render_page(page: str | Path, write: bool = True) -> str:
    """``page`` with every marked block (:data:`MARK`) re-rendered from the comparison file it names
    (:func:`render_markdown`, the table :func:`main` prints); written back when ``write``. Returns the new
    text. A page with no block is an error: a test that checks such a page would pass with nothing checked."""
    from groundplan.evaluation.page_blocks import render_blocks

    return render_blocks(page, MARK, block, write, required=True)


def block(data: Path, m: re.Match) -> str:
    """A marked block's table, from the comparison file it names."""
    return render_markdown(load_comparison(data))


def main(argv: list[str] | None = None) -> int:
    """``python -m groundplan.evaluation.eai.published OUT.json [MODEL...]``: compare, write the JSON, print the
    table and what each run matches. ``--render PAGE`` instead rewrites the page's marked tables from the
    committed files they name, judging nothing."""
    parser = argparse.ArgumentParser(prog="python -m groundplan.evaluation.eai.published",
                                     description="EAI's published action-sequencing figures against the judge.")
    parser.add_argument("out", nargs="?", metavar="OUT.json", help="where to write the comparison")
    parser.add_argument("models", nargs="*", metavar="MODEL", help="the stored models compared (default: all)")
    parser.add_argument("--render", metavar="PAGE", action="append", default=[],
                        help="rewrite PAGE's <!-- published-table: FILE --> blocks from FILE (repeatable)")
    args = parser.parse_args(argv)
    if args.render:
        if args.out:
            parser.error("--render judges nothing and writes no OUT.json: each block names its file")
        for page in args.render:
            before = Path(page).read_text(encoding="utf-8")
            print(f"{page}: {'unchanged' if render_page(page) == before else 'rewritten'}")
        return 0
    if not args.out:
        parser.error("give OUT.json (or --render PAGE)")
    if os.environ.get("PYTHONHASHSEED") != "0":  # the table's ``process`` column is stated as seed 0's
        parser.error("run with PYTHONHASHSEED=0: the judge's own run (the table's seed-0 column) hashes as this "
                     "process does")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    comparison = compare(args.models or None)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(comparison.to_dict(), indent=1) + "\n")
    sys.stdout.write(render_markdown(comparison) + "\n" + render_matches(comparison))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
