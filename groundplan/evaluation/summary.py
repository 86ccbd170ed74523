"""Summary tables computed from traces only, so every number traces back to its episodes.

Every success rate carries its n and a 95% Wilson score interval (:func:`wilson_interval`), and every
two planners run on the same episodes (same env, task and seed) are compared by an exact McNemar test
(:func:`mcnemar_exact`, :func:`paired_tests`), its p-value Holm-adjusted over the env's tests, so a reader
can see when a handful of episodes decides nothing. :func:`summary_document` is what ``summary.json`` holds.

:func:`paired_test` is the one paired test of every table (this summary, SayNav's, SayCanPay's and
``groundplan compare``): exact McNemar for a 0/1 measure, the mean paired difference with its normal
interval for any other; :func:`holm` is the one place a family of them is Holm-adjusted.

Each row carries the declarations its traces record (``SummaryRow.oracles``: what the planner read of the
simulator's truth, :mod:`groundplan.core.truth`); the rendered tables mark a row from them (``†`` an oracle,
``‡`` a stand-in, :mod:`groundplan.evaluation.marks`) and say under the table what each marked row read.
"""
from __future__ import annotations

import io
import json
import math
from collections import defaultdict
from dataclasses import asdict, dataclass, field, replace
from itertools import combinations
from pathlib import Path
from typing import Any, Iterable, Sequence

from groundplan.core.errors import InvalidInputError
from groundplan.core.measures import measure_info
from groundplan.core.stats import holm_adjust, mcnemar_exact, mean_interval, mean_se, wilson_interval
from groundplan.core.truth import unique
from groundplan.evaluation.marks import Marks, declarations_of
from groundplan.rollout.traces import EpisodeTrace

ALL = "all"
#: a row's own rates, which metric names may also refer to
ROW_RATES = ("execution_success", "plan_success", "mean_steps")


def is_proportion(name: str) -> bool:
    """A measure declared 0/1 per episode (``Measure.proportion``), so its mean is a proportion with a Wilson
    interval; the others, e.g. LCS or step counts, are means of non-binary values and get none."""
    info = measure_info(name)
    return info is not None and info.proportion


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
    #: episodes whose goal held in the final state (execution_success = this / episodes)
    execution_successes: int = 0
    #: 95% Wilson interval of execution_success
    execution_ci: tuple[float, float] = (0.0, 1.0)
    #: episodes with a plan-success verdict (the env can replay plans), the successes among them, and
    #: the 95% Wilson interval (None when the env cannot replay)
    plan_episodes: int = 0
    plan_successes: int | None = None
    plan_ci: tuple[float, float] | None = None
    #: for env measures that are 0/1 per episode (:func:`is_proportion`): [successes, n, lo, hi]
    metric_cis: dict[str, list[float]] = field(default_factory=dict)
    #: what the planner declared it reads of the simulator's truth, as its traces record it
    #: (``OracleDeclaration.to_dict`` each); the tables' mark comes from here
    oracles: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict:
        out = asdict(self)
        out["execution_ci"] = list(self.execution_ci)
        out["plan_ci"] = None if self.plan_ci is None else list(self.plan_ci)
        return out

    def interval(self, name: str) -> tuple[int, int, float, float] | None:
        """(successes, n, lo, hi) of a rate of this row, or None when it is not a proportion."""
        if name == "execution_success":
            return (self.execution_successes, self.episodes, *self.execution_ci)
        if name == "plan_success":
            if self.plan_ci is None or self.plan_successes is None:
                return None
            return (self.plan_successes, self.plan_episodes, *self.plan_ci)
        if name in self.metric_cis:
            k, n, lo, hi = self.metric_cis[name]
            return int(k), int(n), lo, hi
        return None


def _is_binary(values: list[float]) -> bool:
    return all(v in (0.0, 1.0) for v in values)


def _row(planner: str, env: str, family: str, traces: list[EpisodeTrace]) -> SummaryRow:
    n = len(traces)
    plan = [t.plan_success for t in traces if t.plan_success is not None]
    executed = sum(bool(t.execution_success) for t in traces)
    names = sorted({k for t in traces for k in t.metrics})
    metric_cis: dict[str, list[float]] = {}
    means: dict[str, float] = {}
    for k in names:
        info = measure_info(k)
        if info is not None and info.partial:  # e.g. Kendall tau: over the episodes that define it
            present = [float(t.metrics[k]) for t in traces if k in t.metrics]
            means[k] = sum(present) / len(present)
            continue
        values = [float(t.metrics.get(k, 0.0)) for t in traces]
        means[k] = sum(values) / n
        if info is not None and info.proportion and _is_binary(values):
            hits = int(sum(values))
            metric_cis[k] = [hits, n, *wilson_interval(hits, n)]
    return SummaryRow(
        planner=planner,
        env=env,
        family=family,
        episodes=n,
        plan_success=(sum(plan) / len(plan)) if plan else None,
        execution_success=executed / n,
        mean_steps=sum(len(t.plan) for t in traces) / n,
        errors=sum(t.error is not None for t in traces),
        metrics=means,
        execution_successes=executed,
        execution_ci=wilson_interval(executed, n),
        plan_episodes=len(plan),
        plan_successes=sum(plan) if plan else None,
        plan_ci=wilson_interval(sum(plan), len(plan)) if plan else None,
        metric_cis=metric_cis,
        oracles=[d.to_dict() for d in unique(d for t in traces for d in declarations_of(t.oracles))],
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


def select_best(rows: list[SummaryRow], grids: dict[str, list[str]], select_by: list[str],
                tie_break: Sequence[str] = ()) -> dict[str, SummaryRow]:
    """Grid label -> the all-episodes row of its best variant, ranked by the sum of ``select_by``, a tie
    by the sum of ``tie_break``, and the first variant winning what ties remain. Zero-Shot Planners
    (Sec. 3.5, A.1) pick each method's run this way, from LCS + executability, so that no method is
    compared at a worse setting than another."""
    overall = {r.planner: r for r in rows if r.family == ALL}
    known = {*ROW_RATES, *(k for r in overall.values() for k in r.metrics)}
    unknown = [m for m in [*select_by, *tie_break] if m not in known]
    if grids and overall and unknown:
        raise InvalidInputError(f"select_by/select_tie_break name unknown metrics {unknown}; this sweep has: {', '.join(sorted(known))}")
    best: dict[str, SummaryRow] = {}
    for grid, labels in grids.items():
        ran = [overall[label] for label in labels if label in overall]
        if ran:
            best[grid] = max(ran, key=lambda r: (sum(metric_value(r, m) for m in select_by),
                                                 sum(metric_value(r, m) for m in tie_break)))
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


# ------------------------------------------------------------------------------------ paired tests
def episode_key(trace: EpisodeTrace) -> tuple[str, int]:
    """What makes two traces of one env the same episode for a paired test: the task and the seed (the
    env's reset is seeded, so both planners start from the same world)."""
    return trace.task_id, trace.seed


def outcome(trace: EpisodeTrace, measure: str) -> bool | None:
    """A trace's 0/1 outcome on ``measure`` (execution or plan success, or an env measure), or None where it
    has none (no plan-success verdict, a measure not reported or not 0/1), so the pair is left out."""
    if measure == "execution_success":
        return bool(trace.execution_success)
    if measure == "plan_success":
        return None if trace.plan_success is None else bool(trace.plan_success)
    value = trace.metrics.get(measure)
    return None if value is None or value not in (0.0, 1.0) else bool(value)


def outcomes(pairs: Iterable[tuple[EpisodeTrace, EpisodeTrace]], measure: str) -> list[tuple[bool | None, bool | None]]:
    """Each paired episode's (a's, b's) 0/1 outcome on ``measure`` (:func:`outcome`), what
    :func:`paired_test` takes for a proportion."""
    return [(outcome(x, measure), outcome(y, measure)) for x, y in pairs]


def paired_test(values: Iterable[tuple[Any, Any]], proportion: bool) -> dict[str, Any] | None:
    """The paired test of every table: two sides (a, b) on the same episodes, one (a's value, b's value)
    per shared episode. Pairing is what makes a handful of episodes informative: the two sides met the
    same tasks, seeds and houses, so the variation between episodes cancels. Pairs where either side has
    no value (None) are left out; None when no pair is left.

    - ``proportion`` (0/1 per episode, ``Measure.proportion``): the exact McNemar test (McNemar 1947,
      :func:`~groundplan.core.stats.mcnemar_exact`). Only the discordant pairs (solved by one side alone)
      say anything about the difference, and under the null each is a fair coin, so p is the two-sided
      binomial tail on them. The record has the pair counts (both / only a / only b / neither), each
      side's rate on the pairs and ``p_value``.
    - any other measure (SPL, LCS, path length): the mean paired difference b − a with its 95% normal
      interval, mean ± 1.96 SE of the per-pair differences (:func:`~groundplan.core.stats.mean_interval`),
      and the two-sided normal-approximation p-value of that mean, 2·(1 − Φ(|mean| / SE)). ``p_value``
      is None where the approximation has nothing to stand on: fewer than two pairs or no spread.

    Adjust a family of these records with :func:`holm` before calling any difference significant."""
    kept = [(x, y) for x, y in values if x is not None and y is not None]
    if not kept:
        return None
    n = len(kept)
    if proportion:
        both = sum(bool(x) and bool(y) for x, y in kept)
        a_only = sum(bool(x) and not y for x, y in kept)
        b_only = sum(bool(y) and not x for x, y in kept)
        return {
            "n_pairs": n, "both": both, "a_only": a_only, "b_only": b_only, "neither": n - both - a_only - b_only,
            "a_rate": (both + a_only) / n, "b_rate": (both + b_only) / n,
            "p_value": mcnemar_exact(a_only, b_only),
            "test": "McNemar exact, two-sided (binomial on discordant pairs)",
        }
    diffs = [float(y) - float(x) for x, y in kept]
    mean, se = mean_se(diffs)
    _, lo, hi = mean_interval(diffs)
    return {
        "n_pairs": n, "a_mean": sum(float(x) for x, _ in kept) / n, "b_mean": sum(float(y) for _, y in kept) / n,
        "diff": mean, "ci": [lo, hi], "se": se,
        "p_value": None if n < 2 or se == 0 else math.erfc(abs(mean) / se / math.sqrt(2)),
        "test": "paired mean difference b - a, 95% normal interval and two-sided z-test",
    }


def holm(records: list[dict[str, Any]], family: str, alpha: float | None = None) -> list[dict[str, Any]]:
    """Holm-adjust (Holm 1979, :func:`~groundplan.core.stats.holm_adjust`) the ``p_value`` of each record
    of one family, in place: ``p_holm``, ``significant`` (``p_holm`` below ``alpha``, when one is given) and
    ``adjustment``, which names the family (``"Holm-Bonferroni over the <n> <family>"``). A table makes many
    paired tests; each at 0.05 would find a difference by chance, so a difference is called significant only
    by the adjusted value, over the family a reader scans. Returns ``records``."""
    for record, adjusted in zip(records, holm_adjust([r["p_value"] for r in records])):
        record["p_holm"] = adjusted
        if alpha is not None:
            record["significant"] = adjusted < alpha
        record["adjustment"] = f"Holm-Bonferroni over the {len(records)} {family}"
    return records


def paired_tests(traces: Iterable[EpisodeTrace], planner_order: list[str] | None = None) -> list[dict[str, Any]]:
    """An exact McNemar test (:func:`mcnemar_exact`) between every two planners of an env, on the
    episodes both ran (same task id and seed), for each 0/1 measure both have (execution success, plan
    success where the env replays plans, and the env's proportion measures). Each record names the two
    planners, the measure, the pair counts (both / only a / only b / neither), each planner's rate on
    the paired episodes, the two-sided p-value and ``p_holm``: the p-value Holm-adjusted
    (:func:`~groundplan.core.stats.holm_adjust`) over all the tests of the same env, the family a reader
    scans for a difference. Call a difference significant only by ``p_holm``."""
    by_env: dict[str, dict[str, dict[tuple[str, int], EpisodeTrace]]] = defaultdict(lambda: defaultdict(dict))
    for t in traces:
        by_env[t.env][t.planner].setdefault(episode_key(t), t)
    order = {p: i for i, p in enumerate(planner_order or [])}
    out: list[dict[str, Any]] = []
    for env, planners in sorted(by_env.items()):
        family_start = len(out)
        names = sorted(planners, key=lambda p: (order.get(p, 1e9), p))
        for a, b in combinations(names, 2):
            keys = [k for k in planners[a] if k in planners[b]]
            if not keys:
                continue
            measures = ["execution_success", "plan_success",
                        *sorted({m for k in keys for m in planners[a][k].metrics
                                 if m not in ROW_RATES and is_proportion(m)})]
            for m in measures:
                record = paired_test(outcomes([(planners[a][k], planners[b][k]) for k in keys], m), proportion=True)
                if record is not None:
                    out.append({"env": env, "measure": m, "a": a, "b": b, **record})
        holm(out[family_start:], f"paired tests of env '{env}'")
    return out


def summary_document(rows: list[SummaryRow], traces: Iterable[EpisodeTrace],
                     planner_order: list[str] | None = None) -> dict[str, Any]:
    """What ``summary.json`` holds: the rows (each rate with n and its 95% Wilson interval) and the
    paired McNemar tests between planners on the same episodes."""
    return {
        "interval": "95% Wilson score interval",
        "rows": [r.to_dict() for r in rows],
        "paired_tests": paired_tests(traces, planner_order),
    }


def write_summary(path: str | Path, rows: list[SummaryRow], traces: Iterable[EpisodeTrace],
                  planner_order: list[str] | None = None) -> Path:
    """Write :func:`summary_document` as JSON to ``path`` and return the path."""
    path = Path(path)
    path.write_text(json.dumps(summary_document(rows, traces, planner_order), indent=2))
    return path


# ------------------------------------------------------------------------------------ rendering
def row_marks(rows: Iterable[SummaryRow]) -> Marks:
    """Each planner's declarations, from its rows (the mark and footnotes the tables print)."""
    by: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by.setdefault(r.planner, []).extend(r.oracles)
    return Marks({planner: declarations_of(ds) for planner, ds in by.items()})


def _caption(marks: Marks, planners: list[str]) -> str | None:
    """The footnotes under a table (what each marked row read), or None when no row is marked."""
    from rich.markup import escape

    lines = marks.footnotes(planners)
    return escape("\n".join(lines)) if lines else None


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.0f}%"


def format_rate(successes: int, n: int, lo: float, hi: float) -> str:
    """``"25% [9–53]"``: the rate and its 95% interval in percent."""
    rate = successes / n if n else 0.0
    return f"{100 * rate:.0f}% [{100 * lo:.0f}–{100 * hi:.0f}]"


def _rate_cell(row: SummaryRow, name: str, with_n: bool = False) -> str:
    ci = row.interval(name)
    if ci is None:
        value = getattr(row, name, None)
        return _pct(value)
    text = format_rate(*ci)
    return f"{text} n={ci[1]}" if with_n else text


def render_table(rows: list[SummaryRow], title: str = "Results"):
    """A rich table: families down, planners across; each cell is a success rate with its 95% Wilson
    interval, one column per planner for execution success and, for envs that replay plans, one for
    plan success. The n column is the episodes per planner (cells add ``n=`` where planners differ)."""
    from rich.markup import escape
    from rich.table import Table

    planners = list(dict.fromkeys(r.planner for r in rows))
    has_plan = any(r.plan_success is not None for r in rows)  # envs that cannot replay plans: exec only
    families = list(dict.fromkeys(r.family for r in rows if r.family != ALL)) + [ALL]
    cell = {(r.planner, r.family): r for r in rows}
    what = "plan success / execution success" if has_plan else "success"
    marks = row_marks(rows)
    table = Table(title=f"{title}: {what}, % [95% Wilson interval]", caption=_caption(marks, planners),
                  caption_justify="left")
    table.add_column("family", no_wrap=True)
    table.add_column("n", justify="right", no_wrap=True)
    measures = ["plan_success", "execution_success"] if has_plan else ["execution_success"]
    for p in planners:
        for m in measures:
            head = {"plan_success": "plan", "execution_success": "exec" if has_plan else "success"}[m]
            table.add_column(escape(f"{marks.label(p)}\n{head}"), justify="center", no_wrap=True)
    for fam in families:
        ns = [cell[(p, fam)].episodes for p in planners if (p, fam) in cell]
        same = len(set(ns)) <= 1
        cells = []
        for p in planners:
            r = cell.get((p, fam))
            for m in measures:
                cells.append("" if r is None else _rate_cell(r, m, with_n=not same))
        n_text = str(ns[0]) if ns and same else "/".join(map(str, ns))
        table.add_row(fam, n_text, *cells, end_section=(fam == families[-2] if len(families) > 1 else False))
    return table


def render_metric_table(rows: list[SummaryRow], metrics: list[str], title: str = "Results", family: str = ALL):
    """A rich table with planners down and the chosen env metrics across (e.g. Zero-Shot Planners'
    Table 2: executability, LCS, plan length), for one family (default: all episodes)."""
    from rich.markup import escape
    from rich.table import Table

    shown = [r for r in rows if r.family == family]
    marks = row_marks(shown)
    table = Table(title=f"{title} (rates: % [95% Wilson interval])",
                  caption=_caption(marks, [r.planner for r in shown]), caption_justify="left")
    table.add_column("planner", no_wrap=True)
    table.add_column("n", justify="right", no_wrap=True)
    for m in metrics:
        table.add_column(m, justify="right", no_wrap=True)
    for r in rows:
        if r.family != family:
            continue
        cells = []
        for m in metrics:
            ci = r.interval(m)
            v = getattr(r, m) if m in ROW_RATES else r.metrics.get(m)
            cells.append(format_rate(*ci) if ci is not None and ci[1] > 0 else ("—" if v is None else f"{v:.3f}"))
        table.add_row(escape(marks.label(r.planner)), str(r.episodes), *cells)
    return table


def render_text(renderable: Any) -> str:
    """A rich renderable as plain text at its natural width (no colour, nothing cut to 80 columns), for
    output that is not a terminal: CI logs, redirected stdout, files."""
    from rich.console import Console

    buf = io.StringIO()
    Console(file=buf, width=10_000, color_system=None, force_terminal=False, soft_wrap=False,
            legacy_windows=False).print(renderable)
    return "\n".join(line.rstrip() for line in buf.getvalue().splitlines()) + "\n"


def print_table(renderable: Any, console: Any = None) -> None:
    """Print a table: through ``console`` (a rich Console) on a terminal, where it wraps to the window;
    as plain text at full width otherwise, so redirected output keeps every column whole."""
    import sys

    if console is not None and console.is_terminal:
        console.print(renderable)
        return
    stream = getattr(console, "file", None) or sys.stdout
    stream.write(render_text(renderable))
    stream.flush()
