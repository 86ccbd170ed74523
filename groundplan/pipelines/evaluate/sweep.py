"""The sweep driver: a config becomes episodes, an executor runs them, every finished episode is written
at once, and the sweep is summarised and logged to MLflow (docs/architecture.md, "Sweeps").

One driver serves both executors (:mod:`groundplan.pipelines.evaluate.executors`: ``local`` in this process,
``ray`` on actors), so resume, traces, frames, summaries and MLflow behave the same on both paths.

Guarantees:
- a malformed config (unknown plugin or option, bad task selection or task file, unwritable output
  folder) fails in :func:`check_config`, before any model loads or actor starts, and so does (once the
  tracking servers answer) a test set that a planner's prompt or trained Can/Pay models read before the
  test (:func:`~groundplan.pipelines.evaluate.lineage.check_sweep_lineage`);
- each finished episode is appended to ``traces.jsonl`` at once, by the driver alone, with its frames;
- an episode's id carries a hash of everything that can change its outcome (env options, LLM spec,
  planner spec, step cap, seed, the task's content), so a rerun under a changed config runs the changed
  episodes instead of returning stale traces; earlier traces of other configs move to
  ``traces.other.jsonl``, so nothing that reads the folder reports them, and the driver says what changed;
- a rerun of the same config skips the episodes already finished (``resume``), nothing is lost or
  run twice.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal

from tqdm.auto import tqdm

from groundplan.config import EvalConfig, stable_hash
from groundplan.core.errors import InvalidInputError
from groundplan.core.paths import atomic_write_text
from groundplan.core.types import Task
from groundplan.envs import ENVS
from groundplan.envs.base import Env
from groundplan.factory import make_env, make_llm
from groundplan.llm import LanguageModel
from groundplan.pipelines.evaluate.executors import Executor, LocalExecutor, RayExecutor
from groundplan.evaluation.summary import SummaryRow, select_best, summarize, summary_document
from groundplan.rollout.frames import write_frames
from groundplan.rollout.runner import EpisodeResult, EpisodeSpec
from groundplan.rollout.traces import EpisodeTrace, read_traces, trace_records, write_traces

log = logging.getLogger(__name__)


@dataclass
class EvalResult:
    config: EvalConfig
    traces: list[EpisodeTrace]
    summary: list[SummaryRow]
    run_dir: Path
    skipped: int = 0
    stats: dict[str, Any] = field(default_factory=dict)
    best: dict[str, SummaryRow] = field(default_factory=dict)  # grid label -> its best variant's row
    stale: int = 0  # earlier traces in the run folder that belong to another config (moved aside)


# ----------------------------------------------------------------------------------------- tasks


def load_tasks(env: Env, cfg: EvalConfig) -> list[Task]:
    """The env's task set, or the tasks of ``tasks.file`` (validated by the env, errors with line numbers)."""
    if cfg.tasks.file is None:
        return env.tasks()
    from groundplan.envs.task_files import load_task_file

    return load_task_file(cfg.tasks.file, env)


def select_tasks(env: Env, cfg: EvalConfig) -> list[Task]:
    sel = cfg.tasks
    tasks = load_tasks(env, cfg)
    if sel.ids:
        by_id = {t.task_id: t for t in tasks}
        missing = [i for i in sel.ids if i not in by_id]
        if missing:
            raise InvalidInputError(f"unknown task ids {missing}; e.g. {list(by_id)[:3]}")
        return [by_id[i] for i in sel.ids]
    families = list(dict.fromkeys(t.family for t in tasks))
    if sel.families:
        unknown = [f for f in sel.families if f not in families]
        if unknown:
            raise InvalidInputError(f"unknown task families {unknown}; valid: {', '.join(families)}")
        families = sel.families
    out: list[Task] = []
    for fam in families:
        fam_tasks = [t for t in tasks if t.family == fam]
        out.extend(fam_tasks if sel.per_family is None else fam_tasks[: sel.per_family])
    if sel.file is not None and len(out) < len(tasks):  # someone's own file, cut by the config: say so
        from groundplan.envs.task_files import file_selection_note

        log.warning("%s", file_selection_note(sel.file, len(tasks), len(out), sel.per_family, sel.families))
    return out


def episode_specs(cfg: EvalConfig, tasks: list[Task]) -> list[EpisodeSpec]:
    """planners × tasks × seeds in a stable order; each id is ``<label>|<task>|<seed>|<outcome hash>``."""
    shared = {"env": cfg.env.model_dump(), "llm": cfg.llm.model_dump(), "max_steps": cfg.max_steps}
    out = []
    for p in cfg.planners:
        planner = p.model_dump(exclude={"label", "group", "grid"})
        for t in tasks:
            task = dataclasses.asdict(t)
            for s in cfg.seeds:
                key = stable_hash({**shared, "planner": planner, "task": task, "seed": s})
                out.append(EpisodeSpec(p, t, s, f"{p.display}|{t.task_id}|{s}|{key}"))
    return out


def expand(cfg: EvalConfig, env: Env) -> list[EpisodeSpec]:
    """The sweep's episodes (tasks selected from ``env``)."""
    return episode_specs(cfg, select_tasks(env, cfg))


# ---------------------------------------------------------------------------------- run folder


def check_config(cfg: EvalConfig) -> list[EpisodeSpec]:
    """Everything that can be checked without models or actors; returns the episodes, or raises naming
    the problem. (Plugin names and options were validated when the config was loaded.)"""
    ENVS.get(cfg.env.name)
    specs = expand(cfg, make_env(cfg.env))
    check_writable(cfg.run_dir)
    return specs


def check_writable(folder: Path) -> None:
    """Fail early (not after the sweep) when results could not be written."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".write-test-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise InvalidInputError(f"cannot write to the output folder {folder}: {e.strerror or e}") from None


#: beside ``traces.jsonl``: the traces of episodes the run folder's current config does not select
OTHER_TRACES = "traces.other.jsonl"


def prepare_run(cfg: EvalConfig, specs: list[EpisodeSpec], resume: bool) -> tuple[Path, list[EpisodeSpec], int]:
    """Record the config and return the traces path, the episodes still to run, and how many earlier
    traces belong to another config. Without ``resume`` earlier traces and frames are discarded."""
    run_dir = cfg.run_dir
    traces_path = run_dir / "traces.jsonl"
    config_path = run_dir / "config.json"
    new = json.loads(cfg.model_dump_json())
    if resume and config_path.exists() and traces_path.exists():
        changed = _changed_fields(json.loads(config_path.read_text()), new)
        if changed:
            log.warning("%s holds results of an earlier config; changed: %s. Episodes whose outcome can change "
                        "run again; the earlier traces move to %s.", run_dir, ", ".join(changed), OTHER_TRACES)
    if not resume:
        for path in (traces_path, run_dir / OTHER_TRACES):
            path.unlink(missing_ok=True)
    atomic_write_text(config_path, json.dumps(new, indent=2))
    wanted = {s.episode_id for s in specs}
    earlier, stale = _partition_traces(traces_path, run_dir / OTHER_TRACES, wanted) if resume else (set(), 0)
    return traces_path, [s for s in specs if s.episode_id not in earlier], stale


def _partition_traces(traces_path: Path, other_path: Path, wanted: set[str]) -> tuple[set[str], int]:
    """Leave in ``traces.jsonl`` only the traces of the episodes this config selects, and keep the rest in
    ``traces.other.jsonl`` (moved back when a later config selects them again), so that everything that
    reads a run folder (``tables``, ``compare``, ``report``, the viewer, ``log``) reports this config's
    episodes and no earlier one. Returns the ids of the selected episodes already finished and how many
    traces of ``traces.jsonl`` belonged to another config. Lines move verbatim; a torn line is dropped."""
    def lines(path: Path) -> list[tuple[str, str]]:
        return [(record["episode_id"], line) for record, line in trace_records(path)
                if isinstance(record, dict) and "episode_id" in record]

    current, other = lines(traces_path), lines(other_path)
    stale = sum(i not in wanted for i, _ in current)
    if not stale and not any(i in wanted for i, _ in other):
        return {i for i, _ in current}, 0
    keep: dict[str, str] = {}
    rest: dict[str, str] = {}
    for i, line in current + other:  # the current file first: a trace in both (a crash between writes) keeps it
        (keep if i in wanted else rest).setdefault(i, line)
    atomic_write_text(other_path, "".join(f"{line}\n" for line in rest.values()))
    atomic_write_text(traces_path, "".join(f"{line}\n" for line in keep.values()))
    return set(keep), stale


def _changed_fields(old: Any, new: Any, prefix: str = "") -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for k in sorted(set(old) | set(new)):
            out += _changed_fields(old.get(k), new.get(k), f"{prefix}{k}.")
        return out
    return [] if old == new else [prefix[:-1] or "(config)"]


def collect_results(cfg: EvalConfig, specs: list[EpisodeSpec], traces_path: Path, ran: int, stats: dict[str, Any],
                    stale: int = 0) -> EvalResult:
    """Read back this sweep's traces in the sweep's own order (episodes may finish in any order),
    summarise them and write ``summary.json`` (rows with n and 95% intervals, paired McNemar tests) and
    ``grid_selection.json`` for planner grids."""
    by_id = {t.episode_id: t for t in read_traces(traces_path)}
    traces = [by_id[s.episode_id] for s in specs if s.episode_id in by_id]
    rows = summarize(traces, planner_order=[p.display for p in cfg.planners])  # with n and Wilson intervals
    order = [p.display for p in cfg.planners]
    atomic_write_text(traces_path.parent / "summary.json", json.dumps(summary_document(rows, traces, order), indent=2))
    best = select_best(rows, cfg.grids, cfg.select_by, cfg.select_tie_break)
    if best:
        from groundplan.pipelines.evaluate.selection import selection_rule

        selection = {**selection_rule(cfg), "best": {g: r.planner for g, r in best.items()}}
        atomic_write_text(traces_path.parent / "grid_selection.json", json.dumps(selection, indent=2))
    return EvalResult(cfg, traces, rows, traces_path.parent, skipped=len(specs) - ran, stats=stats, best=best,
                      stale=stale)


# -------------------------------------------------------------------------------------- driver


def make_executor(cfg: EvalConfig, lm: LanguageModel | None = None, lm_factory: Callable[[], LanguageModel] | None = None,
                  on_episode: Callable[[EpisodeTrace, dict[str, Any]], None] | None = None) -> Executor:
    """The executor ``cfg.runtime.executor`` names. ``lm``/``lm_factory`` replace ``cfg.llm`` (tests)."""
    if cfg.runtime.executor == "local":
        return LocalExecutor(cfg, (lambda: lm) if lm is not None else (lm_factory or (lambda: make_llm(cfg.llm))))
    if lm is not None:
        raise InvalidInputError("the ray executor builds its model inside the scorer actors: pass lm_factory, not lm")
    return RayExecutor(cfg, lm_factory=lm_factory, on_episode=on_episode)


def run_sweep(cfg: EvalConfig, *, lm: LanguageModel | None = None, lm_factory: Callable[[], LanguageModel] | None = None,
              progress: bool = True, resume: bool = True, tracking_uri: str | None = None,
              on_episode: Callable[[EpisodeTrace, dict[str, Any]], None] | None = None,
              lineage_check: bool | Literal["validation"] = True) -> EvalResult:
    """Run the sweep of ``cfg`` on the executor ``cfg.runtime.executor`` names and return its traces and
    summary. MLflow logging when ``cfg.runtime.mlflow``: a tracking server that does not answer fails the
    sweep before it starts; one that fails at the end leaves ``stats["mlflow_error"]`` and no run id. An LLM
    server that cannot do what the planners need (an ``openai`` server without echo for scoring planners)
    also fails it before it starts (:func:`~groundplan.config.probe_llm_needs`), unless ``lm`` or
    ``lm_factory`` replaces ``cfg.llm``. ``lineage_check=False`` is for sweeps that gather training data on
    train tasks and measure nothing (``groundplan improve``'s rollouts): there the tasks are meant to be the
    model's own. ``"validation"`` (the ``select_on`` sweep) lets a task be one of the models' validation
    tasks, never a train task or prompt example. With ``cfg.select_on``, each planner grid is chosen on those
    tasks first (:mod:`~groundplan.pipelines.evaluate.selection`) and the result is the chosen variants' sweep."""
    from groundplan.pipelines.evaluate.selection import needs_selection, run_selected

    if needs_selection(cfg):
        return run_selected(cfg, lambda c, selecting: run_sweep(
            c, lm=lm, lm_factory=lm_factory, progress=progress, resume=resume, tracking_uri=tracking_uri,
            on_episode=on_episode, lineage_check=("validation" if selecting and lineage_check else lineage_check)))
    specs = check_config(cfg)  # fails before any model loads or actor starts
    from groundplan.pipelines.tracking import check_tracking_servers, eval_tracking_uris

    check_tracking_servers(eval_tracking_uris(cfg, tracking_uri))  # so does a tracking server that is down
    from groundplan.config import check_say_model

    check_say_model(cfg.llm, cfg.planners)  # a fine-tuned Say model read through another prompt format
    from groundplan.pipelines.evaluate.lineage import check_sweep_lineage

    if lineage_check:  # and a test task that a planner's prompt or trained models read
        check_sweep_lineage(cfg, specs, ("validation",) if lineage_check == "validation" else ())
    if lm is None and lm_factory is None:  # and an LLM server that cannot do what the planners need of it
        from groundplan.config import probe_llm_needs

        probe_llm_needs(cfg.llm, cfg.planners)
    traces_path, todo, stale = prepare_run(cfg, specs, resume)
    executor = make_executor(cfg, lm, lm_factory, on_episode)
    bar = tqdm(total=len(todo), desc=cfg.name, unit="ep", disable=not progress)
    t0 = time.perf_counter()

    def on_result(spec: EpisodeSpec, result: EpisodeResult) -> None:
        write_frames(traces_path.parent, spec.episode_id, result.frames)
        write_traces(traces_path, [result.trace])  # one record per episode, written by this thread only
        bar.update(1)
        bar.set_postfix_str(f"{bar.n / max(time.perf_counter() - t0, 1e-9):.2f} ep/s")

    try:
        stats = executor.run(todo, on_result)
    finally:
        bar.close()
    wall = time.perf_counter() - t0
    stats.update(executor=cfg.runtime.executor, episodes_run=len(todo), wall_s=wall,
                 episodes_per_min=60 * len(todo) / wall if todo and wall else 0.0)
    result = collect_results(cfg, specs, traces_path, len(todo), stats, stale)
    if cfg.runtime.mlflow:  # a store that fails now costs the MLflow run, not the results on disk
        from groundplan.pipelines.tracking import log_sweep_or_explain

        stats["mlflow_run_id"] = log_sweep_or_explain(result, tracking_uri=tracking_uri)
    return result


def log_run_folder(run_dir: str | Path, tracking_uri: str | None = None) -> str:
    """Log a finished sweep's folder (``config.json``, ``traces.jsonl``, frames) as an MLflow run, as the
    sweep would have at its end, for a sweep whose logging failed or was turned off (``groundplan log``);
    returns the run id. The summary is recomputed from the traces (``summary.json`` is rewritten, the
    same); the sweep's throughput statistics, which only the running sweep knew, are not logged."""
    from groundplan.pipelines.tracking import (
        bounded_http_retries,
        check_tracking_server,
        log_sweep,
        resolve_tracking_uri,
    )

    folder = Path(run_dir).resolve()
    config_path, traces_path = folder / "config.json", folder / "traces.jsonl"
    if not config_path.is_file() or not traces_path.is_file():
        raise InvalidInputError(f"{folder} holds no config.json and traces.jsonl: give a sweep's run folder, "
                                "e.g. outputs/saycan_kitchen")
    data = json.loads(config_path.read_text())
    data["output_dir"] = str(folder.parent)  # where the folder is now, wherever the sweep ran
    cfg = EvalConfig.model_validate(data)
    uri = resolve_tracking_uri(cfg.output_dir, tracking_uri)
    check_tracking_server(uri, hint="set MLFLOW_TRACKING_URI to a store that runs")
    result = collect_results(cfg, expand(cfg, make_env(cfg.env)), traces_path, ran=0, stats={})
    if not result.traces:
        raise InvalidInputError(f"{traces_path} holds no episode of the config in {config_path}")
    with bounded_http_retries():
        return log_sweep(result, tracking_uri=uri)
