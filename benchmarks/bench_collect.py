"""Data-collection throughput: expert trajectories per second with 1 and with 2 Ray worker actors
(one env each), each count timed over one shared wall-clock window.

For each worker count the actors are created and their envs built (``ready()``), then every actor is
given the same start time a little in the future (the barrier) and the same end time; an actor runs
trajectories of its own task list round-robin and counts those that finish inside the window. The
1-worker run is the baseline; ``scaling_2w`` is the 2-worker rate over it (2.0 is linear; on a 2-core
machine shared with other jobs expect less). The last line is machine-readable:

    result: traj_per_s=<2-worker rate> scaling_2w=<x>

    python benchmarks/bench_collect.py [--env babyai] [--window 10] [--split train]
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # benchmarks.harness, when run as `python benchmarks/<name>.py`
from benchmarks.harness import report  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--env", default="babyai", help="registered env with an expert (babyai, hanoi, blocks_bowls, ...)")
    ap.add_argument("--options", default="{}", help="env options as YAML, e.g. '{train_size: 50}'")
    ap.add_argument("--split", default="train")
    ap.add_argument("--window", type=float, default=10.0, help="seconds in the timed window")
    ap.add_argument("--lead", type=float, default=1.0, help="seconds between the barrier time and now")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)

    import ray
    import yaml

    from groundplan.actors.group import RunnerGroup
    from groundplan.actors.worker import CollectItem, EpisodeWorker, WorkerSpec
    from groundplan.config import EnvSpec
    from groundplan.envs import ENVS

    options = yaml.safe_load(args.options) or {}
    tasks = ENVS.get(args.env)(**{**options, "split": args.split}).tasks()
    items = [CollectItem(f"{t.task_id}|0", args.split, t, 0) for t in tasks]

    class TimedWorker(EpisodeWorker):
        def window(self, mine: list, start_at: float, stop_at: float) -> int:
            while time.time() < start_at:
                time.sleep(0.001)
            done, i = 0, 0
            while True:
                self.run(mine[i % len(mine)])
                i += 1
                if time.time() > stop_at:
                    return done
                done += 1

    group = RunnerGroup(cpus_needed=2)  # the one owner of a local Ray, as collect's own
    group.connect()
    remote = ray.remote(num_cpus=1)(TimedWorker)
    rates: dict[int, float] = {}
    for n in (1, 2):
        actors = [remote.remote(WorkerSpec(EnvSpec(name=args.env, options=options), 30)) for _ in range(n)]
        ray.get([a.info.remote() for a in actors])  # envs built before the clock starts
        start = time.time() + args.lead
        stop = start + args.window
        counts = ray.get([a.window.remote(items[k::n], start, stop) for k, a in enumerate(actors)])
        rates[n] = sum(counts) / args.window
        print(f"{n} worker(s): {sum(counts)} trajectories in {args.window:.1f} s = {rates[n]:.2f} traj/s "
              f"(per worker {counts})")
        for a in actors:
            ray.kill(a)
    group.close()
    print(f"env={args.env} split={args.split} tasks={len(items)} cpus={os.cpu_count()} "
          "(shared machine: other sessions' jobs make these figures noisy)")
    report({"traj_per_s": f"{rates[2]:.2f}", "scaling_2w": f"{rates[2] / max(rates[1], 1e-9):.2f}"})


if __name__ == "__main__":
    main()
