"""``groundplan eai score``: every stored LLM answer of EAI's action-sequencing benchmark (Li et al.
2024, Sec. 3.3; the package keeps 15 models' outputs) scored by groundplan's judge, under the
``official`` and ``corrected`` semantics, with what each correction changes.

Work goes task by task (every model and semantics of one task together), so the judge's step cache
(:class:`~groundplan.evaluation.eai.judge.EAIJudge`) runs each distinct program prefix of a task once.
Written to the output folder:

- ``verdicts.jsonl``: one record per task per model per semantics (error type, failing step index,
  goal counts, whether the semantics scores the task);
- ``summary.json``: the rows (n, success and executability with 95% Wilson intervals, error counts,
  goal satisfaction by kind), the evaluator's model order, the evaluator-format summary of every
  official row, each correction's count per model, the paired official/corrected McNemar tests, the
  dropped tasks with their reasons and the timing;
- ``table.txt``: the printed tables.
"""
from __future__ import annotations

import json
import logging
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from groundplan.core.errors import InvalidInputError
from groundplan.core.paths import atomic_write_text
from groundplan.envs.virtualhome.eai.tasks import DROP_REASONS, load_tasks
from groundplan.evaluation.eai import leaderboard
from groundplan.evaluation.eai.judge import EAIJudge, Verdict
from groundplan.evaluation.eai.leaderboard import load_outputs, stored_dir, stored_models
from groundplan.evaluation.eai.semantics import (
    COUNT_CORRECTIONS,
    CORRECTIONS,
    SEMANTICS,
    VERDICT_CORRECTIONS,
    only,
)
from groundplan.evaluation.eai.table import (
    CORRECTIONS_TITLE,
    EAIRow,
    aggregate,
    carry_runtime_errors,
    correction_cell,
    evaluator_model_order,
    official_summary,
    paired_success_tests,
    render_rows,
)
from groundplan.evaluation.summary import render_text

log = logging.getLogger(__name__)


class EAIScoreConfig(BaseModel):
    """What ``groundplan eai score`` scores and where it writes."""

    model_config = ConfigDict(extra="forbid")

    output: Path = Field(description="folder for verdicts.jsonl, summary.json and table.txt")
    models: list[str] | None = Field(None, description="stored models to score (default: every stored file)")
    semantics: Literal["official", "corrected", "both"] = Field("both", description="which semantics' rows")
    responses: Path | None = Field(None, description="folder of <model>_outputs.json files (default: the "
                                                     "package's llm_response/action_sequence)")
    count_corrections: bool = Field(True, description="also judge official with each verdict correction alone, "
                                                      "to count what each changes per model")
    runs: list[Path] = Field(default_factory=list, description="groundplan eval run folders of the virtualhome_eai env "
                             "(or folders of runs): each planner a row on the leaderboard (open or closed loop)")
    answers: list[Path] = Field(default_factory=list, description="answer files in EAI's format made elsewhere (files "
                                "or folders of <label>_outputs.json): each an open-loop row on the leaderboard")


def responses_dir(config: EAIScoreConfig) -> Path:
    return config.responses or stored_dir()


def _outcome(v: Verdict) -> tuple[Any, ...]:
    return (v.success, v.executable, v.error_type)


def correction_counts(official: list[Verdict], alone: list[Verdict]) -> dict[str, int]:
    """What one correction changes for one model: tasks it adds to or drops from the scored set, verdicts
    (success, executability or error type) it changes on the tasks both score, and the change in
    successes and executable plans."""
    a = {v.task_id: v for v in official if v.scored}
    b = {v.task_id: v for v in alone if v.scored}
    both = [k for k in a if k in b]
    return {
        "tasks_added": len(set(b) - set(a)), "tasks_dropped": len(set(a) - set(b)),
        "verdicts_changed": sum(_outcome(a[k]) != _outcome(b[k]) for k in both),
        "success_changed": sum(a[k].success != b[k].success for k in both),
        "success_delta": sum(v.success for v in b.values()) - sum(v.success for v in a.values()),
        "executable_delta": sum(v.executable for v in b.values()) - sum(v.executable for v in a.values()),
    }


def score(config: EAIScoreConfig) -> dict[str, Any]:
    """Score every stored output (see the module); returns what ``summary.json`` holds plus the table text."""
    folder = responses_dir(config)
    if not folder.is_dir():
        raise InvalidInputError(f"no stored outputs folder {folder}")
    available = stored_models(folder)
    models = config.models or available
    if missing := [m for m in models if m not in available]:
        raise InvalidInputError(f"no stored outputs for {missing}; stored: {', '.join(available)}")
    config.output.mkdir(parents=True, exist_ok=True)
    outputs = {m: load_outputs(folder / f"{m}_outputs.json") for m in models}

    t0 = time.perf_counter()
    task_ids = sorted({i for o in outputs.values() for i in o})
    tasks = load_tasks(ids=task_ids)
    load_s = time.perf_counter() - t0
    log.info("loaded %d EAI tasks in %.1f s", len(tasks), load_s)

    names = ["official", "corrected"] if config.semantics == "both" else [config.semantics]
    semantics = [SEMANTICS[n] for n in names]
    extra = [only(c) for c in VERDICT_CORRECTIONS] if config.count_corrections else []
    if config.count_corrections and "official" not in names:
        semantics = [SEMANTICS["official"], *semantics]
    judge = EAIJudge()
    verdicts: dict[str, dict[str, list[Verdict]]] = defaultdict(lambda: defaultdict(list))
    seconds: dict[str, float] = defaultdict(float)
    for task in tasks:  # task-major: the judge's step cache holds this task's prefixes
        for model in models:
            text = outputs[model].get(task.task_id)
            if text is None:
                continue
            for sem in [*semantics, *extra]:
                t = time.perf_counter()
                verdicts[sem.name][model].append(judge.score_text(task.task_id, text, sem))
                seconds[sem.name] += time.perf_counter() - t
    judge_s = time.perf_counter() - t0 - load_s

    # the evaluator's model order (its runtime counts carry over from model to model in it)
    order = [m for m in evaluator_model_order(str(folder)) if m in models]
    rows = {n: carry_runtime_errors([aggregate(m, verdicts[n][m], SEMANTICS[n]) for m in order], SEMANTICS[n])
            for n in names}
    rows = {n: sorted(rs, key=lambda r: models.index(r.model)) for n, rs in rows.items()}
    own_counts = {m: aggregate(m, verdicts["official"][m], SEMANTICS["official"]) for m in models
                  } if "official" in verdicts else {}
    corrections: dict[str, dict[str, Any]] = {}
    if config.count_corrections:
        for c in VERDICT_CORRECTIONS:
            name = only(c).name
            corrections[c] = {"description": CORRECTIONS[c], "per_model": {
                m: correction_counts(verdicts["official"][m], verdicts[name][m]) for m in models}}
        carried = {r.model: r for r in carry_runtime_errors([own_counts[m] for m in order], SEMANTICS["official"])}
        for c in COUNT_CORRECTIONS:  # each alone on the official verdicts: the change in its column(s)
            alone = only(c)
            recounted = {r.model: r for r in carry_runtime_errors(
                [aggregate(m, verdicts["official"][m], alone) for m in order], alone)}
            corrections[c] = {"description": CORRECTIONS[c], "per_model": {
                m: {f"{k}_delta": recounted[m].errors[k] - carried[m].errors[k] for k in carried[m].errors
                    if recounted[m].errors[k] != carried[m].errors[k]} for m in models}}
    paired = (paired_success_tests(verdicts["official"], verdicts["corrected"])
              if {"official", "corrected"} <= set(names) else [])
    n_verdicts = sum(len(v) for per in verdicts.values() for v in per.values())
    dropped = [{"task_id": t.task_id, "name": t.name, "official_drop": t.official_drop, "full_drop": t.full_drop,
                "edge_goals": len(t.edge_goals)} for t in tasks if t.official_drop or t.full_drop]
    result = {
        "models": models,
        "evaluator_order": order,
        "tasks": {"all": len(tasks), "official": sum(t.in_official for t in tasks), "full": sum(t.in_full for t in tasks),
                  "drop_reasons": DROP_REASONS, "dropped": dropped},
        "rows": {n: [r.to_dict() for r in rs] for n, rs in rows.items()},
        "official_summaries": {r.model: official_summary(r) for r in rows.get("official", [])},
        "corrections": corrections,
        "paired_success_tests": paired,
        "timing": {"load_tasks_s": round(load_s, 2), "judge_s": round(judge_s, 2), "verdicts": n_verdicts,
                   "verdicts_per_s": round(n_verdicts / judge_s, 1) if judge_s else None,
                   "seconds_by_semantics": {k: round(v, 2) for k, v in seconds.items()},
                   "note": "one step cache shared by all semantics, filled task by task"},
    }
    with open(config.output / "verdicts.jsonl", "w", encoding="utf-8") as f:
        for n in names:
            for m in models:
                for v in verdicts[n][m]:
                    f.write(json.dumps({"model": m, **v.to_dict()}) + "\n")
    text = render(result, rows)
    if config.runs or config.answers:
        board = score_leaderboard(config, folder, models, judge)
        result["leaderboard"] = board.to_dict()
        text += "\n" + leaderboard.render(board)
    atomic_write_text(config.output / "summary.json", json.dumps(result, indent=2))
    atomic_write_text(config.output / "table.txt", text)
    result["text"] = text
    return result


def score_leaderboard(config: EAIScoreConfig, folder: Path, models: list[str],
                      judge: EAIJudge | None = None) -> leaderboard.Leaderboard:
    """groundplan's rows (``runs``, ``answers``) beside the stored models, on the tasks they all ran,
    with paired tests (:mod:`groundplan.evaluation.eai.leaderboard`)."""
    from groundplan.evaluation.tables import run_folders, run_traces

    traces = run_traces(run_folders(config.runs)) if config.runs else []
    entries = leaderboard.entries_for(traces, config.answers, folder, models)
    names = ["official", "corrected"] if config.semantics == "both" else [config.semantics]
    return leaderboard.build(entries, names, judge)


def render(result: dict[str, Any], rows: dict[str, list[EAIRow]]) -> str:
    """The tables as plain text: one per semantics, then the corrections and the paired tests."""
    parts = []
    for name, rs in rows.items():
        parts.append(render_text(render_rows(rs, f"EAI action sequencing, {name} semantics")))
    if result["corrections"]:
        parts.append(render_text(corrections_table(result)))
    if result["paired_success_tests"]:
        lines = ["Official vs corrected success on the tasks both score (exact McNemar, Holm over models):"]
        for r in result["paired_success_tests"]:
            lines.append(f"  {r['model']}: n={r['n_pairs']} official-only={r['official_only']} "
                         f"corrected-only={r['corrected_only']} p={r['p_value']:.3g} p_holm={r['p_holm']:.3g}")
        parts.append("\n".join(lines) + "\n")
    t = result["timing"]
    parts.append(f"tasks: {result['tasks']['all']} (official set {result['tasks']['official']}, full set "
                 f"{result['tasks']['full']}); {t['verdicts']} verdicts in {t['judge_s']} s "
                 f"({t['verdicts_per_s']}/s) after {t['load_tasks_s']} s loading tasks\n")
    return "\n".join(parts)


def corrections_table(result: dict[str, Any]):
    """Models down, corrections across, each cell :func:`~groundplan.evaluation.eai.table.correction_cell`."""
    from rich.markup import escape
    from rich.table import Table

    corrections = result["corrections"]
    table = Table(title=CORRECTIONS_TITLE)
    table.add_column("model", no_wrap=True)
    for c in corrections:
        table.add_column(c, justify="right", no_wrap=True)
    for m in result["models"]:
        table.add_row(escape(m), *(correction_cell(info["per_model"][m]) for info in corrections.values()))
    return table
