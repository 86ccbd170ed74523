"""The Ray runtime at scale with a simulated GPU scorer: how throughput grows with workers and scorer replicas.

Real kitchen episode runners and the real coordinator (``run_sweep`` on Ray with ``lm_factory``) drive SayCan
(kitchen value-function affordances, full scoring: one score request per decision) at 1, 8, 32 and 64
workers with 1 and 2 scorer replicas. The scorer's model is ``benchmarks/latency_model.py``: a forward
of b requests sleeps ``fixed + per_request * b`` (b <= max batch), so the simulated GPU uses no CPU here.

Where the default profile comes from (an estimate from datasheets, not a measurement; no GPU was
available to this task): a Llama-3.1-8B scorer (8.03e9 parameters, bf16 = 16.1 GB) on one H100 SXM
(3.35 TB/s HBM3, 989 TFLOP/s dense bf16). A forward streams the weights once: 16.1 GB / 3.35 TB/s =
4.8 ms, plus ~2 ms of launch and framework overhead: **fixed = 7 ms**. A SayCan kitchen request adds
~273 tokens (51 options = 261 option tokens, measured by bench_scoring.py, plus the step's new prompt
tokens; the few-shot prefix is cached), i.e. 2 x 8.03e9 x 273 = 4.4 TFLOP, at 50% MFU (typical
prefill): **9 ms per request**; **max batch 32** (the scorer's default). Override with ``--fixed-ms``,
``--per-request-ms``, ``--max-model-batch``.

Ideal bound: with n = W / R episodes per replica, each waiting for its answer before its next step, a
replica serves n / cost(n) steps/s when n <= max batch (every step in one forward) and
max_batch / cost(max_batch) when saturated; ideal = R x that (sim, planner and Ray cost nothing).
Measured: steady-state steps/s from the model's own forward log (requests served between 10% and 60%
of the sweep's requests, so start-up and the tail where fewer episodes remain are left out).
efficiency = measured / ideal; overhead per step = W / measured - W / ideal (what a step pays beyond
the model: RPCs, sim, planner, queueing on this CPU); mean batch from the scorer's stats.

A sim worker is one kitchen env playing one episode at a time. ``--envs-per-worker K`` (default 8) hosts
K of them in one runner process (``runtime.envs_per_worker``, RLlib's ``num_envs_per_env_runner``), so
64 workers are 8 processes. ``--compare-processes`` also runs the largest point with one process per
worker, in the same run: on this 2-core machine 64 processes and their Ray core workers compete for the
CPU that the sims and RPCs need, which is what kept efficiency at 64 workers low before.

``--compare-window`` also runs 1 and 64 workers with the batcher's fixed window (before this issue:
a batch waits ``batch_window_ms`` for more requests unless full) in the same run.

    python benchmarks/bench_runtime_scale.py [--workers 1 8 32 64] [--replicas 1 2] [--envs-per-worker 8]
                                             [--compare-processes] [--compare-window]

Last line: ``result: efficiency=<x at 64 workers, 1 replica> overhead_ms=<same point> mean_batch=<same point>``
(plus ``efficiency_1env_per_process=<x>`` with ``--compare-processes``)
"""
from __future__ import annotations

import argparse
import functools
import logging
import math
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the benchmarks.* helpers, when run as `python benchmarks/<name>.py`
from benchmarks.harness import report, setup_logging  # noqa: E402

log = logging.getLogger("bench_runtime_scale")


def ideal_steps_per_s(workers: int, replicas: int, fixed_s: float, per_s: float, max_batch: int) -> float:
    busy = min(replicas, workers)  # replicas that have an episode at all
    n = workers / busy
    if n <= max_batch:
        return busy * n / (fixed_s + per_s * n)
    return busy * max_batch / (fixed_s + per_s * max_batch)


def steady_rate(log_path: Path, lo: float = 0.1, hi: float = 0.6) -> float:
    rows = sorted((float(t), int(n)) for t, n, _ in (line.split() for line in log_path.read_text().splitlines()))
    total = sum(n for _, n in rows)
    cum, t_lo, n_lo, t_hi, n_hi = 0, None, 0, None, 0
    for t, n in rows:
        cum += n
        if t_lo is None and cum >= lo * total:
            t_lo, n_lo = t, cum
        if t_hi is None and cum >= hi * total:
            t_hi, n_hi = t, cum
    if t_lo is None or t_hi is None or t_hi <= t_lo:
        return float("nan")
    return (n_hi - n_lo) / (t_hi - t_lo)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 8, 32, 64])
    ap.add_argument("--replicas", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--fixed-ms", type=float, default=7.0)
    ap.add_argument("--per-request-ms", type=float, default=9.0)
    ap.add_argument("--max-model-batch", type=int, default=32)
    ap.add_argument("--episodes-per-worker", type=int, default=4)
    ap.add_argument("--max-steps", type=int, default=6)
    ap.add_argument("--envs-per-worker", type=int, default=8)
    ap.add_argument("--compare-processes", action="store_true")
    ap.add_argument("--compare-window", action="store_true")
    args = ap.parse_args()
    setup_logging(quiet=("groundplan", "ray"), quiet_level=logging.ERROR)

    from benchmarks.latency_model import LatencyLM
    from groundplan.config import EvalConfig
    from groundplan.pipelines.evaluate.sweep import run_sweep

    out = Path(tempfile.mkdtemp(prefix="bench_scale_"))
    need = max(args.workers) * 0.5 + max(args.replicas) + 2  # room for the one-process-per-worker layout
    from groundplan.actors.group import RunnerGroup

    group = RunnerGroup(cpus_needed=need)  # the one owner of a local Ray; each sweep below joins it
    group.connect()
    log.info("latency model: %.1f ms + %.1f ms/request per forward, max batch %d; %d CPUs on this machine (shared)",
             args.fixed_ms, args.per_request_ms, args.max_model_batch, os.cpu_count())

    def point(workers: int, replicas: int, adaptive: bool = True, envs: int | None = None) -> dict:
        envs = min(workers, args.envs_per_worker if envs is None else envs)
        processes = math.ceil(workers / envs)
        target = max(16, args.episodes_per_worker * workers)
        seeds = math.ceil(target / 84)
        per_family = min(12, math.ceil(target / seeds / 7))
        tag = f"w{workers}r{replicas}e{envs}{'' if adaptive else 'fixed'}"
        cfg = EvalConfig.model_validate({
            "name": tag, "output_dir": str(out),
            "planners": [{"name": "saycan", "label": "SayCan", "affordance": "kitchen_value", "options": {"prune": False}}],
            "tasks": {"per_family": per_family}, "seeds": list(range(seeds)), "max_steps": args.max_steps,
            "runtime": {"workers": processes, "envs_per_worker": envs, "in_flight": workers, "scorers": replicas,
                        "worker_cpus": 0.5, "max_batch": args.max_model_batch, "adaptive_batching": adaptive,
                        "mlflow": False},
        })
        log_path = out / f"{tag}.log"
        factory = functools.partial(LatencyLM, args.fixed_ms, args.per_request_ms, args.max_model_batch, str(log_path))
        result = run_sweep(cfg, lm_factory=factory, progress=False, resume=False)
        steps = sum(len(t.steps) for t in result.traces)
        errors = [t.error for t in result.traces if t.error]
        rate = steady_rate(log_path)
        ideal = ideal_steps_per_s(workers, replicas, args.fixed_ms / 1e3, args.per_request_ms / 1e3, args.max_model_batch)
        sc = result.stats["scorer"]
        row = {"workers": workers, "processes": processes, "replicas": replicas, "adaptive": adaptive,
               "episodes": len(result.traces),
               "steps": steps, "errors": len(errors), "steps_per_s": rate, "ideal": ideal, "efficiency": rate / ideal,
               "overhead_ms": 1e3 * (workers / rate - workers / ideal), "mean_batch": sc["mean_batch_size"],
               "wall_s": result.stats["wall_s"]}
        log.info("%3d workers in %2d processes, %d replica(s) %-8s %4d episodes %5d steps: %7.1f steps/s (ideal %7.1f) "
                 "efficiency %.2f, overhead %6.1f ms/step, mean batch %5.2f, loop wall %.1f s%s", workers, processes, replicas,
                 "adaptive" if adaptive else "window", len(result.traces), steps, rate, ideal, row["efficiency"],
                 row["overhead_ms"], row["mean_batch"], row["wall_s"], f", {len(errors)} errors" if errors else "")
        return row

    rows = [point(w, r) for r in args.replicas for w in args.workers]
    top, one = max(args.workers), min(args.replicas)
    head = next(r for r in rows if r["workers"] == top and r["replicas"] == one)
    extra: dict[str, str] = {}
    if args.compare_processes and args.envs_per_worker > 1:
        flat = point(top, one, envs=1)
        extra = {"efficiency_1env_per_process": f"{flat['efficiency']:.2f}"}
    if args.compare_window:
        rows += [point(w, 1, adaptive=False) for w in (1, top)]
    group.close()
    log.info("(timings on a 2-core machine: noisy)")
    report({"efficiency": f"{head['efficiency']:.2f}", "overhead_ms": f"{head['overhead_ms']:.1f}",
            "mean_batch": f"{head['mean_batch']:.2f}", **extra})


if __name__ == "__main__":
    main()
