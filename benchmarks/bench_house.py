"""House simulator throughput: houses generated per second, simulator steps per second in one
worker, and MultiON episode throughput (oracle planner, no LLM) over 1 and 2 worker processes.

Parallel throughput is timed over one shared wall-clock window: the workers start behind a
barrier (:func:`benchmarks.harness.run_in_window`), each starts episodes for ``--window`` seconds, and
the episodes are counted over the window from the first start to the last end. The 1-worker run in the
same script is the baseline of ``scaling_2w``.

    flock /tmp/gp-heavy.lock python benchmarks/bench_house.py --window 10
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks.harness, when run as a script
from benchmarks.harness import report, run_in_window  # noqa: E402


def houses_per_s(n: int) -> float:
    from groundplan.envs.house.layout import generate_house

    t = time.perf_counter()
    for s in range(n):
        generate_house(10_000 + s)
    return n / (time.perf_counter() - t)


def steps_per_s(n: int) -> float:
    """Random forward/turn actions with an observation after each (the sim's inner loop)."""
    from groundplan.envs.house.env import HouseEnv

    env = HouseEnv(houses_per_split=1, splits=("val",))
    env.reset(env.tasks()[0], 0)
    rng = np.random.default_rng(0)
    sim = env.sim
    t = time.perf_counter()
    for _ in range(n):
        if rng.random() < 0.6:
            sim.forward()
        else:
            sim.turn(30.0 if rng.random() < 0.5 else -30.0)
        sim.agent.steps = 0  # no step limit in the benchmark
    return n / (time.perf_counter() - t)


def _setup(rank: int, window: float) -> Callable[[], dict[str, int]]:
    """Build the env and warm the planner outside the window; the work runs episodes for ``window`` s."""
    from groundplan.envs.house.env import HouseEnv
    from groundplan.planners import PLANNERS
    from groundplan.rollout.episode import run_episode

    env = HouseEnv(houses_per_split=40, splits=("val",))
    tasks = env.tasks()
    planner = PLANNERS.get("house_oracle")()
    run_episode(planner, env, tasks[0], 0)  # warm-up outside the window

    def work() -> dict[str, int]:
        end = time.perf_counter() + window
        done, steps, k = 0, 0, rank
        while time.perf_counter() < end:
            trace = run_episode(planner, env, tasks[k % len(tasks)], k)
            done += 1
            steps += int(trace.metrics.get("sim_steps", 0))
            k += 2
        return {"episodes": done, "sim_steps": steps}

    return work


def episodes_per_s(workers: int, window: float) -> tuple[float, float]:
    """Episodes and simulator steps per second of ``workers`` processes over one shared window (from
    the first start to the last end, so an episode that runs past ``window`` is counted with its time)."""
    w = run_in_window(_setup, [(r, window) for r in range(workers)])
    return w.rate("episodes"), w.rate("sim_steps")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--houses", type=int, default=200)
    ap.add_argument("--steps", type=int, default=5000)
    ap.add_argument("--window", type=float, default=10.0)
    args = ap.parse_args()
    hps = houses_per_s(args.houses)
    sps = steps_per_s(args.steps)
    print(f"houses generated/s: {hps:.1f} (n={args.houses})")
    print(f"sim steps/s, one worker: {sps:.0f} (n={args.steps})")
    e1, s1 = episodes_per_s(1, args.window)
    e2, s2 = episodes_per_s(2, args.window)
    print(f"oracle episodes/s: 1 worker {e1:.2f} ({s1:.0f} sim steps/s), 2 workers {e2:.2f} ({s2:.0f} sim steps/s), "
          f"window {args.window:.0f} s")
    report({"steps_per_s": f"{sps:.0f}", "houses_per_s": f"{hps:.1f}", "scaling_2w": f"{e2 / e1 if e1 else float('nan'):.2f}"})


if __name__ == "__main__":
    main()
