"""Tabletop simulator throughput: pick-and-place primitives per second for one worker, scaling to 2
workers (two processes, each with its own env / PyBullet client), and render time per frame.

    python benchmarks/bench_tabletop.py [--n 8] [--width 160 --height 120]

Last line: ``result: pickplace_per_s=<x> scaling_2w=<x> render_ms=<x>`` (scaling = 2-worker total
throughput / 1-worker throughput; 2.0 is perfect).
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import time


def _worker(n: int, task_index: int, queue=None) -> float:
    from groundplan.envs.tabletop.env import TabletopEnv
    from groundplan.envs.tabletop.tasks import make_task

    env = TabletopEnv(cameras=["top"], disturbance_prob=0.0)
    task = make_task("stack_all_blocks", task_index)
    env.reset(task, 0)
    blocks = task.goal["blocks"]
    done = 0
    t0 = time.perf_counter()
    while done < n:
        for target in ["top left corner", "bottom right corner", "middle"]:
            env.execute(f"pick the {blocks[done % len(blocks)]} and place it on the {target}")
            done += 1
            if done >= n:
                break
    rate = n / (time.perf_counter() - t0)
    env.close()
    if queue is not None:
        queue.put(rate)
    return rate


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=8, help="pick-and-places per worker")
    ap.add_argument("--width", type=int, default=160)
    ap.add_argument("--height", type=int, default=120)
    args = ap.parse_args()

    one = _worker(args.n, 0)
    print(f"1 worker: {one:.2f} pick-and-place/s (each includes 1 top-down render for the observation)")
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(args.n, i, q)) for i in range(2)]
    t0 = time.perf_counter()
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    rates = [q.get() for _ in procs]
    wall = time.perf_counter() - t0
    total = sum(rates)
    print(f"2 workers: {rates[0]:.2f} + {rates[1]:.2f} = {total:.2f} pick-and-place/s (wall incl. startup {wall:.1f} s)")

    from groundplan.envs.tabletop.env import TabletopEnv
    from groundplan.envs.tabletop.tasks import make_task

    env = TabletopEnv()
    env.reset(make_task("put_blocks_in_bowl", 0), 0)
    for _ in range(3):
        env.world.render("top", args.width, args.height)
    reps = 30
    t0 = time.perf_counter()
    for _ in range(reps):
        env.world.render("top", args.width, args.height)
    render_ms = 1000 * (time.perf_counter() - t0) / reps
    print(f"render: {render_ms:.1f} ms per {args.width}x{args.height} RGB-D+segmentation frame (TinyRenderer)")
    print(f"result: pickplace_per_s={one:.2f} scaling_2w={total / one:.2f} render_ms={render_ms:.1f}")


if __name__ == "__main__":
    main()
