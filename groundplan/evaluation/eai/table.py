"""Per-model figures from verdicts: EAI's metrics (Li et al. 2024, Sec. 3.3, Table "action sequencing")
with n and 95% Wilson intervals, and the evaluator's own summary dictionary, rounded as it rounds.

Success and executability are proportions of the scored tasks, each with its Wilson interval
(:func:`groundplan.core.stats.wilson_interval`, the one every groundplan table uses). The error counts
follow the semantics' counting: ``official`` counts a non-JSON answer twice among parsing errors and
every additional step (not every task), and carries each model's runtime-error counts over to the models
scored after it (:func:`carry_runtime_errors`), as the evaluator does; ``corrected`` counts each model's
tasks. Goal
satisfaction is EAI's micro average: satisfied goals over all goals of a kind, summed over the scored
tasks (goals of one task are not independent, so it gets no binomial interval).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any, Iterable

from groundplan.core.stats import mcnemar_exact, wilson_interval
from groundplan.evaluation.eai.judge import Verdict
from groundplan.envs.virtualhome.eai.answer import INVALID_JSON
from groundplan.evaluation.eai.semantics import EAISemantics
from groundplan.evaluation.summary import format_rate, holm, paired_test

ERROR_COLUMNS = ("parsing", "hallucination", "parameter", "wrong_order", "missing_step", "affordance",
                 "additional_step")


@dataclass
class EAIRow:
    model: str
    semantics: str
    n: int
    successes: int
    success_ci: tuple[float, float]
    executable: int
    executable_ci: tuple[float, float]
    #: counts in the semantics' counting (see the module)
    errors: dict[str, int] = field(default_factory=dict)
    #: kind -> (satisfied, total), kinds node, edge, action, all
    goals: dict[str, tuple[int, int]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def aggregate(model: str, verdicts: Iterable[Verdict], semantics: EAISemantics) -> EAIRow:
    """One row from the verdicts of one model under one semantics (unscored tasks left out)."""
    scored = [v for v in verdicts if v.scored]
    n = len(scored)
    successes = sum(v.success for v in scored)
    executable = sum(v.executable for v in scored)
    errors = {c: 0 for c in ERROR_COLUMNS}
    for v in scored:
        if v.error_type == "parsing":
            twice = not semantics.parsing_counted_once and v.parse_error == INVALID_JSON
            errors["parsing"] += 2 if twice else 1
        elif v.error_type in errors:
            errors[v.error_type] += 1
        elif v.error_type is not None:
            errors[v.error_type] = errors.get(v.error_type, 0) + 1
        if v.additional_steps:
            errors["additional_step"] += 1 if semantics.additional_step_per_task else len(v.additional_steps)
    goals = {kind: (sum(getattr(v, f"{kind}_matched") for v in scored), sum(getattr(v, f"{kind}_total") for v in scored))
             for kind in ("node", "edge", "action")}
    goals["all"] = (sum(g[0] for g in goals.values()), sum(g[1] for g in goals.values()))
    return EAIRow(model, semantics.name, n, successes, wilson_interval(successes, n), executable,
                  wilson_interval(executable, n), errors, goals)


RUNTIME_COLUMNS = ("wrong_order", "missing_step", "affordance", "additional_step")


def carry_runtime_errors(rows: list[EAIRow], semantics: EAISemantics) -> list[EAIRow]:
    """``rows`` (in the evaluator's model order) with the runtime-error counts as the evaluator reports
    them: unless ``runtime_errors_per_model``, each model's counts include every earlier model's, since
    the evaluator's counters outlive its loop over models."""
    if semantics.runtime_errors_per_model:
        return rows
    out, carried = [], dict.fromkeys(RUNTIME_COLUMNS, 0)
    for r in rows:
        carried = {c: carried[c] + r.errors[c] for c in RUNTIME_COLUMNS}
        out.append(replace(r, errors={**r.errors, **carried}))
    return out


def evaluator_model_order(folder: str) -> list[str]:
    """The order in which EAI's evaluator scores the models of a response folder (``os.listdir``'s, which
    its carried-over runtime counts depend on)."""
    from virtualhome_eval.simulation.evolving_graph.eval_utils import extract_model_names

    return extract_model_names(folder)


def official_summary(row: EAIRow) -> dict[str, Any]:
    """The evaluator's ``summary.json`` for this row, with its rounding (percent; 4 decimals, the
    execution rate 1)."""
    n = row.n

    def pct(k: int, d: int = n, digits: int = 4) -> float | None:
        return round(100.0 * k / d, digits) if d else None  # the evaluator divides by zero here

    e, g = row.errors, row.goals
    return {
        "goal_evaluation": {
            "task_success_rate": pct(row.successes),
            "state_goal": pct(*g["node"]), "relation_goal": pct(*g["edge"]), "action_goal": pct(*g["action"]),
            "total_goal": pct(*g["all"]),
        },
        "trajectory_evaluation": {
            "execution_success_rate": pct(row.executable, n, 1),
            "grammar_error": {"parsing": pct(e["parsing"]), "hallucination": pct(e["hallucination"]),
                              "predicate_argument_number": pct(e["parameter"])},
            "runtime_error": {"wrong_order": pct(e["wrong_order"]), "missing_step": pct(e["missing_step"]),
                              "affordance_error": pct(e["affordance"]), "additional_step": pct(e["additional_step"])},
        },
    }


def _goal_cell(pair: tuple[int, int]) -> str:
    k, d = pair
    return "—" if d == 0 else f"{100 * k / d:.1f}% ({k}/{d})"


#: the columns of a row's table (:func:`row_cells`)
ROW_COLUMNS = ("model", "n", "success", "executable", *ERROR_COLUMNS, "node goals", "edge goals", "action goals",
               "all goals")


def row_cells(r: EAIRow) -> list[str]:
    """One row's cells, in :data:`ROW_COLUMNS` order: the printed table's and the results page's."""
    return [r.model, str(r.n), format_rate(r.successes, r.n, *r.success_ci),
            format_rate(r.executable, r.n, *r.executable_ci), *(str(r.errors.get(c, 0)) for c in ERROR_COLUMNS),
            *(_goal_cell(r.goals[k]) for k in ("node", "edge", "action", "all"))]


CORRECTIONS_TITLE = ("Each correction alone on official, per model: verdicts changed / change in successes "
                     "(+Nt/-Nt tasks added/dropped); count corrections: change per column")

#: short names of the error columns in a count correction's cell (:func:`correction_cell`)
_SHORT = {"parsing": "pa", "wrong_order": "wo", "missing_step": "ms", "affordance": "af", "additional_step": "ad"}


def correction_cell(d: dict[str, int]) -> str:
    """What one correction alone changes for one model. A verdict correction's cell is ``changed / Δsuccess``
    (verdicts it changes on the tasks both score / change in successes) with ``+Nt``/``-Nt`` for tasks it
    adds or drops; a count correction's cell is the change in each column it touches (``ms`` missing step,
    ``af`` affordance, ``ad`` additional step, ``wo`` wrong order, ``pa`` parsing)."""
    if "verdicts_changed" in d:
        cell = f"{d['verdicts_changed']} / {d['success_delta']:+d}"
        cell += f" +{d['tasks_added']}t" if d["tasks_added"] else ""
        return cell + (f" -{d['tasks_dropped']}t" if d["tasks_dropped"] else "")
    return " ".join(f"{_SHORT.get(k.removesuffix('_delta'), k)}{v:+d}" for k, v in d.items()) or "0"


def render_rows(rows: list[EAIRow], title: str):
    """A rich table: models down; n, success and executability with 95% Wilson intervals, the error
    counts and goal satisfaction by kind across."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=escape(f"{title} (rates: % [95% Wilson interval])"))
    for col in ROW_COLUMNS:
        table.add_column(col, justify="left" if col == "model" else "right", no_wrap=True)
    for r in rows:  # a run's row is named 'label [llm]': text, not rich markup
        model, *cells = row_cells(r)
        table.add_row(escape(model), *cells)
    return table


def paired_verdicts(a: Iterable[Verdict], b: Iterable[Verdict], field: str) -> dict[str, Any] | None:
    """The exact McNemar test (:func:`~groundplan.evaluation.summary.paired_test`) of one 0/1 verdict field
    (``success``, ``executable``) between two verdict lists, on the tasks both score; None when they share
    none."""
    va = {v.task_id: v for v in a if v.scored}
    vb = {v.task_id: v for v in b if v.scored}
    return paired_test(((getattr(va[k], field), getattr(vb[k], field)) for k in va if k in vb), proportion=True)


def paired_success_tests(official: dict[str, list[Verdict]], corrected: dict[str, list[Verdict]]) -> list[dict[str, Any]]:
    """Per model, official against corrected success on the tasks both semantics score: the exact McNemar
    test (:func:`~groundplan.core.stats.mcnemar_exact`), Holm-adjusted over the models
    (:func:`~groundplan.evaluation.summary.holm`), so a reader sees for which models the corrections
    move the success rate beyond chance."""
    out = []
    for model in official:
        c = paired_verdicts(official[model], corrected.get(model, []), "success") or {
            "n_pairs": 0, "both": 0, "a_only": 0, "b_only": 0, "neither": 0, "p_value": mcnemar_exact(0, 0)}
        out.append({"model": model, "n_pairs": c["n_pairs"], "both": c["both"], "official_only": c["a_only"],
                    "corrected_only": c["b_only"], "neither": c["neither"], "p_value": c["p_value"]})
    return holm(out, "models")
