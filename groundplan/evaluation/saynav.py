"""The MultiON table of SayNav (Table 1): SR and SPL over all episodes, Kendall tau over successful
ones, each with n; SR with a 95% Wilson interval and SPL/tau with a normal-approximation interval.
Tau is tau-b, targets first seen at the same step being ties (``metrics.kendall_tau``), so a successful
episode that found every target at once has no tau and is not in its n.

:func:`paired_lines` compares every planner with the no-LLM exploration on the same houses, by the paired test
every table uses (:func:`~groundplan.evaluation.summary.paired_test`): SR by an exact McNemar test, SPL by
the mean paired difference with its 95% interval and a normal-approximation p-value. SR and SPL are
aggregated by :func:`~groundplan.core.measures.navigation_rates`, as the point-goal trainer does.
A table's planners may have run on different houses (a slow row on fewer): each row gives its
own n, and each paired comparison uses only the houses both planners ran. A row that read simulator truth
(the privileged baseline's target positions) is marked from its traces' declarations, with a footnote.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterable

from groundplan.core.measures import navigation_rates
from groundplan.core.stats import mean_interval
from groundplan.evaluation.marks import Marks, declarations_of, trace_marks
from groundplan.evaluation.summary import paired_test


def multion_rows(traces: Iterable[Any]) -> list[dict[str, Any]]:
    by: dict[str, list[Any]] = {}
    for t in traces:
        by.setdefault(t.planner, []).append(t)
    marks = trace_marks(t for ts in by.values() for t in ts)
    rows = []
    for planner, ts in by.items():
        n = len(ts)
        rates = navigation_rates([float(t.metrics.get("sr", 0.0)) for t in ts],
                                 [float(t.metrics.get("spl", 0.0)) for t in ts])
        taus = [float(t.metrics["kendall_tau"]) for t in ts if "kendall_tau" in t.metrics]
        tau = mean_interval(taus)
        rows.append({"planner": planner, "n": n, "sr": rates.sr, "sr_lo": rates.sr_ci[0], "sr_hi": rates.sr_ci[1],
                     "spl": rates.spl, "spl_lo": rates.spl_ci[0], "spl_hi": rates.spl_ci[1],
                     "tau": tau[0], "tau_n": len(taus), "tau_lo": tau[1], "tau_hi": tau[2],
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
    """Each planner against ``reference`` on the episodes both ran (same task and seed): the reference is
    side a and the planner side b of :func:`~groundplan.evaluation.summary.paired_test`, so the SPL
    difference is the planner's minus the reference's. An episode succeeded when its SR is above 0.5."""
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
        ref = [by[reference][k].metrics for k in keys]
        own = [eps[k].metrics for k in keys]
        sr = paired_test([(y.get("sr", 0) > 0.5, x.get("sr", 0) > 0.5) for y, x in zip(ref, own)], proportion=True)
        spl = paired_test([(y.get("spl", 0.0), x.get("spl", 0.0)) for y, x in zip(ref, own)], proportion=False)
        head = (f"- {planner} vs {reference} (n={spl['n_pairs']} paired houses): SR only-{planner} {sr['b_only']} / "
                f"only-reference {sr['a_only']}, McNemar p={sr['p_value']:.3g}; SPL difference {spl['diff']:+.3f}")
        if spl["p_value"] is None:
            out.append(head + " (no interval: fewer than 2 houses or no spread)")
            continue
        lo, hi = spl["ci"]
        out.append(head + f" [{lo:+.3f}, {hi:+.3f}], p={spl['p_value']:.3g}")
    return out


def report(traces: list[Any]) -> str:
    """The MultiON table, then each planner's paired comparison with the exploration baseline."""
    lines = paired_lines(traces)
    return markdown_table(multion_rows(traces)) + ("\n\n" + "\n".join(lines) if lines else "")


#: a page's block of the learned point-goal navigator's table, rendered from the file the trainer wrote
#: (``pointnav.json`` beside the model: its test report and each round's held-out scores) by :func:`block`
MARK = re.compile(r"(?P<open><!-- pointnav: (?P<path>\S+) -->\n)(?P<body>.*?)(?P<close><!-- /pointnav -->)", re.S)


def pointnav_markdown(meta: dict[str, Any]) -> str:
    """The point-goal navigators on the trainer's test episodes (SR with its Wilson interval, SPL with its
    normal interval, actions an episode), then each DAgger round's held-out SR and SPL, the kept round
    marked: what ``groundplan train`` of a pointnav config wrote in ``pointnav.json``."""
    m = meta["metrics"]
    n = int(m["test_n"])
    rows = [("A* on the map (OrNav)", "astar"), ("shortest-path expert (the teacher)", "expert"),
            (f"learned (RLlib {meta['algorithm'].upper()} + DAgger, round {meta['best_round']} of "
             f"0-{meta['rounds'] - 1})", "test")]
    out = [f"| navigator, {n} test episodes | SR (95% Wilson) | SPL (95% CI) | actions / episode |", "|---|---|---|---|"]
    for label, key in rows:
        out.append(f"| {label} | {100 * m[f'{key}_sr']:.1f}% [{100 * m[f'{key}_sr_lo']:.1f}, {100 * m[f'{key}_sr_hi']:.1f}] | "
                   f"{m[f'{key}_spl']:.3f} [{m[f'{key}_spl_lo']:.3f}, {m[f'{key}_spl_hi']:.3f}] | {m[f'{key}_steps']:.1f} |")
    if history := meta.get("history"):
        out += ["", f"| round | rows | held-out SR ({int(history[0]['val_n'])} episodes) | held-out SPL |", "|---|---|---|---|"]
        for h in history:
            kept = " (kept)" if int(h["round"]) == meta["best_round"] else ""
            name = "BC" if int(h["round"]) == 0 else f"DAgger {int(h['round'])}"
            out.append(f"| {name}{kept} | {int(h['rows']):,} | {100 * h['val_sr']:.1f}% | {h['val_spl']:.3f} |")
    return "\n".join(out) + "\n"


def block(data: Path, m: re.Match) -> str:
    """A ``<!-- pointnav: FILE -->`` block's tables, from the trainer's file."""
    return pointnav_markdown(json.loads(data.read_text(encoding="utf-8")))
