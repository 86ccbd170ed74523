"""Which table a run gets, chosen once for every caller (``groundplan eval``'s printout and ``groundplan
tables RUN...``): from what the run declares in its ``config.json``, not from its folder name.

- a run in an env with a benchmark table of its own gets it, whatever its planners: the house env SayNav's
  MultiON table (:mod:`groundplan.evaluation.saynav`); EAI's env (``virtualhome_eai``) its summary table and
  EAI's leaderboard (:mod:`groundplan.evaluation.eai.leaderboard`): the 15 stored LLMs and the run's
  planners (open and closed loop, SayCanPay's among them), judged on the tasks they all ran, under both
  semantics, with paired tests;
- any other run with SayCanPay planners gets SayCanPay's table (:mod:`groundplan.evaluation.saycanpay`:
  success, cost-effectiveness and plan length, paired tests on both);
- any other run gets the summary table (:mod:`groundplan.evaluation.summary`): the env's own measures
  when it declares them (``EnvCapabilities.table_measures``, e.g. Zero-Shot Planners' executability and
  LCS), else execution and plan success per family; then the paired McNemar tests, Holm-adjusted.

Every table marks the rows that read simulator truth from the declarations their traces record
(:mod:`groundplan.evaluation.marks`); a trace written before traces recorded them takes its planner's from
the run's ``config.json``.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from groundplan.core.errors import InvalidInputError
from groundplan.evaluation import saycanpay, saynav
from groundplan.evaluation.marks import with_config_declarations
from groundplan.evaluation.summary import (
    SummaryRow,
    paired_tests,
    render_metric_table,
    render_table,
    render_text,
    summarize,
)
from groundplan.rollout.traces import EpisodeTrace, read_traces

#: the table of a run whose planners include one of these (by planner name)
TABLE_OF_PLANNER = {"saycanpay": "saycanpay"}
#: the table of a run in one of these envs
TABLE_OF_ENV = {"house": "saynav", "virtualhome_eai": "eai"}


def table_kind(config: dict[str, Any]) -> str:
    """'eai', 'saynav', 'saycanpay' or 'summary', from a run's config (``config.json``): the env's table
    first, since a benchmark's rows are compared on its own measures whichever planner made them."""
    env_table = TABLE_OF_ENV.get(config.get("env", {}).get("name", ""))
    if env_table:
        return env_table
    for planner in config.get("planners", []):
        if planner.get("name") in TABLE_OF_PLANNER:
            return TABLE_OF_PLANNER[planner["name"]]
    return "summary"


def summary_table(rows: list[SummaryRow], env_name: str, title: str) -> Any:
    """The summary table of a sweep's rows: the env's declared measures, else success per family."""
    from groundplan.envs import ENVS

    measures = ENVS.get(env_name).capabilities.table_measures
    if measures:
        return render_metric_table(rows, list(measures) + ["mean_steps"], title=f"{title}: all test tasks")
    return render_table(rows, title=title)


def paired_lines(traces: Sequence[EpisodeTrace], planner_order: list[str] | None = None) -> list[str]:
    """Every paired McNemar test of :func:`paired_tests` as one line, its p-value raw and Holm-adjusted."""
    return [f"- {r['a']} vs {r['b']} on {r['measure']} (n={r['n_pairs']} shared episodes): only-{r['a']} "
            f"{r['a_only']} / only-{r['b']} {r['b_only']}, p={r['p_value']:.3g}, Holm p={r['p_holm']:.3g}"
            for r in paired_tests(traces, planner_order)]


def run_folders(run_dirs: Sequence[str | Path]) -> list[Path]:
    """The run folders ``run_dirs`` name: each is a run (``traces.jsonl`` and ``config.json``, as ``groundplan
    eval`` writes them) or stands for the runs directly inside it (``--output`` of ``groundplan eval``), so
    ``groundplan tables`` and ``groundplan compare`` accept the same folders."""
    folders: list[Path] = []
    for d in map(Path, run_dirs):
        runs = [d] if (d / "traces.jsonl").exists() else sorted(p.parent for p in d.glob("*/traces.jsonl"))
        if not runs or not all((r / "config.json").exists() for r in runs):
            raise InvalidInputError(f"{d} is not a run folder, nor a folder of runs (a run holds traces.jsonl and "
                                    "config.json, as groundplan eval writes them)")
        folders += runs
    return folders


def run_configs(folders: Sequence[Path]) -> list[dict[str, Any]]:
    """Each run folder's ``config.json``: what the run declares (its env and options, its planners)."""
    return [json.loads((folder / "config.json").read_text()) for folder in folders]


def run_traces(folders: Sequence[Path]) -> list[EpisodeTrace]:
    """Every trace of the run folders, in file order; none at all is an error (nothing to report)."""
    traces = [t for folder in folders for t in read_traces(folder / "traces.jsonl")]
    if not traces:
        raise InvalidInputError(f"no traces in {', '.join(map(str, folders))}")
    return traces


def run_tables(run_dirs: Sequence[str | Path], env: str | None = None, split: str | None = None) -> str:
    """The table of the runs in ``run_dirs`` (several: planners run side by side, one table over all),
    as text. A folder that is not a run stands for the runs directly inside it (``--output`` of
    ``groundplan eval``). ``env`` and ``split`` name the env whose reference plans are SayCanPay's experts."""
    folders = run_folders(run_dirs)
    configs = run_configs(folders)
    kinds = {table_kind(c) for c in configs}
    if len(kinds) > 1:
        raise InvalidInputError(f"these runs need different tables ({', '.join(sorted(kinds))}); give them one kind "
                                "at a time")
    traces = with_config_declarations(run_traces(folders), configs)
    kind = kinds.pop()
    if kind == "saycanpay":
        options = {json.dumps(c["env"].get("options") or {}, sort_keys=True) for c in configs}
        if len(options) > 1:
            raise InvalidInputError("these runs built their env with different options, so a task id names "
                                    "different tasks in them: give them one draw at a time")
        ours = env is None or {env} == {c["env"]["name"] for c in configs}  # the experts of the runs' own draw
        return saycanpay.report(traces, f"{folders[0].name}: {split or 'test'} split", env=env, split=split,
                                env_options=json.loads(options.pop()) if ours else None)
    if kind == "saynav":
        return saynav.report(traces)
    order = list(dict.fromkeys(p.get("label") or p["name"] for c in configs for p in c.get("planners", [])))
    table = render_text(summary_table(summarize(traces, order), traces[0].env, folders[0].name))
    lines = paired_lines(traces, order)
    text = table + ("\nPaired tests (exact McNemar on the shared episodes):\n" + "\n".join(lines) if lines else "")
    if kind == "eai":
        from groundplan.evaluation.eai import leaderboard

        text += "\n" + leaderboard.render(leaderboard.build(leaderboard.entries_for(traces)))
    return text

