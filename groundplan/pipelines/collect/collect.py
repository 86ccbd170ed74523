"""``groundplan collect``: expert (or planner) trajectories from parallel sim workers into sharded
Parquet, resumable and exactly once (SayCanPay Sec. 4/6: N expert trajectories per env and split).

The driver lists each split's deterministic tasks, drops the trajectory ids already stored (a rerun
resumes), and hands the rest to the :class:`~groundplan.actors.worker.EpisodeWorker` of the
:class:`~groundplan.actors.group.RunnerGroup` its ``runtime:`` section asks for: one in this process
(``runtime.executor: local``) or a pool of actors (``runtime.workers``, each with
``runtime.envs_per_worker`` envs). Each finished trajectory is appended at once to the store
(:class:`~groundplan.datasets.store.ShardWriter`); an episode whose worker died is rerun on a fresh worker
(up to ``runtime.max_episode_retries``); an episode that raised is logged and left for the next run. At
the end the dataset is logged to MLflow (schema, counts per split) with the tracking store under the
output folder.
"""
from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from tqdm.auto import tqdm

from groundplan.actors.group import RunnerGroup, pool_size
from groundplan.actors.pool import is_app_error
from groundplan.actors.worker import CollectItem, TrajectorySource, WorkerSpec
from groundplan.core.types import Task
from groundplan.datasets.schema import TRAJECTORY_SCHEMA
from groundplan.core.errors import InvalidInputError
from groundplan.core.validation import some
from groundplan.datasets.store import ShardWriter, load_trajectories, prompt_examples, stored_goals
from groundplan.envs import ENVS
from groundplan.envs.base import opened, require_feasibility_labels
from groundplan.factory import build_env
from groundplan.pipelines.collect.config import CollectConfig

log = logging.getLogger(__name__)
__all__ = ["CollectResult", "run_collect", "load_trajectories", "prompt_examples", "plan_items"]


class CollectInterrupted(RuntimeError):
    """Raised by the ``stop_after`` test hook, as if the driver had been killed."""


@dataclass
class CollectResult:
    data_dir: Path
    appended: int
    skipped: int
    errors: list[str] = field(default_factory=list)
    reruns: int = 0
    wall_s: float = 0.0
    counts: dict[str, int] = field(default_factory=dict)
    successes: dict[str, int] = field(default_factory=dict)
    mlflow_run_id: str | None = None


def source_label(cfg: CollectConfig) -> str:
    """The label a trajectory id carries (the expert name is only known inside a worker)."""
    s = cfg.source
    if s.kind == "expert":
        return f"expert:{s.expert or cfg.env.name}"
    assert s.planner is not None
    return f"planner:{s.planner.display}"


def split_tasks(cfg: CollectConfig, split: str) -> list[Task]:
    """The deterministic tasks of ``split`` (the env built with ``split=<split>``)."""
    with opened(build_env(cfg.env.name, {**cfg.env.options, "split": split})) as env:
        tasks = env.tasks()
    return tasks[: cfg.limit] if cfg.limit else tasks


def plan_items(cfg: CollectConfig) -> list[CollectItem]:
    """Every trajectory of the run, with ids ``<env>|<split>|<task_id>|<source>|<seed>``: the same
    config always names the same trajectories, which is what makes resuming exact."""
    label = source_label(cfg)
    items = []
    for split in cfg.splits:
        for task in split_tasks(cfg, split):
            for seed in cfg.seeds:
                items.append(CollectItem(f"{cfg.env.name}|{split}|{task.task_id}|{label}|{seed}", split, task, seed))
    return items


class StaleDataError(InvalidInputError):
    """The store holds trajectories under this run's ids whose tasks are not this run's tasks."""


def check_stored_tasks(items: list[CollectItem], stored: dict[str, str], data_dir: Path) -> None:
    """Refuse to resume onto a store whose trajectories were collected for other tasks under the same
    ids (a trajectory id names a task by its index in the split, and a split's draw changes with its
    options, e.g. the train size its test tasks are kept apart from). Kept silently, they would be
    trained and evaluated on as if they were this config's tasks."""
    stale = [it.traj_id for it in items if it.traj_id in stored and stored[it.traj_id] != it.task.instruction]
    if stale:
        raise StaleDataError(
            f"{data_dir} holds {len(stale)} trajectories whose instruction differs from this config's task of "
            f"the same id ({some(stale)}): they were collected with other env options. Collect into another "
            f"output_dir, or rerun with --fresh to delete the stored shards.")


def run_collect(cfg: CollectConfig, *, progress: bool = True, fresh: bool = False,
                stop_after: int | None = None) -> CollectResult:
    """Collect every trajectory of ``cfg`` not stored yet; returns what this run did.

    ``fresh`` deletes the stored shards first. Test hook: ``stop_after`` raises
    :class:`CollectInterrupted` after that many appends (the open journal is left as a crash leaves
    it)."""
    if cfg.runtime.mlflow:  # a tracking server that is down fails now, not after the collection
        from groundplan.pipelines.tracking import check_tracking_server, resolve_tracking_uri

        check_tracking_server(resolve_tracking_uri(cfg.output_dir),
                              hint="collect without tracking (runtime.mlflow: false in the collect config)")
    if cfg.source.kind == "planner" and cfg.source.planner is not None:  # an LLM server that cannot score
        from groundplan.config import probe_llm_needs

        probe_llm_needs(cfg.source.llm, [cfg.source.planner])
    if cfg.label_listed:  # before any shard is touched
        require_feasibility_labels(ENVS.get(cfg.env.name))
    data_dir = cfg.data_dir
    if fresh and data_dir.exists():
        for f in data_dir.iterdir():
            f.unlink()
    start = time.perf_counter()
    items = plan_items(cfg)
    done = stored_goals(data_dir)
    check_stored_tasks(items, done, data_dir)
    todo = [it for it in items if it.traj_id not in done]
    result = CollectResult(data_dir=data_dir, appended=0, skipped=len(items) - len(todo))
    log.info("collect %s: %d trajectories, %d stored, %d to run", cfg.name, len(items), result.skipped, len(todo))
    with ShardWriter(data_dir, cfg.shard_size) as writer, \
            tqdm(total=len(todo), desc=f"collect {cfg.env.name}", unit="traj", disable=not progress) as bar:

        def sink(row: dict[str, Any]) -> None:
            if writer.append(row):
                result.appended += 1
            bar.update(1)
            if stop_after is not None and result.appended >= stop_after:
                raise CollectInterrupted(f"stopped after {stop_after} trajectories (test hook)")

        if todo:
            _run(cfg, todo, sink, result)
    result.wall_s = time.perf_counter() - start
    if data_dir.exists() and any(data_dir.glob("part-*.parquet")):
        table = load_trajectories(data_dir)
        result.counts = dict(Counter(table.column("split").to_pylist()))
        ok = [s for s, good in zip(table.column("split").to_pylist(), table.column("success").to_pylist()) if good]
        result.successes = dict(Counter(ok))
        if cfg.runtime.mlflow:
            result.mlflow_run_id = log_dataset(cfg, table, result)
    return result


def _run(cfg: CollectConfig, todo: list[CollectItem], sink: Callable, result: CollectResult) -> None:
    """``todo`` on the workers of a runner group; rows reach ``sink`` in this thread. On Ray a worker
    that died (``max_restarts=0``) is replaced and its trajectory rerun, at most
    ``runtime.max_episode_retries`` times; a trajectory that raised is recorded in ``result.errors`` and not
    rerun (it would raise again; the next run retries it)."""
    rt = cfg.runtime
    local = rt.executor == "local"
    n_workers, in_flight = pool_size(rt, len(todo))
    s = cfg.source
    spec = WorkerSpec(cfg.env, cfg.max_steps, envs=1 if local else rt.envs_per_worker,
                      source=TrajectorySource(expert=s.expert, planner=s.planner, llm=s.llm)
                      if s.kind == "planner" else TrajectorySource(expert=s.expert),
                      max_admissible=cfg.max_admissible, label_listed=cfg.label_listed)

    def failed_attempt(item: CollectItem, exc: BaseException, attempt: int, will_retry: bool) -> None:
        if will_retry:
            log.warning("worker died on %s (attempt %d); rerunning", item.traj_id, attempt)
            result.reruns += 1

    with RunnerGroup.for_runtime(rt, cpus_needed=n_workers * rt.worker_cpus) as group:
        group.add_workers(spec, n_workers, num_cpus=rt.worker_cpus, resources=rt.worker_resources or None,
                          max_in_flight=in_flight, max_retries=rt.max_episode_retries,
                          call_timeout_s=rt.call_timeout_s, what="collection workers")
        for out in group.run(todo, on_failure=failed_attempt):
            item = out.item
            if out.ok:
                sink(out.value)
                continue
            e = out.errors[-1]
            if local or is_app_error(e):  # an env or expert error: recorded, retried by the next run
                cause = getattr(e, "cause", e)
                result.errors.append(f"{item.traj_id}: {type(cause).__name__}: {cause}")
                log.warning("trajectory %s failed: %s", item.traj_id, cause)
            else:
                result.errors.append(f"{item.traj_id}: worker died {len(out.errors)} times ({e})")


def log_dataset(cfg: CollectConfig, table: Any, result: CollectResult) -> str:
    """Log the dataset to MLflow: params, counts and successes per split, the schema, and a dataset input
    (name, digest, the folder as its source) that a training config can name as ``runs:/<run id>``."""
    import mlflow

    from groundplan.pipelines.tracking import resolve_tracking_uri, use_experiment

    use_experiment(cfg.name, cfg.output_dir, resolve_tracking_uri(cfg.output_dir))
    with mlflow.start_run(run_name=f"{cfg.name}-{time.strftime('%Y%m%d-%H%M%S')}") as run:
        mlflow.log_params({"env": cfg.env.name, "env_options": str(cfg.env.options)[:500],
                           "source": source_label(cfg), "splits": ",".join(cfg.splits), "workers": cfg.runtime.workers,
                           "executor": cfg.runtime.executor, "data_dir": str(cfg.data_dir.resolve())})
        metrics: dict[str, float] = {"trajectories": float(table.num_rows), "appended": float(result.appended),
                                     "skipped": float(result.skipped), "reruns": float(result.reruns),
                                     "errors": float(len(result.errors)), "wall_s": result.wall_s}
        lengths = [len(a) for a in table.column("actions").to_pylist()]
        for split, n in result.counts.items():
            metrics[f"count.{split}"] = float(n)
            metrics[f"success.{split}"] = float(result.successes.get(split, 0))
            sl = [ln for ln, s in zip(lengths, table.column("split").to_pylist()) if s == split]
            metrics[f"mean_actions.{split}"] = sum(sl) / max(len(sl), 1)
        mlflow.log_metrics(metrics)
        mlflow.log_dict({"fields": [{"name": f.name, "type": str(f.type)} for f in TRAJECTORY_SCHEMA]},
                        "schema.json")
        try:  # what `groundplan train` reads when its data names this run (groundplan.datasets.source)
            from groundplan.datasets.source import COLLECT_CONTEXT, collected_dataset

            mlflow.log_input(collected_dataset(table, cfg.data_dir, cfg.name), context=COLLECT_CONTEXT)
        except Exception as e:  # training falls back to the data_dir param above; the metrics are the record
            log.warning("MLflow dataset input not logged: %s", e)
        return run.info.run_id
