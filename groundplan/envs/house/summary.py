"""The MultiON table of SayNav (Table 1): SR and SPL over all episodes, Kendall tau over successful
ones, each with n; SR with a 95% Wilson interval and SPL/tau with a normal-approximation interval.
Tau is tau-b, targets first seen at the same step being ties (``metrics.kendall_tau``), so a successful
episode that found every target at once has no tau and is not in its n.

It reads any trace-like objects with ``planner`` and ``metrics`` attributes (``EpisodeTrace``), so it
stays below the rollout layer.
"""
from __future__ import annotations

import math
from typing import Any, Iterable

from groundplan.core.stats import wilson_interval


def _mean_ci(values: list[float]) -> tuple[float, float, float]:
    n = len(values)
    if n == 0:
        return (float("nan"), float("nan"), float("nan"))
    m = sum(values) / n
    if n == 1:
        return (m, m, m)
    sd = math.sqrt(sum((v - m) ** 2 for v in values) / (n - 1))
    h = 1.96 * sd / math.sqrt(n)
    return (m, m - h, m + h)


def multion_rows(traces: Iterable[Any]) -> list[dict[str, Any]]:
    by: dict[str, list[Any]] = {}
    for t in traces:
        by.setdefault(t.planner, []).append(t)
    rows = []
    for planner, ts in by.items():
        n = len(ts)
        sr = [float(t.metrics.get("sr", 0.0)) for t in ts]
        lo, hi = wilson_interval(sum(sr), n)
        spl = _mean_ci([float(t.metrics.get("spl", 0.0)) for t in ts])
        taus = [float(t.metrics["kendall_tau"]) for t in ts if "kendall_tau" in t.metrics]
        tau = _mean_ci(taus)
        rows.append({"planner": planner, "n": n, "sr": sum(sr) / n, "sr_lo": lo, "sr_hi": hi,
                     "spl": spl[0], "spl_lo": spl[1], "spl_hi": spl[2], "tau": tau[0], "tau_n": len(taus),
                     "tau_lo": tau[1], "tau_hi": tau[2],
                     "path_m": sum(float(t.metrics.get("path_m", 0.0)) for t in ts) / n,
                     "errors": sum(1 for t in ts if getattr(t, "error", None))})
    return rows


def markdown_table(rows: list[dict[str, Any]]) -> str:
    out = ["| planner | n | SR (95% Wilson) | SPL (95% CI) | Kendall tau (n succ.) | path m |",
           "|---|---|---|---|---|---|"]
    for r in rows:
        tau = "n/a" if r["tau_n"] == 0 else f"{r['tau']:.2f} [{r['tau_lo']:.2f}, {r['tau_hi']:.2f}] (n={r['tau_n']})"
        out.append(f"| {r['planner']} | {r['n']} | {100 * r['sr']:.1f}% [{100 * r['sr_lo']:.1f}, {100 * r['sr_hi']:.1f}] | "
                   f"{r['spl']:.3f} [{r['spl_lo']:.3f}, {r['spl_hi']:.3f}] | {tau} | {r['path_m']:.1f} |")
    return "\n".join(out)
