"""SayCanPay's result tables from a run's traces (Hazra et al., Tables 3–5), each rate with n and a 95%
Wilson interval.

- success: planning success (the goal holds after the plan; in a noise-free env this is plan success);
- cost-effective: success with a plan no longer than the expert's (Sec. 7.3, Table 4: "success with
  the expert plan's length"), the expert being the task's reference plan; ``done`` is not counted;
- mean length: actions per plan (done excluded).

``groundplan tables <run_dir> [<run_dir> ...] [--env kitchen] [--split test]`` prints a
Markdown table and the paired comparisons behind the paper's claims (:data:`PAIRS`), on success and on
cost-effectiveness: each an exact McNemar test on the shared episodes, its p-value Holm-adjusted over all
the table's paired tests (12 for the six pairs on two measures), and called significant only after that.

A Greedy-vs-Beam line compares decoders only if both were offered the same actions at each step
(Sec. 7.1's list of admissible actions): Greedy-Action reads the list of the state it is in, Beam-Action
(Sec. 5.2) plans ahead and is offered the list of the state each beam predicts when the env gives it an
action model. Where its decisions record that it was offered the first observation's list instead (or do
not record it), and the env's list can change from state to state (it does not declare
``fixed_actions``), the line says "not like-for-like" and draws no conclusion.

Rows that read simulator truth are marked from what their traces record as declared (``†`` an oracle:
the oracle Can, Perfect-Say; ``‡`` a stand-in), never from their labels, and the oracle rows come last, as
in the paper's tables; the footnotes under the table say what each marked row read.
"""
from __future__ import annotations

import dataclasses
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from groundplan.core.stats import wilson_interval
from groundplan.core.truth import OracleDeclaration
from groundplan.evaluation.marks import Marks, trace_marks
from groundplan.evaluation.summary import holm, paired_tests
from groundplan.rollout.traces import EpisodeTrace

#: (better-or-equal, baseline) pairs the paper's claims are about (Sec. 7: BA-SCP >= GA-SCP >= GT; Can/Pay,
#: and Can alone, help over Say alone)
PAIRS = (("GA-SCP", "GT"), ("BA-SCP", "GA-SCP"), ("GA-SCP", "GA-Say"), ("BA-SCP", "BA-Say"), ("GA-SC", "GA-Say"),
         ("BA-SC", "BA-Say"))
#: family-wise error rate at which a Holm-adjusted p-value is called significant
ALPHA = 0.05
#: what a Beam-Action decision records (``actions_from``) when it was offered the predicted state's list
FROM_MODEL = "action model"


@dataclass
class Row:
    planner: str
    n: int
    success: int
    cost_effective: int
    mean_length: float
    errors: int
    #: what the row's planner declared it reads of the simulator's truth (from its traces)
    oracles: tuple[OracleDeclaration, ...] = field(default_factory=tuple)

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
    marks = trace_marks(t for ts in by.values() for t in ts)
    rows = []
    for planner, ts in by.items():
        lengths = [plan_length(t, done_skill) for t in ts]
        ok = [bool(t.execution_success) for t in ts]
        ce = [bool(t.metrics["cost_effective"]) for t in ts]
        rows.append(Row(planner, len(ts), sum(ok), sum(ce), sum(lengths) / len(ts), sum(t.error is not None for t in ts),
                        marks.of(planner)))
    return sorted(rows, key=_order)


def _order(row: "Row") -> tuple:
    """Tables 3-5's row order: GT, GA-{Say, SC, SCP}, BA-{Say, SC, SCP}, then the rows that declare an
    oracle (from their declarations, not their labels)."""
    head, _, rest = row.planner.partition("-")
    score = rest.split(" ", 1)[0]
    return (any(d.is_oracle for d in row.oracles), ("GT", "GA", "BA").index(head) if head in ("GT", "GA", "BA") else 3,
            ("Say", "SC", "SCP").index(score) if score in ("Say", "SC", "SCP") else 3, row.planner)


def format_p(p: float) -> str:
    """Two decimals, or two significant digits below 0.01 (so a strong result does not read 0.00)."""
    return f"{p:.2f}" if p >= 0.01 else f"{p:.1e}"


def beam_action_sources(traces: Iterable[EpisodeTrace]) -> dict[str, set[str]]:
    """For each Beam-Action row (a planner whose decisions carry the search record), where the actions it
    was offered came from: what its decisions record as ``actions_from``, or "not recorded"."""
    out: dict[str, set[str]] = defaultdict(set)
    for t in traces:
        for s in t.steps:
            if "actions_from" in s.info:
                out[t.planner].add(str(s.info["actions_from"]))
            elif "search" in s.info:
                out[t.planner].add("not recorded")
    return dict(out)


def not_like_for_like(traces: Iterable[EpisodeTrace], fixed_actions: bool) -> dict[str, str]:
    """Beam-Action rows that cannot be compared with a Greedy row (module doc), each with the reason;
    none where the env lists the same actions in every state (``fixed_actions``)."""
    if fixed_actions:
        return {}
    return {row: f"{row} was offered the first observation's actions at every depth" if "first observation" in src
            else f"{row}'s traces do not record which actions it was offered"
            for row, src in beam_action_sources(traces).items() if src != {FROM_MODEL}}


def paired_report(traces: Iterable[EpisodeTrace], pairs: Sequence[tuple[str, str]] = PAIRS,
                  measures: Sequence[str] = ("execution_success",), fixed_actions: bool = False) -> list[str]:
    """For each pair of planners run on the same tasks and each of ``measures``: episodes only the first /
    only the second solved (``execution_success``, or ``cost_effective`` on traces from
    :func:`with_cost_effectiveness`), the exact McNemar p-value
    (:func:`~groundplan.evaluation.summary.paired_tests`: the planners are compared on identical episodes,
    not by their rates) and that p-value Holm-adjusted over every line of the report, the family one reads
    a table's claims from; "significant" only where the adjusted p is at most :data:`ALPHA`. A line that
    compares a Greedy row with a Beam-Action row that was not offered the same actions
    (:func:`not_like_for_like`) says so and draws no conclusion; it stays in the Holm family."""
    traces = list(traces)
    records = paired_tests(traces)
    beam_rows = set(beam_action_sources(traces))
    unlike = not_like_for_like(traces, fixed_actions)
    found = []
    for measure in measures:
        tests = {(r["a"], r["b"]): r for r in records if r["measure"] == measure}
        for a, b in pairs:
            if (a, b) in tests:
                r = tests[a, b]
                found.append((measure, a, b, r, r["a_only"], r["b_only"]))
            elif (b, a) in tests:
                r = tests[b, a]
                found.append((measure, a, b, r, r["b_only"], r["a_only"]))
    adjusted = [r["p_holm"] for r in holm([{"p_value": f[3]["p_value"]} for f in found], "lines of this report")]
    lines = []
    for (measure, a, b, r, a_only, b_only), p_holm in zip(found, adjusted):
        what = "solved" if measure == "execution_success" else measure.replace("_", "-")
        beam = [x for x in (a, b) if x in beam_rows]
        if len(beam) == 1 and beam[0] in unlike:
            verdict = f"not like-for-like: {unlike[beam[0]]}; no decoder conclusion"
        else:
            verdict = f"{'significant' if p_holm <= ALPHA else 'not significant'} at {ALPHA:g}"
        lines.append(f"{a} vs {b} on {r['n_pairs']} shared episodes: {a_only} {what} only by {a}, {b_only} only by "
                     f"{b}; exact McNemar p = {format_p(r['p_value'])}, Holm-adjusted p = {format_p(p_holm)} "
                     f"({verdict})")
    return lines


def paired(traces: Iterable[EpisodeTrace], pairs: Sequence[tuple[str, str]] = PAIRS,
           measure: str = "execution_success", fixed_actions: bool = False) -> list[str]:
    """:func:`paired_report` on one measure (the Holm family is then that measure's lines)."""
    return paired_report(traces, pairs, (measure,), fixed_actions)


def render(rows: Sequence[Row], title: str) -> str:
    """The Markdown table; a row that read simulator truth carries its mark, and the footnotes under the
    table say what it read (from the rows' declarations)."""
    marks = Marks({r.planner: r.oracles for r in rows})
    lines = [f"**{title}** (95% Wilson intervals)", "",
             "| planner | n | success | cost-effective | mean length | errors |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {marks.label(r.planner)} | {r.n} | {r.cell(r.success)} | {r.cell(r.cost_effective)} | "
                     f"{r.mean_length:.1f} | {r.errors} |")
    notes = marks.footnotes([r.planner for r in rows])
    return "\n".join(lines + ([""] + notes if notes else []))


def expert_lengths(env_name: str, env_options: dict | None = None) -> tuple[dict[str, int], str]:
    """The expert plan's length (done excluded) per task of the env's split, and the env's done skill."""
    from groundplan.factory import build_env

    env = build_env(env_name, env_options)
    done = env.done_skill
    return {t.task_id: len([a for a in t.reference_plan if a != done]) for t in env.tasks() if t.reference_plan}, done


def lists_fixed_actions(env_name: str) -> bool:
    """Whether the env declares that every observation lists the same actions (``fixed_actions``)."""
    from groundplan.envs import ENVS

    return bool(ENVS.get(env_name).capabilities.fixed_actions)


def scored_against_experts(traces: Sequence[EpisodeTrace], env: str, env_options: dict[str, Any] | None = None,
                           split: str | None = None) -> tuple[list[EpisodeTrace], str]:
    """The traces with ``cost_effective``, against the reference plans of the env the runs built: its
    options (``env_options``, the runs' config: a task id names another task in a draw of other sizes)
    and ``split`` (default: the options' own); and the env's done skill."""
    options = {**(env_options or {}), **({"split": split} if split else {})}
    lengths, done = expert_lengths(env, options or None)
    return with_cost_effectiveness(traces, lengths, done), done


def report(traces: Sequence[EpisodeTrace], title: str, env: str | None = None, split: str | None = None,
           env_options: dict[str, Any] | None = None) -> str:
    """The table and its paired tests as Markdown: the rows of :func:`table_rows`, then the paired
    comparisons (:data:`PAIRS`) on success and cost-effectiveness, Holm-adjusted, with a note for each
    Greedy-vs-Beam line that is not like-for-like. ``env``, ``env_options`` and ``split`` name the env
    whose reference plans are the experts (default: the traces' env, its default options and split)."""
    env = env or traces[0].env
    annotated, done = scored_against_experts(traces, env, env_options, split)
    out = [render(table_rows(annotated, done), title)]
    fixed = lists_fixed_actions(env)
    lines = paired_report(annotated, measures=("execution_success", "cost_effective"), fixed_actions=fixed)
    out.append(f"\nPaired tests (exact McNemar on the shared episodes), p-values Holm-adjusted over the {len(lines)} "
               f"tests below; significant means Holm-adjusted p <= {ALPHA:g}.")
    for row, why in sorted(not_like_for_like(annotated, fixed).items()):
        out.append(f"Note: {why}, while the Greedy rows were offered the actions of the state they were in, and "
                   f"env '{env}' lists different actions as its state changes: Greedy-vs-{row} lines are not "
                   "like-for-like and no decoder conclusion is read off them.")
    out += [f"- {line}" for line in lines]
    return "\n".join(out)
