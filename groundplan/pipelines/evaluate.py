"""Evaluation sweeps: expand a config into episodes, run them, persist each trace, summarise.

The in-process runner here is what ``groundplan eval`` uses on one machine; every episode's trace is
appended to ``traces.jsonl`` as soon as it finishes, and a re-run of the same config skips the
episodes already there (resume), so an interrupted sweep loses nothing and duplicates nothing.
"""
from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from groundplan.config import EvalConfig, PlannerSpec
from groundplan.core.errors import InvalidInputError
from groundplan.core.types import Task
from groundplan.envs import ENVS
from groundplan.envs.base import Env
from groundplan.factory import make_env, make_llm, make_planner
from groundplan.grounding import AFFORDANCES
from groundplan.llm import LLM_BACKENDS, LanguageModel
from groundplan.pipelines.summary import SummaryRow, select_best, summarize
from groundplan.planners import PLANNERS
from groundplan.report import frame_saver
from groundplan.rollout.episode import run_episode
from groundplan.rollout.traces import EpisodeTrace, read_traces, write_traces

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EpisodeSpec:
    planner: PlannerSpec
    task: Task
    seed: int

    @property
    def episode_id(self) -> str:
        return f"{self.planner.display}|{self.task.task_id}|{self.seed}"


@dataclass
class EvalResult:
    config: EvalConfig
    traces: list[EpisodeTrace]
    summary: list[SummaryRow]
    run_dir: Path
    skipped: int = 0
    stats: dict[str, Any] = field(default_factory=dict)
    best: dict[str, SummaryRow] = field(default_factory=dict)  # grid label -> its best variant's row


def validate_names(cfg: EvalConfig) -> None:
    """Fail before anything loads when a config names an unknown plugin."""
    ENVS.get(cfg.env.name)
    LLM_BACKENDS.get(cfg.llm.backend)
    for p in cfg.planners:
        PLANNERS.get(p.name)
        if p.affordance is not None:
            AFFORDANCES.get(p.affordance)


def select_tasks(env: Env, cfg: EvalConfig) -> list[Task]:
    sel = cfg.tasks
    tasks = env.tasks()
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
    return out


def expand(cfg: EvalConfig, env: Env) -> list[EpisodeSpec]:
    """planners x tasks x seeds, in a stable order."""
    tasks = select_tasks(env, cfg)
    return [EpisodeSpec(p, t, s) for p in cfg.planners for t in tasks for s in cfg.seeds]


def finished_ids(traces_path: Path) -> set[str]:
    return {t.episode_id for t in read_traces(traces_path)}


def prepare_run(cfg: EvalConfig, specs: list[EpisodeSpec], resume: bool) -> tuple[Path, list[EpisodeSpec]]:
    """Create the run folder, record the config, and return the traces path and the episodes still to
    run (all of them without ``resume``, which also discards earlier traces)."""
    run_dir = cfg.run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    traces_path = run_dir / "traces.jsonl"
    (run_dir / "config.json").write_text(json.dumps(cfg.model_dump(), indent=2))
    done = finished_ids(traces_path) if resume else set()
    if not resume and traces_path.exists():
        traces_path.unlink()
    return traces_path, [s for s in specs if s.episode_id not in done]


def collect_results(cfg: EvalConfig, specs: list[EpisodeSpec], traces_path: Path, ran: int,
                    stats: dict[str, Any]) -> EvalResult:
    """Read back this sweep's traces in the sweep's own order (episodes may finish in any order),
    summarise them and write ``summary.json``."""
    by_id = {t.episode_id: t for t in read_traces(traces_path)}
    traces = [by_id[s.episode_id] for s in specs if s.episode_id in by_id]
    rows = summarize(traces, planner_order=[p.display for p in cfg.planners])
    (traces_path.parent / "summary.json").write_text(json.dumps([r.to_dict() for r in rows], indent=2))
    best = select_best(rows, cfg.grids, cfg.select_by)
    if best:
        selection = {"select_by": cfg.select_by, "best": {g: r.planner for g, r in best.items()}}
        (traces_path.parent / "grid_selection.json").write_text(json.dumps(selection, indent=2))
    return EvalResult(cfg, traces, rows, traces_path.parent, skipped=len(specs) - ran, stats=stats, best=best)


def run_eval(cfg: EvalConfig, lm: LanguageModel | None = None, progress: bool = True, resume: bool = True) -> EvalResult:
    """Run a sweep in this process and return its traces and summary."""
    validate_names(cfg)
    env = make_env(cfg.env)
    specs = expand(cfg, env)
    traces_path, todo = prepare_run(cfg, specs, resume)
    lm = lm or make_llm(cfg.llm)
    planners = {p.display: make_planner(p, lm, cfg.max_steps) for p in cfg.planners}
    cfg_hash = cfg.hash()
    save_frames = frame_saver(traces_path.parent)
    t0 = time.perf_counter()
    bar = tqdm(todo, desc=cfg.name, unit="ep", disable=not progress)
    for spec in bar:
        trace = run_episode(
            planners[spec.planner.display], env, spec.task, spec.seed,
            max_steps=cfg.max_steps, llm_name=cfg.llm.model, config_hash=cfg_hash, episode_id=spec.episode_id,
            on_step=save_frames,
        )
        write_traces(traces_path, [trace])
        bar.set_postfix_str(f"{spec.planner.display}: {'ok' if trace.execution_success else 'fail'}")
    wall = time.perf_counter() - t0
    stats = {"episodes_run": len(todo), "wall_s": wall, "episodes_per_min": 60 * len(todo) / wall if todo and wall else 0.0}
    return collect_results(cfg, specs, traces_path, len(todo), stats)
