"""SayCanPay's result tables from a run's traces (Hazra et al., Tables 3–5), each rate with n and a 95%
Wilson interval.

- success: planning success (the goal holds after the plan; in a noise-free env this is plan success);
- cost-effective: success with a plan no longer than the expert's (Sec. 7.3, Table 4: "success with
  the expert plan's length"), the expert being the task's reference plan; ``done`` is not counted;
- mean length: actions per plan (done excluded).

``python -m groundplan.pipelines.saycanpay_tables <run_dir> [--env kitchen]`` prints a Markdown table.
"""
from __future__ import annotations

import argparse
import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from groundplan.rollout.traces import EpisodeTrace, read_traces


def wilson_interval(successes: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """The Wilson score interval for a binomial proportion (95% by default); (0, 1) when n = 0."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


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


def table_rows(traces: Iterable[EpisodeTrace], expert_length: dict[str, int], done_skill: str = "done") -> list[Row]:
    by: dict[str, list[EpisodeTrace]] = defaultdict(list)
    for t in traces:
        by[t.planner].append(t)
    rows = []
    for planner, ts in by.items():
        lengths = [len([a for a in t.plan if a != done_skill]) for t in ts]
        ok = [bool(t.execution_success) for t in ts]
        ce = [s and (t.task_id in expert_length and n <= expert_length[t.task_id]) for s, t, n in zip(ok, ts, lengths)]
        rows.append(Row(planner, len(ts), sum(ok), sum(ce), sum(lengths) / len(ts), sum(t.error is not None for t in ts)))
    return rows


def render(rows: Sequence[Row], title: str) -> str:
    lines = [f"**{title}** (95% Wilson intervals)", "",
             "| planner | n | success | cost-effective | mean length | errors |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r.planner} | {r.n} | {r.cell(r.success)} | {r.cell(r.cost_effective)} | {r.mean_length:.1f} | {r.errors} |")
    return "\n".join(lines)


def expert_lengths(env_name: str, done_skill: str = "done") -> dict[str, int]:
    from groundplan.envs import ENVS

    env = ENVS.get(env_name)()
    return {t.task_id: len([a for a in t.reference_plan if a != done_skill]) for t in env.tasks() if t.reference_plan}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir")
    ap.add_argument("--env", default=None, help="env whose reference plans are the experts (default: the traces')")
    args = ap.parse_args(argv)
    traces = list(read_traces(Path(args.run_dir) / "traces.jsonl"))
    if not traces:
        raise SystemExit(f"no traces in {args.run_dir}")
    env = args.env or traces[0].env
    print(render(table_rows(traces, expert_lengths(env)), f"{Path(args.run_dir).name}: test split"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
