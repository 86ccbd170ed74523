"""MLflow logging of a sweep: one run per sweep with params, metrics and artifacts.

Everything stays in one place: the tracking store defaults to a SQLite database under
``<output_dir>/mlruns`` (no server needed; ``MLFLOW_TRACKING_URI`` or ``tracking_uri`` overrides it) and
a new experiment's artifact location is ``<output_dir>/mlruns/artifacts``, so nothing is written to the
working directory. Params are the config flattened (``llm.model``, ``planners.0.name``, ...); metrics
are the summary per planner and family (``SayCan.nl_nouns.plan_success``), the sweep's throughput and the
scorer's statistics; artifacts are ``summary.json``, ``traces.jsonl``, ``config.json``, the rendered
summary table, the camera frames and the HTML report.
"""
from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def default_tracking_uri(output_dir: str | Path) -> str:
    folder = Path(output_dir).resolve() / "mlruns"
    folder.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{folder / 'mlflow.db'}"


def use_experiment(name: str, output_dir: str | Path) -> str:
    """Select (creating it if needed) the experiment ``name``, its artifacts under ``<output_dir>/mlruns``."""
    import mlflow

    experiment = mlflow.get_experiment_by_name(name)
    if experiment is None:
        location = (Path(output_dir).resolve() / "mlruns" / "artifacts").as_uri()
        experiment_id = mlflow.create_experiment(name, artifact_location=location)
    else:
        experiment_id = experiment.experiment_id
    mlflow.set_experiment(experiment_id=experiment_id)
    return experiment_id


def flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    if isinstance(d, dict):
        for k, v in d.items():
            out.update(flatten(v, f"{prefix}{k}."))
    elif isinstance(d, (list, tuple)) and d and all(isinstance(x, dict) for x in d):
        for i, v in enumerate(d):
            out.update(flatten(v, f"{prefix}{i}."))
    else:
        out[prefix[:-1]] = d
    return out


def _key(*parts: str) -> str:
    """MLflow keys allow alphanumerics, _ - . / and spaces; anything else becomes _."""
    return ".".join(re.sub(r"[^0-9A-Za-z_\-/ ]", "_", p) for p in parts)


def log_sweep(result: Any, tracking_uri: str | None = None, run_name: str | None = None) -> str:
    """Log an :class:`~groundplan.pipelines.sweep.EvalResult` as one MLflow run; returns the run id."""
    import mlflow

    from groundplan.pipelines.summary import render_table, render_text

    cfg = result.config
    uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or default_tracking_uri(cfg.output_dir)
    mlflow.set_tracking_uri(uri)
    use_experiment(cfg.name, cfg.output_dir)
    params = {k: str(v)[:500] for k, v in flatten(cfg.model_dump()).items()}
    params["config_hash"] = cfg.hash()
    metrics: dict[str, float] = {}
    for r in result.summary:
        base = (r.planner, r.family)
        metrics[_key(*base, "execution_success")] = float(r.execution_success)
        if r.plan_success is not None:
            metrics[_key(*base, "plan_success")] = float(r.plan_success)
        metrics[_key(*base, "mean_steps")] = float(r.mean_steps)
        metrics[_key(*base, "errors")] = float(r.errors)
        metrics[_key(*base, "episodes")] = float(r.episodes)
        for name, value in r.metrics.items():  # env metrics, e.g. VirtualHome's executability and LCS
            metrics[_key(*base, name)] = float(value)
    for group, r in result.best.items():  # each planner grid at its best variant
        metrics[_key("best", group, "execution_success")] = float(r.execution_success)
        for name, value in r.metrics.items():
            metrics[_key("best", group, name)] = float(value)
    for k, v in flatten(result.stats).items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            metrics[_key("sweep", *k.split("."))] = float(v)
    with mlflow.start_run(run_name=run_name or f"{cfg.name}-{cfg.hash()}") as run:
        mlflow.log_params(params)
        mlflow.log_metrics(metrics)
        run_dir = Path(result.run_dir)
        for name in ("summary.json", "grid_selection.json", "traces.jsonl", "config.json"):
            path = run_dir / name
            if path.exists():
                mlflow.log_artifact(str(path))
        if (run_dir / "frames").is_dir():
            mlflow.log_artifacts(str(run_dir / "frames"), "frames")
        try:
            from groundplan.pipelines.report import render_report

            render_report(run_dir)
            mlflow.log_artifacts(str(run_dir / "report"), "report")
        except Exception as exc:  # the report is a convenience; the traces are logged above
            log.warning("could not render the HTML report: %s", exc)
        try:
            mlflow.log_text(render_text(render_table(result.summary, title=cfg.name)), "summary_table.txt")
        except Exception as exc:  # the table is a convenience; the numbers are in summary.json
            log.warning("could not render the summary table: %s", exc)
        return run.info.run_id
