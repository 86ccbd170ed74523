"""The fixed small runs of collection and point-goal rollouts whose outputs must not change when the
runtime (who connects to Ray, which worker plays an episode) is restructured (``tests/test_runtime_golden.py``).

``collect_records`` is a babyai expert collection reduced to its rows in trajectory-id order;
``rollout_records`` is expert and A* point-goal rollouts over two seed shards. Neither holds a timing, a
pid or a wall time, so both are compared exactly. ``python tests/golden/runtime.py`` (re)records
``expected_collect_babyai.json`` and ``expected_pointnav_rollouts.json`` beside this file with the code of
the checkout; a restructure must leave them as they are.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
COLLECT = HERE / "expected_collect_babyai.json"
ROLLOUTS = HERE / "expected_pointnav_rollouts.json"

log = logging.getLogger(__name__)


def collect_config(output_dir: str, executor: str, envs_per_worker: int = 1) -> Any:
    """Two babyai tasks per train family, one per test family, seeds 0 and 1, expert actions."""
    from groundplan.pipelines.collect.config import CollectConfig

    return CollectConfig.model_validate({
        "name": "golden", "env": {"name": "babyai", "options": {"train_per_family": 2, "test_per_family": 1,
                                                                 "generalize_per_family": 1}},
        "seeds": [0, 1], "runtime": {"executor": executor, "workers": 2, "worker_cpus": 1.0, "mlflow": False,
                                     "envs_per_worker": envs_per_worker},
        "shard_size": 5, "output_dir": output_dir})


def collect_records(output_dir: str, executor: str, envs_per_worker: int = 1) -> list[dict[str, Any]]:
    """Every stored row of a fresh collection, sorted by trajectory id (shards hold them in finishing order)."""
    from groundplan.datasets import load_trajectories
    from groundplan.pipelines.collect.collect import run_collect

    cfg = collect_config(output_dir, executor, envs_per_worker)
    result = run_collect(cfg, progress=False, fresh=True)
    if result.errors:
        raise RuntimeError(f"collection failed: {result.errors}")
    return sorted(load_trajectories(cfg.data_dir).to_pylist(), key=lambda row: row["traj_id"])


def pointnav_config() -> Any:
    from groundplan.pipelines.train.pointnav_config import PointNavTrainConfig

    return PointNavTrainConfig(kind="pointnav", max_goal_m=4.0, max_episode_steps=60, num_env_workers=2)


def rollout_records() -> dict[str, Any]:
    """Expert rollouts (rows and stats) and A* stats on the same five held-out seeds, over two shards."""
    from groundplan.pipelines.train.pointnav import parallel_rollouts

    cfg = pointnav_config()
    seeds = [100003, 100011, 100017, 100024, 100042]
    rows, expert = parallel_rollouts(cfg, seeds, cfg.eval_seeds, rng_seed=5)
    _, astar = parallel_rollouts(cfg, seeds, cfg.eval_seeds, astar=True)
    return {"rows": rows, "expert": expert, "astar": astar}


def main() -> None:
    import tempfile

    from groundplan.actors.group import RunnerGroup

    logging.basicConfig(level=logging.INFO)
    with tempfile.TemporaryDirectory() as tmp:
        local = collect_records(f"{tmp}/local", "local")
        remote = collect_records(f"{tmp}/ray", "ray")
    if local != remote:
        raise RuntimeError("local and Ray collection differ: not recording")
    COLLECT.write_text(json.dumps(local, indent=1, sort_keys=True))
    with RunnerGroup(cpus_needed=4):
        ROLLOUTS.write_text(json.dumps(rollout_records(), indent=1, sort_keys=True))
    log.info("recorded %s and %s", COLLECT.name, ROLLOUTS.name)


if __name__ == "__main__":
    main()
