"""The MultiON table of SayNav (Table 1): SR and SPL over all episodes, Kendall tau over successful
ones, each with n; SR with a 95% Wilson interval and SPL/tau with a normal-approximation interval.
Tau is tau-b, targets first seen at the same step being ties (``metrics.kendall_tau``), so a successful
episode that found every target at once has no tau and is not in its n.

:func:`paired_lines` compares every planner with the no-LLM exploration on the same houses: SR by an
exact McNemar test, SPL by the mean paired difference with its 95% interval and a normal-approximation
p-value. A table's planners may have run on different houses (a slow row on fewer): each row gives its
own n, and each paired comparison uses only the houses both planners ran. A row that read simulator truth
(the privileged baseline's target positions) is marked from its traces' declarations, with a footnote.
"""
from __future__ import annotations

import math
from typing import Any, Iterable

from groundplan.core.stats import mcnemar_exact, mean_interval, mean_se, wilson_interval
from groundplan.evaluation.marks import Marks, declarations_of, trace_marks


def multion_rows(traces: Iterable[Any]) -> list[dict[str, Any]]:
    by: dict[str, list[Any]] = {}
    for t in traces:
        by.setdefault(t.planner, []).append(t)
    marks = trace_marks(t for ts in by.values() for t in ts)
    rows = []
    for planner, ts in by.items():
        n = len(ts)
        sr = [float(t.metrics.get("sr", 0.0)) for t in ts]
        lo, hi = wilson_interval(sum(sr), n)
        spl = mean_interval([float(t.metrics.get("spl", 0.0)) for t in ts])
        taus = [float(t.metrics["kendall_tau"]) for t in ts if "kendall_tau" in t.metrics]
        tau = mean_interval(taus)
        rows.append({"planner": planner, "n": n, "sr": sum(sr) / n, "sr_lo": lo, "sr_hi": hi,
                     "spl": spl[0], "spl_lo": spl[1], "spl_hi": spl[2], "tau": tau[0], "tau_n": len(taus),
                     "tau_lo": tau[1], "tau_hi": tau[2],
                     "path_m": sum(float(t.metrics.get("path_m", 0.0)) for t in ts) / n,
                     "errors": sum(1 for t in ts if getattr(t, "error", None)),
                     "oracles": [d.to_dict() for d in marks.of(planner)]})
    return rows


def markdown_table(rows: list[dict[str, Any]]) -> str:
    marks = Marks({r["planner"]: declarations_of(r.get("oracles")) for r in rows})
    out = ["| planner | n | SR (95% Wilson) | SPL (95% CI) | Kendall tau (n succ.) | path m |",
           "|---|---|---|---|---|---|"]
    for r in rows:
        tau = "n/a" if r["tau_n"] == 0 else f"{r['tau']:.2f} [{r['tau_lo']:.2f}, {r['tau_hi']:.2f}] (n={r['tau_n']})"
        out.append(f"| {marks.label(r['planner'])} | {r['n']} | {100 * r['sr']:.1f}% [{100 * r['sr_lo']:.1f}, {100 * r['sr_hi']:.1f}] | "
                   f"{r['spl']:.3f} [{r['spl_lo']:.3f}, {r['spl_hi']:.3f}] | {tau} | {r['path_m']:.1f} |")
    notes = marks.footnotes([r["planner"] for r in rows])
    return "\n".join(out + ([""] + notes if notes else []))


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
        mean, se = mean_se(d)
        head = (f"- {planner} vs {reference} (n={n} paired houses): SR only-{planner} {a_only} / only-reference "
                f"{b_only}, McNemar p={mcnemar_exact(a_only, b_only):.3g}; SPL difference {mean:+.3f}")
        if n < 2 or se == 0:
            out.append(head + " (no interval: fewer than 2 houses or no spread)")
            continue
        p = math.erfc(abs(mean) / se / math.sqrt(2))
        out.append(head + f" [{mean - 1.96 * se:+.3f}, {mean + 1.96 * se:+.3f}], p={p:.3g}")
    return out


def report(traces: list[Any]) -> str:
    """The MultiON table, then each planner's paired comparison with the exploration baseline."""
    lines = paired_lines(traces)
    return markdown_table(multion_rows(traces)) + ("\n\n" + "\n".join(lines) if lines else "")
