"""Summary tables computed from traces only, so every number traces back to its episodes."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass, field, replace
from typing import Iterable

from groundplan.core.errors import InvalidInputError
from groundplan.rollout.traces import EpisodeTrace

ALL = "all"
#: a row's own rates, which metric names may also refer to
ROW_RATES = ("execution_success", "plan_success", "mean_steps")


@dataclass
class SummaryRow:
    planner: str
    env: str
    family: str
    episodes: int
    plan_success: float | None  # fraction; None when the env cannot replay plans
    execution_success: float
    mean_steps: float
    errors: int
    metrics: dict[str, float] = field(default_factory=dict)  # mean of each env metric over the episodes

    def to_dict(self) -> dict:
        return asdict(self)


def _row(planner: str, env: str, family: str, traces: list[EpisodeTrace]) -> SummaryRow:
    n = len(traces)
    plan = [t.plan_success for t in traces if t.plan_success is not None]
    return SummaryRow(
        planner=planner,
        env=env,
        family=family,
        episodes=n,
        plan_success=(sum(plan) / len(plan)) if plan else None,
        execution_success=sum(t.execution_success for t in traces) / n,
        mean_steps=sum(len(t.plan) for t in traces) / n,
        errors=sum(t.error is not None for t in traces),
        metrics={k: sum(t.metrics.get(k, 0.0) for t in traces) / n for k in sorted({k for t in traces for k in t.metrics})},
    )


def summarize(traces: Iterable[EpisodeTrace], planner_order: list[str] | None = None) -> list[SummaryRow]:
    """One row per (planner, env, family) plus an ``all`` row per (planner, env)."""
    groups: dict[tuple[str, str], dict[str, list[EpisodeTrace]]] = defaultdict(lambda: defaultdict(list))
    for t in traces:
        groups[(t.planner, t.env)][t.family].append(t)
    order = {p: i for i, p in enumerate(planner_order or [])}
    rows: list[SummaryRow] = []
    for (planner, env), fams in sorted(groups.items(), key=lambda kv: (order.get(kv[0][0], 1e9), kv[0])):
        for family in fams:  # first-seen order: the env's own family order (e.g. Table 1's)
            rows.append(_row(planner, env, family, fams[family]))
        rows.append(_row(planner, env, ALL, [t for ts in fams.values() for t in ts]))
    return rows


def metric_value(row: SummaryRow, name: str) -> float:
    """A row's value of an env metric or of one of the row's own rates (missing: 0)."""
    if name in ROW_RATES:
        return float(getattr(row, name) or 0.0)
    return float(row.metrics.get(name, 0.0))


def select_best(rows: list[SummaryRow], grids: dict[str, list[str]], select_by: list[str]) -> dict[str, SummaryRow]:
    """Grid label -> the all-episodes row of its best variant, ranked by the sum of ``select_by`` (the
    first variant wins ties). Zero-Shot Planners (Sec. 3.5, A.1) pick each method's run this way,
    from LCS + executability, so that no method is compared at a worse setting than another."""
    overall = {r.planner: r for r in rows if r.family == ALL}
    known = {*ROW_RATES, *(k for r in overall.values() for k in r.metrics)}
    unknown = [m for m in select_by if m not in known]
    if grids and overall and unknown:
        raise InvalidInputError(f"select_by names unknown metrics {unknown}; this sweep has: {', '.join(sorted(known))}")
    best: dict[str, SummaryRow] = {}
    for grid, labels in grids.items():
        ran = [overall[label] for label in labels if label in overall]
        if ran:
            best[grid] = max(ran, key=lambda r: sum(metric_value(r, m) for m in select_by))
    return best


def method_rows(rows: list[SummaryRow], labels: list[tuple[str, str | None]],
                best: dict[str, SummaryRow]) -> list[SummaryRow]:
    """One all-episodes row per method, in config order: a grid's best variant renamed to the grid's
    label, a planner without a grid as it is. ``labels`` are the (label, grid label or None) pairs of
    the config's planners."""
    overall = {r.planner: r for r in rows if r.family == ALL}
    out: list[SummaryRow] = []
    for label, group in labels:
        if group is None and label in overall:
            out.append(overall[label])
        elif group is not None and group in best and all(r.planner != group for r in out):
            out.append(replace(best[group], planner=group))
    return out


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.0f}%"


def render_table(rows: list[SummaryRow], title: str = "Results"):
    """A rich table: families down, planners across, plan / execution success in each cell."""
    from rich.markup import escape
    from rich.table import Table

    planners = list(dict.fromkeys(r.planner for r in rows))
    has_plan = any(r.plan_success is not None for r in rows)  # envs that cannot replay plans: exec only
    families = list(dict.fromkeys(r.family for r in rows if r.family != ALL)) + [ALL]
    cell = {(r.planner, r.family): r for r in rows}
    table = Table(title=f"{title}: " + ("plan success / execution success" if has_plan else "success"))
    table.add_column("family")
    table.add_column("n", justify="right")
    for p in planners:
        table.add_column(escape(f"{p}\nplan / exec" if has_plan else f"{p}\nsuccess"), justify="center")
    for fam in families:
        n = next((cell[(p, fam)].episodes for p in planners if (p, fam) in cell), 0)
        cells = []
        for p in planners:
            r = cell.get((p, fam))
            if r is None:
                cells.append("")
            else:
                cells.append(f"{_pct(r.plan_success)} / {_pct(r.execution_success)}" if has_plan else _pct(r.execution_success))
        table.add_row(fam, str(n), *cells, end_section=(fam == families[-2] if len(families) > 1 else False))
    return table


def render_metric_table(rows: list[SummaryRow], metrics: list[str], title: str = "Results", family: str = ALL):
    """A rich table with planners down and the chosen env metrics across (e.g. Zero-Shot Planners'
    Table 2: executability, LCS, plan length), for one family (default: all episodes)."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=title)
    table.add_column("planner")
    table.add_column("n", justify="right")
    for m in metrics:
        table.add_column(m, justify="right")
    for r in rows:
        if r.family != family:
            continue
        vals = [getattr(r, m) if m in ROW_RATES else r.metrics.get(m) for m in metrics]
        table.add_row(escape(r.planner), str(r.episodes), *("—" if v is None else f"{v:.3f}" for v in vals))
    return table
