"""``groundplan eai run``: EAI's whole action-sequencing leaderboard from one config (Li et al. 2024,
Sec. 3.3): groundplan's planners with every model on EAI's tasks, beside the 15 stored LLMs.

The config names an eval config of the ``virtualhome_eai`` env (the planners, the task sample, the
runtime) and the models to run it with. For each model the eval sweep runs as ``groundplan eval`` would
run it (on Ray runners or locally, resumable: a rerun plays only the episodes not yet in the run folder,
and an episode whose outcome cannot change is never played twice), in the run folder
``<output_dir>/<sweep name>-<model>``. Then the one judge scores the
stored answers, any answer files made elsewhere and every run, on the tasks the runs share, under both
semantics, and writes the leaderboard (ranks, paired McNemar tests with Holm) to ``output``
(``summary.json``, ``table.txt``). A model whose sweep fails is recorded
and the others still run; the leaderboard then says which are missing.
"""
from __future__ import annotations

import json
import logging
import re
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from groundplan.config import EvalConfig, LLMSpec, load_yaml_model
from groundplan.core.errors import InvalidInputError
from groundplan.core.paths import atomic_write_text
from groundplan.evaluation.eai import leaderboard
from groundplan.evaluation.eai.leaderboard import EAI_ENV

log = logging.getLogger(__name__)


class EAIRunConfig(BaseModel):
    """What ``groundplan eai run`` runs (a sweep per model) and where the leaderboard goes."""

    model_config = ConfigDict(extra="forbid")

    sweep: Path = Field(description="eval config of the virtualhome_eai env (planners, task sample, runtime), "
                        "relative to this file")
    models: list[LLMSpec] = Field(min_length=1, description="the models each planner of the sweep runs with, one "
                                  "sweep per model (backend hf, or openai for a served model)")
    answers: list[Path] = Field(default_factory=list, description="answer files in EAI's format made elsewhere "
                                "(<label>_outputs.json, or folders of them): open-loop rows")
    semantics: Literal["official", "corrected", "both"] = Field("both", description="which semantics' tables")
    output: Path = Field(Path("outputs/eai_leaderboard"), description="folder for the leaderboard (summary.json, "
                         "table.txt)")


def model_label(llm: LLMSpec) -> str:
    """A model's name for run folders and files: its last path part, with characters a file name would
    not keep replaced by ``-``."""
    raw = Path(llm.model.rstrip("/")).name or llm.model
    return re.sub(r"[^A-Za-z0-9._-]+", "-", raw).strip("-") or "model"


def load_run_config(path: str | Path) -> EAIRunConfig:
    """Read the config; ``sweep`` and relative ``answers`` are resolved against the config's folder."""
    path = Path(path)
    cfg = load_yaml_model(EAIRunConfig, path, what="EAI run config")
    return cfg.model_copy(update={"sweep": path.parent / cfg.sweep, "answers": [path.parent / a for a in cfg.answers]})


def model_sweeps(cfg: EAIRunConfig, overrides: list[str] | None = None,
                 runtime: dict[str, Any] | None = None) -> list[EvalConfig]:
    """The eval config once per model (``overrides``: its ``--set``; ``runtime``: typed runtime fields the
    command line sets), each with its own run folder; refused before anything runs when the sweep is not of
    EAI's env or two models would share a folder."""
    from groundplan.config import load_config, with_fields

    base = load_config(cfg.sweep, overrides)
    if base.env.name != EAI_ENV:
        raise InvalidInputError(f"{cfg.sweep} runs env {base.env.name!r}; EAI's leaderboard needs {EAI_ENV!r}")
    sweeps = []
    for llm in cfg.models:  # loaded again with the model, so its needs are checked against the planners
        sweep = load_config(cfg.sweep, [*(overrides or []), f"llm={json.dumps(llm.model_dump())}",
                                        f"name={json.dumps(f'{base.name}-{model_label(llm)}')}"])
        if runtime:
            sweep = sweep.model_copy(update={"runtime": with_fields(sweep.runtime, runtime, "command-line flags",
                                                                     "runtime")})
        sweeps.append(sweep)
    names = [s.name for s in sweeps]
    if len(set(names)) < len(names):
        raise InvalidInputError(f"two models share a run folder name ({', '.join(names)}): give each model once")
    return sweeps


def run(cfg: EAIRunConfig, *, overrides: list[str] | None = None, runtime: dict[str, Any] | None = None,
        progress: bool = True, resume: bool = True) -> dict[str, Any]:
    """Run every model's sweep, then the leaderboard (see the module); returns what ``summary.json`` holds
    (``leaderboard``, and ``sweeps``: per model the run folder, episodes run and reused and the wall time,
    or the error) and the printed ``text``."""
    from groundplan.evaluation.tables import run_folders, run_traces
    from groundplan.pipelines.evaluate.sweep import run_sweep

    sweeps = model_sweeps(cfg, overrides, runtime)
    record: dict[str, dict[str, Any]] = {}
    for sweep in sweeps:
        t0 = time.perf_counter()
        log.info("EAI leaderboard: sweep %s (%s)", sweep.name, sweep.llm.model)
        try:
            result = run_sweep(sweep, progress=progress, resume=resume)
        except InvalidInputError:
            raise  # a bad config or request: the user's to fix, before the other models run
        except Exception as exc:  # one model's failure (a server down, a crash) leaves the others' rows
            log.error("sweep %s failed: %s: %s", sweep.name, type(exc).__name__, exc)
            record[sweep.name] = {"model": sweep.llm.model, "error": f"{type(exc).__name__}: {exc}"}
            continue
        record[sweep.name] = {"model": sweep.llm.model, "run_dir": str(result.run_dir),
                              "episodes_run": result.stats.get("episodes_run", 0), "episodes_reused": result.skipped,
                              "wall_s": round(time.perf_counter() - t0, 1)}
    runs = [Path(r["run_dir"]) for r in record.values() if "run_dir" in r]
    if not runs:
        raise RuntimeError("every sweep failed: " + "; ".join(f"{k}: {v['error']}" for k, v in record.items()))
    names = ["official", "corrected"] if cfg.semantics == "both" else [cfg.semantics]
    board = leaderboard.build(leaderboard.entries_for(run_traces(run_folders(runs)), cfg.answers), names)
    failed = [f"  {k} ({v['model']}): {v['error']}" for k, v in record.items() if "error" in v]
    text = leaderboard.render(board) + ("sweeps that failed (their rows are missing):\n" + "\n".join(failed) + "\n"
                                        if failed else "")
    out = {"leaderboard": board.to_dict(), "sweeps": record}
    cfg.output.mkdir(parents=True, exist_ok=True)
    atomic_write_text(cfg.output / "summary.json", json.dumps(out, indent=2))
    atomic_write_text(cfg.output / "table.txt", text)
    return {**out, "text": text}
