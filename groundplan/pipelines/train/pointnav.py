"""Training of SayNav's point-goal policy with RLlib (``groundplan train configs/train_pointnav_house.yaml``).

SayNav (Sec. 3.5) learns its low-level PointNav policy by imitating a shortest-path expert with DAgger.
The driver here:

1. rolls out the expert (:func:`~groundplan.envs.house.gym_env.expert_action`) in
   :class:`~groundplan.envs.house.gym_env.HousePointNavEnv` on the actors of an
   :class:`~groundplan.actors.pool.ActorPool` in parallel, and writes (obs, expert action, ...) rows to Parquet in RLlib's column format;
2. trains RLlib's ``BC`` (new API stack: Ray Data feeds the Learner) on all rows so far;
3. scores the policy on held-out houses (point-goal SR and SPL, with 95% intervals) to pick the best
   round;
4. for each DAgger round, rolls out the current policy (the expert acts with probability β), labels
   every visited state with the expert's action, adds the rows and goes back to 2;
5. reports the picked policy against the map's A* navigator (SayNav's OrNav) and the expert on the
   same episodes of other held-out houses;
6. logs params, per-round metrics and the dataset counts to MLflow, saves the best round's RLModule
   with ``pointnav.json`` and registers it (``models:/pointnav-house/<version>``), which the house env
   loads with ``navigator: learned``.
"""
from __future__ import annotations

import gc
import json
import logging
import math
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from groundplan.core.measures import navigation_rates, spl
from groundplan.pipelines.train.pointnav_config import PointNavTrainConfig
from groundplan.pipelines.train.canpay import TrainResult

log = logging.getLogger(__name__)

COLUMNS = ("eps_id", "obs", "actions", "rewards", "new_obs", "terminateds", "truncateds")


def load_pointnav_config(path: str | Path, overrides: list[str] | None = None) -> PointNavTrainConfig:
    from groundplan.config import load_yaml_model

    return load_yaml_model(PointNavTrainConfig, path, overrides, "point-goal training config")


def env_kwargs(cfg: PointNavTrainConfig, seeds: tuple[int, int]) -> dict[str, Any]:
    return {"seeds": tuple(seeds), "max_steps": cfg.max_episode_steps, "success_radius": cfg.success_radius,
            "max_goal_m": cfg.max_goal_m, "min_rooms": cfg.min_rooms, "max_rooms": cfg.max_rooms}


# ------------------------------------------------------------------------------------ rollouts
def rollout_episodes(kwargs: dict[str, Any], episode_seeds: list[int], policy: Any = None, beta: float = 1.0,
                     rng_seed: int = 0, record: bool = True, sample: bool = False
                     ) -> tuple[dict[str, list], list[dict[str, float]]]:
    """Play one point-goal episode per seed. The expert acts with probability ``beta``, else ``policy``
    (an RLlib module spec and its state, or None for the expert alone; greedy, or sampled with
    ``sample``); every visited state is recorded with the *expert's* action (DAgger's labels). Returns
    (RLlib columns, per-episode stats)."""
    from groundplan.envs.house.gym_env import HousePointNavEnv
    from groundplan.envs.house.learned_nav import choose_action

    module = None
    if policy is not None:
        spec, state = policy
        module = spec.build()
        module.set_state(state)
        module.eval()
    env = HousePointNavEnv(**kwargs)
    rng = np.random.default_rng(rng_seed)
    rows: dict[str, list] = {c: [] for c in COLUMNS}
    stats = []
    for ep in episode_seeds:
        obs, info = env.reset(seed=int(ep))
        while True:
            label = env.expert()
            action = label
            if module is not None and rng.random() >= beta:
                action = choose_action(module, obs, rng if sample else None)
            new_obs, reward, term, trunc, step_info = env.step(action)
            if record:
                for c, v in zip(COLUMNS, (str(ep), obs.tolist(), label, reward, new_obs.tolist(), term, trunc)):
                    rows[c].append(v)
            obs = new_obs
            if term or trunc:
                break
        stats.append(episode_stats(ep, bool(step_info["success"]), step_info["path_m"], info["shortest_m"], env.steps))
    return rows, stats


def episode_stats(seed: int, ok: bool, path_m: float, shortest_m: float, steps: int) -> dict[str, float]:
    """One point-goal episode's record; its SPL is :func:`~groundplan.core.measures.spl` (Anderson et al.
    2018), the definition the house env's MultiON episodes use too."""
    return {"seed": int(seed), "success": float(ok), "path_m": float(path_m), "shortest_m": float(shortest_m),
            "steps": float(steps), "spl": spl(ok, shortest_m, path_m)}


def astar_episodes(kwargs: dict[str, Any], episode_seeds: list[int]) -> list[dict[str, float]]:
    """The same episodes with the house env's A* navigator (SayNav's OrNav, which sees the map)."""
    from groundplan.envs.house.gym_env import HousePointNavEnv
    from groundplan.envs.house.sim import AStarNavigator

    env = HousePointNavEnv(**kwargs)
    nav = AStarNavigator()
    stats = []
    for ep in episode_seeds:
        _, info = env.reset(seed=int(ep))
        nav.navigate(env.sim, env.goal)
        a = env.sim.agent
        ok = math.hypot(env.goal[0] - a.x, env.goal[1] - a.z) <= env.success_radius
        stats.append(episode_stats(ep, ok, a.path_m, info["shortest_m"], a.steps))
    return stats


def _shards(seeds: list[int], n: int) -> list[list[int]]:
    return [seeds[k::n] for k in range(n) if seeds[k::n]]


def parallel_rollouts(cfg: PointNavTrainConfig, seeds: list[int], env_seeds: tuple[int, int], policy: Any = None,
                      beta: float = 1.0, rng_seed: int = 0, record: bool = True, astar: bool = False,
                      sample: bool = False) -> tuple[dict[str, list], list[dict[str, float]]]:
    """Episodes split into ``num_env_workers`` seed shards, played by as many sim-worker actors (an
    :class:`~groundplan.actors.pool.ActorPool`: a shard whose worker died is replayed on a fresh one, as
    Ray's task retries did) and merged in shard order, then sorted by seed. Shard ``k`` always gets
    ``rng_seed + k``, so the rows do not depend on which worker played it, nor on reruns."""
    import ray

    from groundplan.actors.pool import ActorPool, function_actor_factory

    kw = env_kwargs(cfg, env_seeds)
    shards = _shards(seeds, cfg.num_env_workers)
    if not shards:
        return {c: [] for c in COLUMNS}, []
    if astar:
        def call(worker: Any, job: tuple[int, list[int]]) -> Any:
            return worker.call.remote(astar_episodes, kw, job[1])
    else:
        policy_ref = ray.put(policy) if policy is not None else None

        def call(worker: Any, job: tuple[int, list[int]]) -> Any:
            k, shard = job
            return worker.call.remote(rollout_episodes, kw, shard, policy_ref, beta, rng_seed + k, record, sample)

    parts: list[Any] = [None] * len(shards)
    with ActorPool(function_actor_factory(), len(shards), max_retries=3) as pool:
        for out in pool.run(list(enumerate(shards)), call):
            if not out.ok:  # a rollout that raised (or a worker that kept dying): training cannot go on
                raise out.errors[-1]
            parts[out.index] = ({}, out.value) if astar else out.value
    rows: dict[str, list] = {c: [] for c in COLUMNS}
    stats: list[dict[str, float]] = []
    for r, s in parts:
        for c in COLUMNS:
            rows[c] += r.get(c, [])
        stats += s
    return rows, sorted(stats, key=lambda s: s["seed"])


def summarize(stats: list[dict[str, float]], prefix: str) -> dict[str, float]:
    """SR with its 95% Wilson interval, SPL with a 95% normal interval, n: SayNav's MultiON table's
    aggregation (:func:`~groundplan.core.measures.navigation_rates`), so the two report alike."""
    r = navigation_rates([s["success"] for s in stats], [s["spl"] for s in stats])
    return {f"{prefix}_n": float(r.n), f"{prefix}_sr": r.sr, f"{prefix}_sr_lo": r.sr_ci[0],
            f"{prefix}_sr_hi": r.sr_ci[1], f"{prefix}_spl": r.spl, f"{prefix}_spl_lo": r.spl_ci[0],
            f"{prefix}_spl_hi": r.spl_ci[1],
            f"{prefix}_steps": float(np.mean([s["steps"] for s in stats]))}


def write_rows(rows: dict[str, list], path: Path) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({c: rows[c] for c in COLUMNS}), path)
    return len(rows["actions"])


# ------------------------------------------------------------------------------------ RLlib BC
def bc_config(cfg: PointNavTrainConfig, files: list[str]):
    """RLlib BC over the Parquet rows (column format, one row per step). Ray Data's pre-learner runs as
    one small actor, so a 2-CPU local Ray does not deadlock waiting for CPUs."""
    from ray.rllib.algorithms.bc import BCConfig
    from ray.rllib.core.rl_module.rl_module import DefaultModelConfig

    from groundplan.envs.house.gym_env import HousePointNavEnv

    space = HousePointNavEnv(**env_kwargs(cfg, cfg.train_seeds))
    return (BCConfig()
            .environment(observation_space=space.observation_space, action_space=space.action_space)
            .offline_data(input_=files, input_read_method="read_parquet", input_read_episodes=False,
                          dataset_num_iters_per_learner=cfg.updates_per_iteration,
                          map_batches_kwargs={"concurrency": 1, "num_cpus": 0.25})
            .training(lr=cfg.lr, train_batch_size_per_learner=cfg.batch_size)
            .rl_module(model_config=DefaultModelConfig(fcnet_hiddens=list(cfg.hidden)))
            .learners(num_learners=0)
            .debugging(seed=cfg.seed)
            .evaluation(evaluation_interval=None))


def train_round(cfg: PointNavTrainConfig, files: list[str], progress: bool) -> tuple[Any, Any, float]:
    """(module spec, trained weights, last policy loss) after ``cfg.iterations`` RLlib iterations."""
    from tqdm.auto import tqdm

    if not progress:  # Ray Data logs every pipeline start and its progress to stdout at INFO
        logging.getLogger("ray.data").setLevel(logging.WARNING)
        import ray.data

        ray.data.DataContext.get_current().enable_progress_bars = False
    config = bc_config(cfg, files)
    algo = config.build_algo()
    loss = float("nan")
    try:
        for _ in tqdm(range(cfg.iterations), desc="BC iterations", disable=not progress):
            result = algo.train()
            learner = result.get("learners", {}).get("default_policy", {})
            if "policy_loss" in learner:
                loss = float(learner["policy_loss"])
        weights = algo.learner_group.get_weights()["default_policy"]
    finally:
        algo.stop()
        del algo
        gc.collect()  # close Ray Data's batch iterator now, while Ray is still up (not at interpreter exit)
    return config.get_rl_module_spec(), weights, loss


def episode_seeds(seed_range: tuple[int, int], n: int, seed: int) -> list[int]:
    """``n`` distinct episode seeds from ``seed_range`` (each picks a house, a start and a goal)."""
    lo, hi = seed_range
    return [int(s) for s in np.random.default_rng(seed).choice(np.arange(lo, hi), size=min(n, hi - lo), replace=False)]


def test_report(cfg: PointNavTrainConfig, policy: Any) -> dict[str, float]:
    """The chosen policy, the map's A* navigator and the expert on the same ``test_seeds`` episodes:
    ``test_*``, ``astar_*`` and ``expert_*`` SR and SPL with their intervals."""
    seeds = episode_seeds(cfg.test_seeds, cfg.eval_episodes, cfg.seed + 2)
    _, learned = parallel_rollouts(cfg, seeds, cfg.test_seeds, policy=policy, beta=0.0, record=False,
                                   rng_seed=cfg.seed + 11, sample=cfg.action == "sample")
    _, astar = parallel_rollouts(cfg, seeds, cfg.test_seeds, astar=True)
    _, expert = parallel_rollouts(cfg, seeds, cfg.test_seeds, record=False)
    report = {**summarize(learned, "test"), **summarize(astar, "astar"), **summarize(expert, "expert")}
    log.info("test (n=%d): learned SR %.3f SPL %.3f; A* SR %.3f SPL %.3f", len(seeds), report["test_sr"],
             report["test_spl"], report["astar_sr"], report["astar_spl"])
    return report


# ------------------------------------------------------------------------------------ driver
def run_train_pointnav(cfg: PointNavTrainConfig, progress: bool = True, ray_address: str | None = None
                       ) -> TrainResult:
    """See the module docstring."""
    import mlflow

    from groundplan.actors.group import RunnerGroup
    from groundplan.envs.house.learned_nav import META, MODULE_DIR
    from groundplan.pipelines.tracking import check_tracking_server, flatten, resolve_tracking_uri, use_experiment
    from groundplan.pipelines.train.canpay import register_version

    tracking_uri = resolve_tracking_uri(cfg.output_dir, cfg.tracking_uri)
    check_tracking_server(tracking_uri, hint="leave tracking_uri and MLFLOW_TRACKING_URI unset to register in the "
                          "SQLite store under output_dir")

    run_root = (Path(cfg.output_dir) / cfg.name).resolve()
    data_dir = run_root / "data"
    shutil.rmtree(data_dir, ignore_errors=True)  # each run collects its own rounds: no stale rows
    use_experiment(cfg.experiment, cfg.output_dir, tracking_uri)
    rng = np.random.default_rng(cfg.seed)
    lo, hi = cfg.train_seeds
    eval_seeds = episode_seeds(cfg.eval_seeds, cfg.eval_episodes, cfg.seed + 1)
    # a local Ray gets at least this many logical CPUs: the rollout actors plus RLlib's learner and Ray
    # Data's pre-learner actor
    group = RunnerGroup(address=ray_address, cpus_needed=cfg.num_env_workers + 2)
    group.connect()
    history: list[dict[str, float]] = []
    try:
        with mlflow.start_run(run_name=cfg.name) as run:
            mlflow.log_params({k: str(v)[:500] for k, v in flatten(cfg.model_dump()).items()})
            t0 = time.perf_counter()
            files: list[str] = []
            best: tuple[tuple[float, float], Any, Any, dict[str, float]] | None = None
            policy = None
            total_rows = 0
            sample = cfg.action == "sample"
            for rnd in range(cfg.dagger_rounds + 1):
                n_eps = cfg.expert_episodes if rnd == 0 else cfg.dagger_episodes
                seeds = [int(s) for s in rng.integers(lo, hi, size=n_eps)]
                beta = 1.0 if rnd == 0 else cfg.dagger_beta / 2 ** (rnd - 1)
                rows, _ = parallel_rollouts(cfg, seeds, cfg.train_seeds, policy=policy, beta=beta,
                                            rng_seed=cfg.seed * 1000 + rnd, sample=sample)
                path = data_dir / f"round-{rnd}.parquet"
                total_rows += write_rows(rows, path)
                files.append(str(path))
                spec, weights, loss = train_round(cfg, files, progress)
                policy = (spec, weights)
                _, stats = parallel_rollouts(cfg, eval_seeds, cfg.eval_seeds, policy=policy, beta=0.0, record=False,
                                             rng_seed=cfg.seed + 7, sample=sample)
                metrics = {"round": float(rnd), "rows": float(total_rows), "train_loss": loss, "beta": beta,
                           **summarize(stats, "val")}
                history.append(metrics)
                mlflow.log_metrics({k: v for k, v in metrics.items() if k != "round"}, step=rnd)
                log.info("round %d (beta %.2f, %d rows): loss %.3f, held-out SR %.3f SPL %.3f", rnd, beta, total_rows,
                         loss, metrics["val_sr"], metrics["val_spl"])
                key = (metrics["val_sr"], metrics["val_spl"])
                if best is None or key > best[0]:
                    best = (key, spec, weights, metrics)
            assert best is not None
            _, spec, weights, metrics = best
            report = test_report(cfg, (spec, weights))
            mlflow.log_metrics(report)
            model_dir = run_root / "model"
            shutil.rmtree(model_dir, ignore_errors=True)
            module = spec.build()
            module.set_state(weights)
            module.save_to_path(str(model_dir / MODULE_DIR))
            final = {**report, **metrics, "train_s": time.perf_counter() - t0}
            meta = {"success_radius": cfg.success_radius, "algorithm": cfg.algorithm, "action": cfg.action, "rounds": cfg.dagger_rounds + 1,
                    "best_round": int(metrics["round"]), "features": "pointnav_features v2 (goal, 24 ranges to 5 m, prev action)",
                    "metrics": final, "history": history, "config": cfg.model_dump(mode="json")}
            (model_dir / META).write_text(json.dumps(meta, indent=1))
            mlflow.log_metrics({f"best.{k}": float(v) for k, v in final.items()})
            mlflow.log_artifacts(str(model_dir), artifact_path="model")
            version = register_version(cfg.name, f"{run.info.artifact_uri}/model", run.info.run_id, tracking_uri)
    finally:
        group.close()
    uri = f"models:/{cfg.name}/{version.version}"
    log.info("registered %s (run %s) in %s", uri, run.info.run_id, tracking_uri)
    return TrainResult(model_uri=uri, version=int(version.version), run_id=run.info.run_id,
                       tracking_uri=tracking_uri, model_dir=model_dir, metrics=final, history=history)
