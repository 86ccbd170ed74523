"""Tabletop simulator throughput: pick-and-place primitives per second for 1 and for W workers, and
render time per frame.

    python benchmarks/bench_tabletop.py [--n 12] [--workers 2] [--repeats 1] [--width 160 --height 120]

Each measurement starts ``workers`` fresh processes (spawn), each with its own env / PyBullet client.
A worker builds and resets its env, then waits at a barrier shared with every other worker; after the
barrier each runs ``n`` pick-and-places and reports when it started and finished on the system-wide
monotonic clock. Throughput is the total pick-and-places over one shared wall-clock window, from the
first start to the last finish, so two workers only add up when they really ran at the same time.
The 1-worker baseline is the same code path (a fresh process behind a barrier of one), measured in the
same run. With ``--repeats`` > 1 the 1-worker and W-worker runs alternate (the order flips each round)
and the medians are reported. Barrier, window and rounds are the shared harness's
(:func:`benchmarks.harness.run_in_window`, :func:`benchmarks.harness.alternating`).

Last line: ``result: pickplace_per_s=<1 worker> pickplace_per_s_<W>w=<W workers> scaling_<W>w=<ratio>
render_ms=<x>`` (scaling = W-worker throughput / 1-worker throughput; W is perfect, and it cannot
exceed the number of free cores).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks.harness, when run as a script
from benchmarks.harness import Window, alternating, report, run_in_window  # noqa: E402

TARGETS = ("top left corner", "bottom right corner", "middle")


def _setup(n: int, task_index: int) -> Callable[[], dict[str, int]]:
    """Build and reset the worker's env outside the window; the work is ``n`` pick-and-places."""
    from groundplan.envs.tabletop.env import TabletopEnv
    from groundplan.envs.tabletop.tasks import make_task

    env = TabletopEnv(cameras=["top"], disturbance_prob=0.0)
    task = make_task("stack_all_blocks", task_index)
    env.reset(task, 0)
    blocks = task.goal["blocks"]

    def work() -> dict[str, int]:
        for i in range(n):
            env.execute(f"pick the {blocks[i % len(blocks)]} and place it on the {TARGETS[i % len(TARGETS)]}")
        env.close()
        return {"pickplace": n}

    return work


def measure(workers: int, n: int) -> Window:
    """``workers`` fresh processes behind one barrier; total pick-and-places / shared window."""
    return run_in_window(_setup, [(n, i) for i in range(workers)])


def render_ms(width: int, height: int, reps: int = 30) -> float:
    from groundplan.envs.tabletop.env import TabletopEnv
    from groundplan.envs.tabletop.tasks import make_task

    env = TabletopEnv()
    env.reset(make_task("put_blocks_in_bowl", 0), 0)
    for _ in range(3):
        env.world.render("top", width, height)
    t0 = time.perf_counter()
    for _ in range(reps):
        env.world.render("top", width, height)
    out = 1000 * (time.perf_counter() - t0) / reps
    env.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=12, help="pick-and-places per worker")
    ap.add_argument("--workers", type=int, default=2, help="workers of the parallel measurement")
    ap.add_argument("--repeats", type=int, default=1, help="alternating 1-worker / W-worker measurements")
    ap.add_argument("--width", type=int, default=160)
    ap.add_argument("--height", type=int, default=120)
    args = ap.parse_args()
    if args.n < 1 or args.workers < 2 or args.repeats < 1:
        ap.error("need --n >= 1, --workers >= 2 and --repeats >= 1")

    def show(r: int, order: tuple[str, ...], got: dict[str, Window]) -> None:
        one, par = got["one"], got["many"]
        print(f"[{r}] 1 worker: {one.rate('pickplace'):.2f} pick-and-place/s ({one.totals['pickplace']} in "
              f"{one.window_s:.2f} s; each includes 1 top-down render for the observation)")
        print(f"[{r}] {args.workers} workers: {par.rate('pickplace'):.2f} pick-and-place/s ({par.totals['pickplace']} "
              f"in one {par.window_s:.2f} s window; starts {1000 * par.start_skew_s:.1f} ms apart; {order[0]} first)")

    got = alternating({"one": lambda: measure(1, args.n), "many": lambda: measure(args.workers, args.n)},
                      args.repeats, show)
    one_rate = statistics.median(w.rate("pickplace") for w in got["one"])
    many_rate = statistics.median(w.rate("pickplace") for w in got["many"])
    ms = render_ms(args.width, args.height)
    print(f"render: {ms:.1f} ms per {args.width}x{args.height} RGB-D+segmentation frame (TinyRenderer)")
    w = args.workers
    report({"pickplace_per_s": f"{one_rate:.2f}", f"pickplace_per_s_{w}w": f"{many_rate:.2f}",
            f"scaling_{w}w": f"{many_rate / one_rate:.2f}", "render_ms": f"{ms:.1f}"})


if __name__ == "__main__":
    main()
