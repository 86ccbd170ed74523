"""SayNav's Table 1 on the embedded houses.

Two modes:

* run ``configs/saynav_house.yaml`` (or a selection of its planners) through the sweep driver and
  print the MultiON table (SR with 95% Wilson interval, SPL and Kendall tau with 95% intervals):

      python benchmarks/saynav_table.py --houses 20 --perception gt --planners "SayNav (score)" "Explore (no LLM)"

* ``--runs``: read the traces of finished ``groundplan eval`` runs (one folder per graph × navigator
  combination, as the commands in docs/results-saynav.md write them) and print one table per folder, followed by paired
  comparisons of every planner against the no-LLM exploration on the same houses: SR by an exact
  McNemar test, SPL by the mean paired difference with its 95% interval and a normal-approximation
  p-value:

      python benchmarks/saynav_table.py --runs outputs/saynav_gt_astar outputs/saynav_noisy_astar

  A table's planners may have run on different houses (a slow row on fewer): each row gives its own n,
  and each paired comparison uses only the houses both planners ran.
"""
from __future__ import annotations

import argparse
import logging
import math
from pathlib import Path

from groundplan.core.stats import mcnemar_exact
from groundplan.envs.house.summary import markdown_table, multion_rows

REFERENCE = "Explore (no LLM)"


def paired_lines(traces: list, reference: str = REFERENCE) -> list[str]:
    """Each planner against ``reference`` on the episodes both ran (same task and seed)."""
    by: dict[str, dict[tuple[str, int], object]] = {}
    for t in traces:
        by.setdefault(t.planner, {})[(t.task_id, t.seed)] = t
    if reference not in by:
        return []
    out = []
    for planner, eps in by.items():
        if planner == reference:
            continue
        keys = [k for k in eps if k in by[reference]]
        if not keys:
            continue
        a = [eps[k].metrics for k in keys]
        b = [by[reference][k].metrics for k in keys]
        a_only = sum(x.get("sr", 0) > 0.5 and y.get("sr", 0) <= 0.5 for x, y in zip(a, b))
        b_only = sum(y.get("sr", 0) > 0.5 and x.get("sr", 0) <= 0.5 for x, y in zip(a, b))
        d = [x.get("spl", 0.0) - y.get("spl", 0.0) for x, y in zip(a, b)]
        n = len(d)
        mean = sum(d) / n
        sd = math.sqrt(sum((v - mean) ** 2 for v in d) / (n - 1)) if n > 1 else 0.0
        head = (f"- {planner} vs {reference} (n={n} paired houses): SR only-{planner} {a_only} / only-reference "
                f"{b_only}, McNemar p={mcnemar_exact(a_only, b_only):.3g}; SPL difference {mean:+.3f}")
        if n < 2 or sd == 0:
            out.append(head + " (no interval: fewer than 2 houses or no spread)")
            continue
        half = 1.96 * sd / math.sqrt(n)
        p = math.erfc(abs(mean) / (sd / math.sqrt(n)) / math.sqrt(2))
        out.append(head + f" [{mean - half:+.3f}, {mean + half:+.3f}], p={p:.3g}")
    return out


def from_runs(folders: list[str]) -> None:
    from groundplan.rollout.traces import read_traces

    for folder in folders:  # "a,b": the traces of several runs in one table (e.g. a row run on its own)
        files = sorted(f for part in folder.split(",") for f in Path(part).rglob("traces.jsonl"))
        if not files:
            raise SystemExit(f"no traces.jsonl under {folder}")
        traces = [t for f in files for t in read_traces(f)]
        print(f"\n{folder}\n")
        print(markdown_table(multion_rows(traces)))
        lines = paired_lines(traces)
        if lines:
            print("\n" + "\n".join(lines))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="configs/saynav_house.yaml")
    ap.add_argument("--houses", type=int, default=10)
    ap.add_argument("--perception", choices=["gt", "noisy"], default="gt")
    ap.add_argument("--planners", nargs="*", default=None, help="planner labels to keep (default: all)")
    ap.add_argument("--output", default="outputs")
    ap.add_argument("--runs", nargs="*", default=None, help="summarise finished eval runs instead of running; "
                    "'dirA,dirB' puts several runs in one table")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.runs:
        from_runs(args.runs)
        return
    from groundplan.config import load_config
    from groundplan.pipelines.sweep import run_sweep

    cfg = load_config(args.config, [f"tasks.per_family={args.houses}", f"env.options.perception={args.perception}",
                                    f"name=saynav_house_{args.perception}", f"output_dir={args.output}",
                                    "runtime.executor=local"])
    if args.planners:
        cfg.planners = [p for p in cfg.planners if p.display in args.planners]
    result = run_sweep(cfg)
    wanted = {p.display for p in cfg.planners}
    print(markdown_table(multion_rows(t for t in result.traces if t.planner in wanted)))
    lines = paired_lines([t for t in result.traces if t.planner in wanted])
    if lines:
        print("\n" + "\n".join(lines))


if __name__ == "__main__":
    main()
