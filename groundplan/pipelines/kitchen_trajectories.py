"""Expert trajectories of the mock kitchen in the collect schema, from the tasks' reference plans.

A stand-in for ``groundplan collect`` on the kitchen (the kitchen has no collect oracle of its own):
each (task, seed) of a split replays the task's ``reference_plan`` in the noise-free language mode
and records what the Can/Pay trainers need (SayCanPay Sec. 6: τ = (o0, g, a1..aT, r), r = 1 at the
end). Deterministic splits: in each of the 7 families, tasks 00–07 are ``train`` (Can/Pay training
and prompt examples) and 08–11 are ``test``; the seeds vary the start state (object placements).
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Sequence

log = logging.getLogger(__name__)

#: the collect schema (shared with scp-envs' collector)
SCHEMA_FIELDS = ("traj_id", "env", "split", "task_id", "goal", "init_obs", "actions", "observations", "feasible",
                 "rewards", "success", "source", "admissible")
#: tasks with an index below this in their family are train, the rest test
TRAIN_PER_FAMILY = 8


def kitchen_split(task_id: str) -> str:
    """``train`` or ``test`` for a kitchen task id such as ``kitchen/nl_nouns/09``."""
    return "train" if int(task_id.rsplit("/", 1)[-1]) < TRAIN_PER_FAMILY else "test"


def kitchen_task_ids(split: str) -> list[str]:
    from groundplan.envs.kitchen import TASKS

    return [t.task_id for t in TASKS if kitchen_split(t.task_id) == split]


def schema():
    import pyarrow as pa

    return pa.schema([
        ("traj_id", pa.string()), ("env", pa.string()), ("split", pa.string()), ("task_id", pa.string()),
        ("goal", pa.string()), ("init_obs", pa.string()), ("actions", pa.list_(pa.string())),
        ("observations", pa.list_(pa.string())), ("feasible", pa.list_(pa.bool_())),
        ("rewards", pa.list_(pa.float32())), ("success", pa.bool_()), ("source", pa.string()),
        ("admissible", pa.list_(pa.list_(pa.string()))),
    ])


def kitchen_rows(split: str, seeds: Sequence[int]) -> list[dict]:
    """One row per (task of ``split``, seed): the reference plan replayed in language mode."""
    from groundplan.envs.kitchen import KitchenEnv

    env = KitchenEnv(mode="language")
    rows = []
    for task in env.tasks():
        if kitchen_split(task.task_id) != split or not task.reference_plan:
            continue
        for seed in seeds:
            obs = env.reset(task, seed)
            actions, observations, feasible, admissible = [], [], [], []
            for action in task.reference_plan:
                admissible.append(list(obs.skills))
                result = env.execute(action)
                actions.append(action)
                feasible.append(bool(result.success))
                observations.append(result.observation.text)
                obs = result.observation
            success = bool(env.check_goal().success) and all(feasible)
            rows.append({
                "traj_id": f"kitchen|{task.task_id}|{seed}", "env": "kitchen", "split": split, "task_id": task.task_id,
                "goal": task.instruction, "init_obs": env.reset(task, seed).text, "actions": actions,
                "observations": observations, "feasible": feasible,
                "rewards": [0.0] * (len(actions) - 1) + [1.0 if success else 0.0], "success": success,
                "source": "reference_plan", "admissible": admissible,
            })
    return rows


def write_kitchen_trajectories(out_dir: str | Path, seeds: Sequence[int] = range(5),
                               splits: Sequence[str] = ("train", "test")) -> list[Path]:
    """Write ``<out_dir>/kitchen-<split>.parquet`` per split; returns the files."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    files = []
    for split in splits:
        rows = kitchen_rows(split, list(seeds))
        path = out_dir / f"kitchen-{split}.parquet"
        pq.write_table(pa.Table.from_pylist(rows, schema=schema()), path)
        log.info("wrote %d %s trajectories to %s", len(rows), split, path)
        files.append(path)
    return files


if __name__ == "__main__":  # python -m groundplan.pipelines.kitchen_trajectories <out_dir> [num_seeds]
    import sys

    logging.basicConfig(level=logging.INFO)
    write_kitchen_trajectories(sys.argv[1] if len(sys.argv) > 1 else "outputs/saycanpay_data",
                               seeds=range(int(sys.argv[2]) if len(sys.argv) > 2 else 5))
