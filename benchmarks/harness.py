"""What every benchmark here shares: its logging set-up, the median of repeated timed calls, parallel
work timed over one shared wall-clock window, alternating rounds and the interval of a ratio measured
over them, the load average, and its last line.

Parallel throughput is never a sum of per-worker rates: :func:`run_in_window` starts every worker
behind one barrier, each sets up outside the clock, and the rate is the total work over one window
from the first worker's start to the last one's end. A comparison of two setups (serial vs
concurrent, peer vs groundplan, 1 vs W workers) runs them in :func:`alternating` rounds, so that
load which comes and goes falls on both sides.

The last line is ``result: key=value ...`` (the keys each script's docstring names), the one line
that tools and the docs read; :func:`report` prints it and, when ``GROUNDPLAN_BENCH_JSON`` names a
file, also appends the same fields to it as one JSON line (with the script's name and the time), so
that a series of runs can be collected without parsing text.

Import it as ``from benchmarks.harness import ...`` (the scripts put the repository root on
``sys.path`` when run as ``python benchmarks/<name>.py``).
"""
from __future__ import annotations

import json
import logging
import math
import multiprocessing as mp
import os
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field
from queue import Empty
from typing import Any, Callable, Literal, Mapping, Sequence, TypeVar

T = TypeVar("T")

#: two-sided 95% Student t quantiles by degrees of freedom; between two entries the smaller df's
#: (larger) quantile is used, so the interval errs wide
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
       12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042, 60: 2.000, 120: 1.980}

#: where :func:`report` also writes its fields as a JSON line, when set
JSON_ENV = "GROUNDPLAN_BENCH_JSON"


def setup_logging(level: int = logging.INFO, quiet: Sequence[str] = (), quiet_level: int = logging.WARNING,
                  fmt: str = "%(message)s") -> None:
    """Plain messages on stderr; the loggers in ``quiet`` only from ``quiet_level`` up (groundplan's
    per-episode lines and Ray's start-up chatter would bury the benchmark's own)."""
    logging.basicConfig(level=level, format=fmt)
    for name in quiet:
        logging.getLogger(name).setLevel(quiet_level)


def t95(df: int) -> float:
    """The two-sided 95% Student t quantile for ``df`` degrees of freedom (nan below 1)."""
    if df < 1:
        return float("nan")
    return T95[max(k for k in T95 if k <= df)]


def log_interval(ratios: Sequence[float]) -> tuple[float, float, float]:
    """Geometric mean of per-round ratios and its 95% t-interval on the log scale (a ratio's noise is
    multiplicative: load slows a round by a factor); the bounds are nan with fewer than two rounds."""
    logs = [math.log(r) for r in ratios]
    mean = statistics.fmean(logs)
    if len(logs) < 2:
        return math.exp(mean), float("nan"), float("nan")
    half = t95(len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def percentile(xs: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0-1) of ``xs`` by the nearest rank."""
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def load_average() -> tuple[float, float, float]:
    """The machine's 1, 5 and 15 minute load averages (nan where the platform has none)."""
    try:
        return os.getloadavg()
    except (AttributeError, OSError):
        return (float("nan"),) * 3


@dataclass
class Window:
    """Work done by parallel workers over one shared window: ``totals`` sums each worker's counts
    (lists are joined), ``window_s`` runs from the first worker's start to the last one's end on one
    clock, and ``start_skew_s`` is how far apart the workers started after the barrier."""

    totals: dict[str, Any]
    window_s: float
    start_skew_s: float
    per_worker: list[dict[str, Any]] = field(default_factory=list)

    def rate(self, key: str) -> float:
        """``totals[key]`` per second of the shared window (a list counts its items)."""
        v = self.totals[key]
        return (len(v) if isinstance(v, list) else v) / self.window_s


def _timed_worker(rank: int, setup: Callable[..., Callable[[], Mapping[str, Any]]], args: tuple, barrier: Any,
                  queue: Any) -> None:
    """Build the worker's state outside the clock, wait for every peer, then time its work."""
    try:
        work = setup(*args)
        barrier.wait()
        start = time.monotonic()  # CLOCK_MONOTONIC: one clock for every thread and process on a machine
        counts = dict(work())
        queue.put((rank, start, time.monotonic(), counts, None))
    except BaseException as exc:  # noqa: BLE001 - reported to the driver, which raises it with the rank
        barrier.abort()  # peers still waiting at the barrier fail instead of hanging
        queue.put((rank, 0.0, 0.0, {}, f"{type(exc).__name__}: {exc}"))


def run_in_window(setup: Callable[..., Callable[[], Mapping[str, Any]]], worker_args: Sequence[tuple], *,
                  mode: Literal["process", "thread"] = "process", poll_s: float = 1.0) -> Window:
    """Run ``len(worker_args)`` workers at once and time them over one shared window.

    Worker ``k`` calls ``setup(*worker_args[k])`` outside the clock (build an env, warm a model, open a
    session); it returns a no-argument ``work`` callable. Every worker then waits at one barrier, runs
    ``work()`` and reports the counts it returns (numbers are summed over workers, lists joined). With
    ``mode="process"`` each worker is a fresh spawned process (``setup`` must be a module-level
    function); with ``"thread"`` a thread of this process. A worker that fails or dies raises here
    instead of leaving the others waiting."""
    n = len(worker_args)
    if n < 1:
        raise ValueError("run_in_window needs at least one worker")
    if mode == "process":
        ctx = mp.get_context("spawn")
        barrier, queue = ctx.Barrier(n), ctx.Queue()
        workers: list[Any] = [ctx.Process(target=_timed_worker, args=(k, setup, a, barrier, queue))
                              for k, a in enumerate(worker_args)]
    elif mode == "thread":
        import queue as queue_mod

        barrier, queue = threading.Barrier(n), queue_mod.Queue()
        workers = [threading.Thread(target=_timed_worker, args=(k, setup, a, barrier, queue), daemon=True)
                   for k, a in enumerate(worker_args)]
    else:
        raise ValueError(f"unknown mode {mode!r}; valid: process, thread")
    for w in workers:
        w.start()
    results: list[tuple] = []
    try:
        while len(results) < n:
            try:
                results.append(queue.get(timeout=poll_s))
            except Empty:  # a process killed outright never reports
                dead = [w.exitcode for w in workers if getattr(w, "exitcode", None) not in (None, 0)]
                if dead:
                    raise RuntimeError(f"a benchmark worker exited with code {dead[0]}") from None
    finally:
        for w in workers:
            if mode == "process" and w.is_alive() and len(results) < n:
                w.terminate()
            w.join()
    # the cause, not its echo: peers released by the broken barrier fail with BrokenBarrierError
    failed = sorted((r[4].startswith("BrokenBarrierError"), r[0], r[4]) for r in results if r[4] is not None)
    if failed:
        raise RuntimeError(f"benchmark worker {failed[0][1]} failed: {failed[0][2]}")
    results.sort(key=lambda r: r[0])
    totals: dict[str, Any] = {}
    for *_, counts, _err in results:
        for k, v in counts.items():
            totals[k] = totals.get(k, [] if isinstance(v, list) else 0) + v
    starts = [r[1] for r in results]
    return Window(totals=totals, window_s=max(r[2] for r in results) - min(starts),
                  start_skew_s=max(starts) - min(starts), per_worker=[r[3] for r in results])


def alternating(sides: Mapping[str, Callable[[], T]], rounds: int,
                on_round: Callable[[int, tuple[str, ...], dict[str, T]], None] | None = None) -> dict[str, list[T]]:
    """Measure every side once per round, in the given order on even rounds and reversed on odd ones,
    so that slow drift in the machine's load falls on each side alike; ``on_round(r, order, got)`` is
    called after each round (to log it). Returns each side's measurements in round order."""
    if rounds < 1:
        raise ValueError("rounds must be at least 1")
    names = tuple(sides)
    out: dict[str, list[T]] = {name: [] for name in names}
    for r in range(rounds):
        order = names if r % 2 == 0 else names[::-1]
        got = {name: sides[name]() for name in order}
        for name in names:
            out[name].append(got[name])
        if on_round is not None:
            on_round(r, order, got)
    return out


def timed(fn: Callable[[], Any], repeats: int, *, warmup: int = 0,
          sync: Callable[[], None] | None = None) -> float:
    """Median wall seconds of ``repeats`` calls of ``fn`` after ``warmup`` untimed ones. ``sync`` (e.g.
    ``torch.cuda.synchronize``) runs before each timed call and after it, so that work a device still
    has queued is inside the time it belongs to, not the next call's."""
    if repeats < 1:
        raise ValueError("repeats must be at least 1")
    sync = sync or (lambda: None)
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def data_file_args(ap: Any, data: Any, plot: Any) -> None:
    """The options of a benchmark whose figures are rendered from a committed data file: ``--out`` (the data
    file it writes), ``--plot`` (the picture drawn from it) and ``--render-only`` (draw and report from the
    file without measuring again)."""
    ap.add_argument("--out", default=str(data), help="the data file the figures are rendered from")
    ap.add_argument("--plot", default=str(plot), help="the plot drawn from the data file")
    ap.add_argument("--render-only", action="store_true", help="draw the plot (and its page) from --out, measuring nothing")


def result_line(fields: dict[str, Any]) -> str:
    """``result: k=v ...`` in the given order; values are written as given (format them first)."""
    bad = [k for k in fields if not k or any(c.isspace() or c == "=" for c in k)]
    if bad:
        raise ValueError(f"result keys must be single words without '=': {bad}")
    return "result: " + " ".join(f"{k}={v}" for k, v in fields.items())


def report(fields: dict[str, Any]) -> str:
    """Print the result line on stdout (the benchmark's last line) and append the fields to
    ``$GROUNDPLAN_BENCH_JSON`` if it is set; returns the line."""
    line = result_line(fields)
    load = load_average()
    logging.getLogger("benchmarks").info("load average at the end (1, 5, 15 min): %s on %s CPUs",
                                         " ".join(f"{x:.2f}" for x in load), os.cpu_count())
    path = os.environ.get(JSON_ENV)
    if path:
        record = {"benchmark": os.path.basename(sys.argv[0]).removesuffix(".py"), "time": time.time(),
                  "load_average": list(load), "cpus": os.cpu_count(), **fields}
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record, default=str) + "\n")
    print(line, flush=True)
    return line
