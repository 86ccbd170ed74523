"""SayCanPay's result tables from a run's traces (Hazra et al., Tables 3–5), each rate with n and a 95%
Wilson interval.

- success: planning success (the goal holds after the plan; in a noise-free env this is plan success);
- cost-effective: success with a plan no longer than the expert's (Sec. 7.3, Table 4: "success with
  the expert plan's length"), the expert being the task's reference plan; ``done`` is not counted;
- mean length: actions per plan (done excluded).

``python -m groundplan.pipelines.saycanpay_tables <run_dir> [<run_dir> ...] [--env kitchen] [--split test]`` prints a
Markdown table and the paired comparisons behind the paper's claims (:data:`PAIRS`), on success and on
cost-effectiveness.
"""
from __future__ import annotations

import argparse
import dataclasses
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from groundplan.core.stats import wilson_interval
from groundplan.pipelines.summary import paired_tests
from groundplan.rollout.traces import EpisodeTrace, read_traces

#: (better-or-equal, baseline) pairs the paper's claims are about (Sec. 7: BA-SCP >= GA-SCP >= GT; Can/Pay,
#: and Can alone, help over Say alone)
PAIRS = (("GA-SCP", "GT"), ("BA-SCP", "GA-SCP"), ("GA-SCP", "GA-Say"), ("BA-SCP", "BA-Say"), ("GA-SC", "GA-Say"),
         ("BA-SC", "BA-Say"))


@dataclass
class Row:
    planner: str
    n: int
    success: int
    cost_effective: int
    mean_length: float
    errors: int

    def cell(self, k: int) -> str:
        lo, hi = wilson_interval(k, self.n)
        return f"{100 * k / self.n:.0f}% [{100 * lo:.0f}, {100 * hi:.0f}]" if self.n else "—"


def plan_length(trace: EpisodeTrace, done_skill: str = "done") -> int:
    """Actions of the executed plan, done excluded."""
    return len([a for a in trace.plan if a != done_skill])


def with_cost_effectiveness(traces: Iterable[EpisodeTrace], expert_length: dict[str, int],
                            done_skill: str = "done") -> list[EpisodeTrace]:
    """The traces with Table 4's ``cost_effective`` measure (success with a plan no longer than the
    expert's) in their metrics, so the tables and the paired tests read it like any 0/1 measure."""
    def ce(t: EpisodeTrace) -> float:
        return float(bool(t.execution_success) and t.task_id in expert_length
                     and plan_length(t, done_skill) <= expert_length[t.task_id])

    return [dataclasses.replace(t, metrics={**t.metrics, "cost_effective": ce(t)}) for t in traces]


def table_rows(traces: Iterable[EpisodeTrace], done_skill: str = "done") -> list[Row]:
    """One row per planner, from traces carrying ``cost_effective`` (:func:`with_cost_effectiveness`)."""
    by: dict[str, list[EpisodeTrace]] = defaultdict(list)
    for t in traces:
        by[t.planner].append(t)
    rows = []
    for planner, ts in by.items():
        lengths = [plan_length(t, done_skill) for t in ts]
        ok = [bool(t.execution_success) for t in ts]
        ce = [bool(t.metrics["cost_effective"]) for t in ts]
        rows.append(Row(planner, len(ts), sum(ok), sum(ce), sum(lengths) / len(ts), sum(t.error is not None for t in ts)))
    return sorted(rows, key=_order)


def _order(row: "Row") -> tuple:
    """Tables 3-5's row order: GT, GA-{Say, SC, SCP}, BA-{Say, SC, SCP}, then the oracle rows."""
    head, _, rest = row.planner.partition("-")
    score = rest.split(" ", 1)[0]
    return ("oracle" in row.planner, ("GT", "GA", "BA").index(head) if head in ("GT", "GA", "BA") else 3,
            ("Say", "SC", "SCP").index(score) if score in ("Say", "SC", "SCP") else 3, row.planner)


def format_p(p: float) -> str:
    """Two decimals, or two significant digits below 0.01 (so a strong result does not read 0.00)."""
    return f"{p:.2f}" if p >= 0.01 else f"{p:.1e}"


def paired(traces: Iterable[EpisodeTrace], pairs: Sequence[tuple[str, str]] = PAIRS,
           measure: str = "execution_success") -> list[str]:
    """For each pair of planners run on the same tasks: episodes only the first / only the second
    solved (``measure``: success, or ``cost_effective`` on traces from :func:`with_cost_effectiveness`),
    and the exact McNemar p-value (:func:`~groundplan.pipelines.summary.paired_tests`: the planners are
    compared on identical episodes, not by their rates)."""
    tests = {(r["a"], r["b"]): r for r in paired_tests(traces) if r["measure"] == measure}
    what = "solved" if measure == "execution_success" else measure.replace("_", "-")
    lines = []
    for a, b in pairs:
        if (a, b) in tests:
            r = tests[a, b]
            a_only, b_only = r["a_only"], r["b_only"]
        elif (b, a) in tests:
            r = tests[b, a]
            a_only, b_only = r["b_only"], r["a_only"]
        else:
            continue
        lines.append(f"{a} vs {b} on {r['n_pairs']} shared episodes: {a_only} {what} only by {a}, {b_only} only by "
                     f"{b}; exact McNemar p = {format_p(r['p_value'])}")
    return lines


def render(rows: Sequence[Row], title: str) -> str:
    lines = [f"**{title}** (95% Wilson intervals)", "",
             "| planner | n | success | cost-effective | mean length | errors |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r.planner} | {r.n} | {r.cell(r.success)} | {r.cell(r.cost_effective)} | {r.mean_length:.1f} | {r.errors} |")
    return "\n".join(lines)


def expert_lengths(env_name: str, env_options: dict | None = None) -> tuple[dict[str, int], str]:
    """The expert plan's length (done excluded) per task of the env's split, and the env's done skill."""
    from groundplan.envs import ENVS

    env = ENVS.get(env_name)(**(env_options or {}))
    done = env.done_skill
    return {t.task_id: len([a for a in t.reference_plan if a != done]) for t in env.tasks() if t.reference_plan}, done


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dirs", nargs="+", help="run folders (several: e.g. planners run side by side)")
    ap.add_argument("--env", default=None, help="env whose reference plans are the experts (default: the traces')")
    ap.add_argument("--split", default=None, help="the env's split the runs used (default: the env's own default)")
    args = ap.parse_args(argv)
    traces = [t for d in args.run_dirs for t in read_traces(Path(d) / "traces.jsonl")]
    if not traces:
        raise SystemExit(f"no traces in {', '.join(args.run_dirs)}")
    env = args.env or traces[0].env
    lengths, done = expert_lengths(env, {"split": args.split} if args.split else None)
    title = f"{Path(args.run_dirs[0]).name}: {args.split or 'test'} split"
    annotated = with_cost_effectiveness(traces, lengths, done)
    print(render(table_rows(annotated, done), title))
    for measure in ("execution_success", "cost_effective"):
        for line in paired(annotated, measure=measure):
            print(f"- {line}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
