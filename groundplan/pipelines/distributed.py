"""Evaluation sweeps on Ray: sim workers, a batched LLM scorer, an asyncio coordinator (DESIGN.md, "Runtime").

``run_eval_ray`` does what :func:`groundplan.pipelines.evaluate.run_eval` does (same config expansion,
same ``traces.jsonl``/``summary.json``, same :class:`EvalResult`), but keeps ``max_in_flight``
episodes running at once. Each episode is a coroutine that leases one ``SimWorker`` from a pool and
runs the unchanged planner loop (``run_episode``) in a thread; the planner's LLM calls go to the
shared ``LLMScorer`` actor(s), which batch requests from all in-flight episodes.

Guarantees:
- a malformed config (unknown plugin, bad task selection, bad planner options) fails before Ray starts;
- each finished episode is appended to ``traces.jsonl`` at once by the coordinator alone; a re-run
  skips the episodes already there, so nothing is lost or duplicated;
- a sim worker that dies mid-episode is restarted (or replaced) and the episode rerun from scratch,
  at most ``max_episode_retries`` times, after which the episode is recorded as failed with the error;
- a scorer that dies is restarted by Ray (``max_restarts``) and its pending requests resent
  (``max_task_retries``).
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import math
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Sequence

from tqdm.auto import tqdm

from groundplan.config import EvalConfig, PlannerSpec
from groundplan.core.errors import InvalidInputError
from groundplan.factory import make_env, make_planner
from groundplan.llm.base import LanguageModel
from groundplan.pipelines.evaluate import (
    EpisodeSpec,
    EvalResult,
    collect_results,
    expand,
    prepare_run,
    validate_names,
)
from groundplan.planners.base import Planner
from groundplan.report import frame_saver
from groundplan.rollout.episode import run_episode
from groundplan.rollout.traces import EpisodeTrace, write_traces

log = logging.getLogger(__name__)


class _NullLM:
    """Stands in for the LM while planner options are validated before anything starts."""

    name = "null"

    def _no(self, *a: Any, **k: Any) -> Any:
        raise RuntimeError("the null LM only validates planner options")

    score = score_batch = generate = embed = _no


def check_config(cfg: EvalConfig) -> list[EpisodeSpec]:
    """Everything that can be checked without actors: plugin names, task selection, planner options.
    Returns the expanded episodes; raises (naming the bad field) otherwise."""
    validate_names(cfg)
    specs = expand(cfg, make_env(cfg.env))
    for p in cfg.planners:
        try:
            make_planner(p, _NullLM(), cfg.max_steps)  # type: ignore[arg-type]
        except InvalidInputError:
            raise
        except (TypeError, ValueError) as e:
            raise InvalidInputError(f"planners[{p.display}].options: {e}") from e
    return specs


def _build_planner(spec: PlannerSpec, lm: LanguageModel, max_steps: int, affordance_server: Any, episode: str) -> Planner:
    if affordance_server is None or not spec.affordance:
        return make_planner(spec, lm, max_steps)
    from groundplan.actors.affordance_server import RemoteAffordance

    return make_planner(spec, lm, max_steps, affordance=RemoteAffordance(affordance_server, spec.display, episode))


def _failed_trace(cfg: EvalConfig, spec: EpisodeSpec, error: str) -> EpisodeTrace:
    return EpisodeTrace(
        episode_id=spec.episode_id, planner=spec.planner.display, env=cfg.env.name, task_id=spec.task.task_id,
        family=spec.task.family, instruction=spec.task.instruction, seed=spec.seed, llm=cfg.llm.model,
        config_hash=cfg.hash(), execution_success=False, plan_success=False, error=error,
    )


def _connect(address: str | None, init_kwargs: dict[str, Any] | None, cpus_needed: float = 0.0) -> bool:
    """Join a cluster (``address`` or RAY_ADDRESS) or start a local Ray; True when we started it.

    A local Ray gets at least ``cpus_needed`` logical CPUs: the actors' ``num_cpus`` are scheduling
    reservations, and on a 2-core machine the default sweep (a 1-CPU scorer and 4 half-CPU sim
    workers) would otherwise leave workers unschedulable and the sweep waiting forever."""
    import ray

    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS") or None
    kwargs = {"include_dashboard": False, "log_to_driver": False, **(init_kwargs or {})}
    if address is None:
        # local Ray: workers must import groundplan (and test helpers) from this checkout
        root = str(Path(__file__).resolve().parents[2])
        env_vars = {"PYTHONPATH": os.pathsep.join(p for p in [root, os.environ.get("PYTHONPATH", "")] if p)}
        kwargs.setdefault("runtime_env", {"env_vars": env_vars})
        kwargs.setdefault("num_cpus", max(os.cpu_count() or 1, math.ceil(cpus_needed)))
    ray.init(address=address, **kwargs)
    return True


def _wait_for_actors(refs: list[Any], what: str, timeout_s: float | None) -> list[Any]:
    """``ray.get`` the actors' first calls, failing clearly (not hanging) when the cluster cannot
    place them, e.g. it lacks the GPUs or custom resources they ask for."""
    import ray

    try:
        return ray.get(refs, timeout=timeout_s)
    except ray.exceptions.GetTimeoutError:
        raise InvalidInputError(
            f"the {what} did not start within {timeout_s:.0f} s: the cluster cannot place them "
            f"(available: {ray.available_resources()}; total: {ray.cluster_resources()}). Ask for fewer "
            "workers or scorers, or fewer CPUs/GPUs/resources per actor."
        ) from None


def run_eval_ray(
    cfg: EvalConfig,
    *,
    address: str | None = None,
    num_workers: int = 4,
    max_in_flight: int | None = None,
    num_scorers: int = 1,
    scorer_num_gpus: float = 0.0,
    scorer_num_cpus: float = 1.0,
    scorer_resources: dict[str, float] | None = None,
    scorer_num_threads: int | None = None,
    worker_num_cpus: float = 0.5,
    worker_resources: dict[str, float] | None = None,
    batch_window_ms: float = 5.0,
    max_batch: int = 32,
    lm_factory: Callable[[], LanguageModel] | None = None,
    remote_affordance: bool = False,
    max_episode_retries: int = 3,
    call_timeout_s: float | None = 600.0,
    start_timeout_s: float = 600.0,
    progress: bool = True,
    resume: bool = True,
    tracking: bool = True,
    tracking_uri: str | None = None,
    init_kwargs: dict[str, Any] | None = None,
    shutdown: bool | None = None,
    on_episode: Callable[[EpisodeTrace, dict[str, Any]], None] | None = None,
) -> EvalResult:
    """Run the sweep of ``cfg`` on Ray and return its traces and summary (as ``run_eval``).

    ``address``/``RAY_ADDRESS`` joins a cluster, else a local Ray starts (and is shut down at the end
    unless ``shutdown=False``). ``num_workers`` SimWorkers, ``num_scorers`` LLMScorer replicas
    (``scorer_num_gpus`` each), ``max_in_flight`` concurrent episodes (default ``num_workers``).
    ``lm_factory`` builds the model inside the scorer instead of ``cfg.llm`` (tests use fakes).
    Actors that cannot be placed within ``start_timeout_s`` fail the sweep with the cluster's resources
    in the message (a local Ray is started with enough logical CPUs for the requested actors).
    ``on_episode(trace, ctx)`` is called after each episode is persisted (``ctx`` has the actor handles;
    the fault-tolerance tests kill actors from it). MLflow logging when ``tracking``.
    """
    if num_workers < 1 or num_scorers < 1:
        raise InvalidInputError("num_workers and num_scorers must be at least 1")
    specs = check_config(cfg)  # fails before any actor starts
    traces_path, todo = prepare_run(cfg, specs, resume)
    in_flight = max(1, min(max_in_flight or num_workers, len(todo) or 1))
    stats: dict[str, Any] = {"episodes_run": len(todo), "num_workers": num_workers, "max_in_flight": in_flight,
                             "num_scorers": num_scorers, "episode_reruns": 0, "failed_after_retries": 0}
    wall = 0.0
    if todo:
        import ray

        n_workers = min(num_workers, in_flight)
        started = _connect(address, init_kwargs,
                           cpus_needed=num_scorers * scorer_num_cpus + n_workers * worker_num_cpus + 0.5 * remote_affordance)
        actors: list[Any] = []
        try:
            from groundplan.actors.affordance_server import make_affordance_server
            from groundplan.actors.scorer import make_scorer_actor
            from groundplan.actors.sim_worker import make_sim_worker

            scorers = [
                make_scorer_actor(num_gpus=scorer_num_gpus, num_cpus=scorer_num_cpus, resources=scorer_resources,
                                  backend=cfg.llm.backend, model=cfg.llm.model, options=cfg.llm.options,
                                  batch_window_ms=batch_window_ms, max_batch=max_batch, lm_factory=lm_factory,
                                  num_threads=scorer_num_threads)
                for _ in range(num_scorers)
            ]
            actors += scorers

            def new_worker(i: int) -> Any:
                return make_sim_worker(cfg.env.name, cfg.env.options, i, num_cpus=worker_num_cpus, resources=worker_resources)

            workers = [new_worker(i) for i in range(n_workers)]
            actors += workers
            aff = None
            if remote_affordance:
                sources = {p.display: {"source": p.affordance, "options": p.affordance_options}
                           for p in cfg.planners if p.affordance}
                aff = make_affordance_server(sources=sources)
                actors.append(aff)
            infos = _wait_for_actors([w.info.remote() for w in workers], "sim workers", start_timeout_s)
            lm_name = _wait_for_actors([scorers[0].get_name.remote()], "LLM scorer", start_timeout_s)[0]
            t0 = time.perf_counter()
            asyncio.run(_coordinate(cfg, todo, traces_path, scorers, list(zip(workers, infos)), new_worker, aff,
                                    lm_name, in_flight, max_episode_retries, call_timeout_s, progress, stats,
                                    on_episode, actors))
            wall = time.perf_counter() - t0
            scorer_stats = ray.get([s.stats.remote() for s in scorers])
            stats["scorer"] = _merge_scorer_stats(scorer_stats)
            if aff is not None:
                stats["affordance_server"] = ray.get(aff.stats.remote())
        finally:
            for a in actors:
                try:
                    ray.kill(a)
                except Exception:
                    pass
            if shutdown or (shutdown is None and started):
                ray.shutdown()
    stats.update(wall_s=wall, episodes_per_min=60 * len(todo) / wall if todo and wall else 0.0)
    result = collect_results(cfg, specs, traces_path, len(todo), stats)
    if tracking:
        from groundplan.pipelines.tracking import log_sweep

        stats["mlflow_run_id"] = log_sweep(result, tracking_uri=tracking_uri)
    return result


def _merge_scorer_stats(per: list[dict[str, Any]]) -> dict[str, Any]:
    if len(per) == 1:
        return per[0]
    req = sum(s["requests"] for s in per)
    bat = sum(s["batches"] for s in per)
    opts = sum(s["options"] for s in per)
    busy = sum(s["busy_s"] for s in per)
    return {"requests": req, "batches": bat, "mean_batch_size": req / bat if bat else 0.0, "options": opts,
            "busy_s": busy, "options_per_s": opts / busy if busy else 0.0, "replicas": per}


async def _coordinate(cfg: EvalConfig, todo: list[EpisodeSpec], traces_path: Path, scorers: list[Any],
                      workers: list[tuple[Any, dict]], new_worker: Callable[[int], Any], aff: Any, lm_name: str,
                      in_flight: int, max_retries: int, call_timeout_s: float | None, progress: bool,
                      stats: dict[str, Any], on_episode: Any, actors: list[Any]) -> None:
    import ray

    from groundplan.actors.remote import RemoteEnv, RemoteLM

    loop = asyncio.get_running_loop()
    executor = ThreadPoolExecutor(max_workers=in_flight + 2, thread_name_prefix="episode")
    pool: asyncio.Queue[tuple[Any, dict]] = asyncio.Queue()
    for w in workers:
        pool.put_nowait(w)
    queue = list(todo)
    queue.reverse()
    rr = itertools.count()
    cfg_hash = cfg.hash()
    save_frames = frame_saver(traces_path.parent)
    next_id = itertools.count(len(workers))
    bar = tqdm(total=len(todo), desc=cfg.name, unit="ep", disable=not progress)
    t0 = time.perf_counter()
    finished = 0
    ctx = {"scorers": scorers, "workers": [w for w, _ in workers], "stats": stats}

    def episode(spec: EpisodeSpec, handle: Any, info: dict) -> tuple[EpisodeTrace | None, BaseException | None]:
        env = RemoteEnv(handle, info, timeout_s=call_timeout_s)
        lm = RemoteLM(scorers, name=lm_name, counter=rr, timeout_s=call_timeout_s)
        try:
            planner = _build_planner(spec.planner, lm, cfg.max_steps, aff, spec.episode_id)
            trace = run_episode(planner, env, spec.task, spec.seed, max_steps=cfg.max_steps, llm_name=cfg.llm.model,
                                config_hash=cfg_hash, episode_id=spec.episode_id, on_step=save_frames)
        except Exception as exc:  # InvalidInputError from planner.reset, or an actor death outside run_episode
            died = env.actor_error or lm.actor_error
            if died is not None:
                return None, died
            return _failed_trace(cfg, spec, f"{type(exc).__name__}: {exc} (episode setup)"), None
        finally:
            if aff is not None:
                aff.release.remote(spec.episode_id)
        died = env.actor_error or lm.actor_error
        return (None, died) if died is not None else (trace, None)

    def heal(handle: Any, info: dict) -> tuple[Any, dict]:
        """The restarted worker if Ray brought it back, else a new one."""
        try:
            return handle, ray.get(handle.info.remote(), timeout=60)
        except Exception as exc:
            log.warning("sim worker %s is gone (%s); starting a new one", info.get("worker_id"), type(exc).__name__)
            try:
                ray.kill(handle, no_restart=True)
            except Exception:
                pass
            fresh = new_worker(next(next_id))
            actors.append(fresh)
            ctx["workers"] = [w for w in ctx["workers"] if w is not handle] + [fresh]
            return fresh, ray.get(fresh.info.remote(), timeout=120)

    async def run_one(spec: EpisodeSpec) -> EpisodeTrace:
        errors: list[str] = []
        while True:
            handle, info = await pool.get()
            trace, died = await loop.run_in_executor(executor, episode, spec, handle, info)
            if died is None:
                pool.put_nowait((handle, info))
                assert trace is not None
                return trace
            errors.append(f"{type(died).__name__}: {str(died).splitlines()[0] if str(died) else ''}")
            log.warning("episode %s: actor died (%s); attempt %d of %d", spec.episode_id, errors[-1], len(errors),
                        max_retries + 1)
            try:
                pool.put_nowait(await loop.run_in_executor(executor, heal, handle, info))
            except Exception as exc:  # cannot even start a new worker: keep the old handle in the pool
                log.error("could not replace sim worker: %s", exc)
                pool.put_nowait((handle, info))
            if len(errors) > max_retries:
                stats["failed_after_retries"] += 1
                return _failed_trace(cfg, spec, f"actor died {len(errors)} times; last: {errors[-1]}")
            stats["episode_reruns"] += 1

    async def lane() -> None:
        nonlocal finished
        while queue:
            spec = queue.pop()
            trace = await run_one(spec)
            write_traces(traces_path, [trace])  # only the event loop writes: one record per episode
            finished += 1
            bar.update(1)
            bar.set_postfix_str(f"{finished / max(time.perf_counter() - t0, 1e-9):.2f} ep/s")
            if on_episode is not None:
                on_episode(trace, ctx)

    try:
        await asyncio.gather(*(lane() for _ in range(in_flight)))
    finally:
        bar.close()
        executor.shutdown(wait=False, cancel_futures=True)


# ---------------------------------------------------------------------------------------------
# CLI glue: ``groundplan eval CONFIG [--address A] [--workers N] ...`` (``--local`` skips Ray)
# ---------------------------------------------------------------------------------------------


def add_ray_arguments(parser: Any) -> None:
    """Add the Ray flags to an ``argparse`` (sub)parser."""
    g = parser.add_argument_group("Ray runtime")
    g.add_argument("--local", action="store_true",
                   help="run in this process without Ray (default: Ray actors, a local Ray unless --address)")
    g.add_argument("--address", default=None, help="join this Ray cluster ('auto', ray://host:10001); default: RAY_ADDRESS")
    g.add_argument("--workers", type=int, default=4, help="sim workers = episodes in flight (default 4)")
    g.add_argument("--in-flight", type=int, default=None, help="episodes in flight (default: --workers)")
    g.add_argument("--scorers", type=int, default=1, help="LLM scorer replicas (default 1)")
    g.add_argument("--scorer-gpus", type=float, default=0.0, help="GPUs per scorer replica (default 0)")
    g.add_argument("--scorer-threads", type=int, default=None,
                   help="torch threads per scorer (default: all cores of its node; Ray would give it 1)")
    g.add_argument("--batch-window-ms", type=float, default=5.0, help="scorer batching window (default 5 ms)")
    g.add_argument("--max-batch", type=int, default=32, help="most score requests per batch (default 32)")
    g.add_argument("--scorer-resource", action="append", default=[], metavar="NAME=AMOUNT",
                   help="custom Ray resource each scorer needs, e.g. scorer=1 (GPU nodes)")
    g.add_argument("--worker-resource", action="append", default=[], metavar="NAME=AMOUNT",
                   help="custom Ray resource each sim worker needs, e.g. sim=1 (CPU nodes)")
    g.add_argument("--no-mlflow", action="store_true", help="do not log the sweep to MLflow")


def _resources(items: Sequence[str]) -> dict[str, float] | None:
    out: dict[str, float] = {}
    for item in items or []:
        name, sep, amount = item.partition("=")
        try:
            out[name.strip()] = float(amount) if sep else 1.0
        except ValueError:
            raise InvalidInputError(f"resource {item!r} is not NAME=AMOUNT") from None
    return out or None


def ray_kwargs_from_args(args: Any) -> dict[str, Any]:
    """Keyword arguments of :func:`run_eval_ray` from parsed :func:`add_ray_arguments` flags."""
    return dict(
        address=args.address, num_workers=args.workers, max_in_flight=args.in_flight, num_scorers=args.scorers,
        scorer_num_gpus=args.scorer_gpus, scorer_num_threads=args.scorer_threads, batch_window_ms=args.batch_window_ms, max_batch=args.max_batch,
        scorer_resources=_resources(args.scorer_resource), worker_resources=_resources(args.worker_resource),
        tracking=not args.no_mlflow,
    )
