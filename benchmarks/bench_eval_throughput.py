"""Evaluation throughput: the SayCan kitchen sweep sequentially in one process vs through the Ray
pipeline (sim workers + one dynamically batched LLM scorer actor).

Both runs use the same config (default: configs/saycan_kitchen.yaml restricted to the SayCan and
No-VF planners, 3 tasks x 7 families x 2 planners = 42 episodes) and the real embedded model; each
writes into its own fresh output folder, so neither resumes. The two sides run in alternating rounds
(the order flips each round, so a drift in the machine's load falls on both alike); each round prints
episodes/min for both, their ratio, the scorer's mean batch size and options/s, and the end the ratio's
geometric mean with its 95% interval over the rounds. The last line is machine-readable:

    result: ratio=<x> ratio_lo=<x> ratio_hi=<x> seq_epm=<n> pipe_epm=<n> mean_batch=<n> rounds=<n>

    python benchmarks/bench_eval_throughput.py [--rounds 3] [--workers 4] [--envs-per-worker 1]
        [--planners SayCan,No-VF] [--per-family 3] [--max-steps N]
"""
from __future__ import annotations

import argparse
import itertools
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # benchmarks.harness, when run as `python benchmarks/<name>.py`
from benchmarks.harness import alternating, log_interval, report  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default=str(ROOT / "configs" / "saycan_kitchen.yaml"))
    ap.add_argument("--planners", default="SayCan,No-VF", help="planner labels to keep ('all' keeps every one)")
    ap.add_argument("--per-family", type=int, default=3)
    ap.add_argument("--max-steps", type=int, default=None, help="override the config's step cap (quick runs)")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--envs-per-worker", type=int, default=1,
                    help="envs each episode-runner actor plays at once, one thread each (runtime.envs_per_worker)")
    ap.add_argument("--in-flight", type=int, default=None, help="episodes in flight (default: --workers x --envs-per-worker)")
    ap.add_argument("--batch-window-ms", type=float, default=5.0)
    ap.add_argument("--max-batch", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=1,
                    help="alternating rounds (the order flips each round); the ratio's interval needs 2 or more")
    ap.add_argument("--scorer-cpus", type=float, default=float(os.cpu_count() or 2),
                    help="CPUs reserved for the scorer (Ray sets its torch threads to this)")
    args = ap.parse_args()

    logging.basicConfig(level=logging.WARNING)
    from groundplan.cli import keep_planners
    from groundplan.config import load_config
    from groundplan.pipelines.evaluate.sweep import run_sweep

    runtime = [f"runtime.workers={args.workers}", f"runtime.envs_per_worker={args.envs_per_worker}",
               f"runtime.scorer_cpus={args.scorer_cpus}",
               f"runtime.batch_window_ms={args.batch_window_ms}", f"runtime.max_batch={args.max_batch}",
               "runtime.mlflow=false"] + ([f"runtime.in_flight={args.in_flight}"] if args.in_flight else [])
    cfg = load_config(args.config, runtime)
    if args.planners != "all":
        cfg = keep_planners(cfg, args.planners)
    cfg = cfg.model_copy(update={"tasks": cfg.tasks.model_copy(update={"per_family": args.per_family})})
    if args.max_steps is not None:
        cfg = cfg.model_copy(update={"max_steps": args.max_steps})
    out = Path(tempfile.mkdtemp(prefix="bench_eval_"))
    from groundplan.actors.group import RunnerGroup

    ncpu = os.cpu_count() or 2
    runs = itertools.count()  # each side's run gets a fresh output folder

    def sequential() -> dict:
        folder = out / f"seq{next(runs)}"
        seq_cfg = cfg.model_copy(update={"output_dir": str(folder),
                                         "runtime": cfg.runtime.model_copy(update={"executor": "local"})})
        t0 = time.perf_counter()
        res = run_sweep(seq_cfg, progress=False, resume=False)  # includes the model load, like a CLI run
        return {"wall": time.perf_counter() - t0, "traces": res.traces, "stats": res.stats}

    def pipeline() -> dict:
        pipe_cfg = cfg.model_copy(update={"output_dir": str(out / f"pipe{next(runs)}")})
        with RunnerGroup(cpus_needed=max(4, args.scorer_cpus + args.workers * 0.5)):  # started before the clock
            t0 = time.perf_counter()
            res = run_sweep(pipe_cfg, progress=False, resume=False)
            return {"wall": time.perf_counter() - t0, "traces": res.traces, "stats": res.stats}

    def log_round(r: int, order: tuple[str, ...], got: dict[str, dict]) -> None:
        seq, pipe = got["sequential"], got["pipeline"]
        n = len(seq["traces"])
        assert len(pipe["traces"]) == n, (len(pipe["traces"]), n)
        sc = pipe["stats"]["scorer"]
        same = sum(a.execution_success for a in seq["traces"]) == sum(b.execution_success for b in pipe["traces"])
        print(f"round {r + 1} ({' then '.join(order)}): sequential {n} episodes in {seq['wall']:.1f} s "
              f"(incl. model load) = {60 * n / seq['wall']:.1f} episodes/min; pipeline {pipe['wall']:.1f} s "
              f"(incl. actor start + model load) = {60 * n / pipe['wall']:.1f} episodes/min ({args.workers} episode "
              f"runners x {args.envs_per_worker} envs, 1 scorer, {ncpu} CPUs); ratio {seq['wall'] / pipe['wall']:.2f}x "
              f"(episode loops only: {pipe['stats']['episodes_per_min'] / seq['stats']['episodes_per_min']:.2f}x)")
        print(f"  scorer: {sc['requests']} score requests in {sc['batches']} batches, mean batch "
              f"{sc['mean_batch_size']:.2f} (max {sc['max_batch_size']}), {sc['options_per_s']:.0f} options/s of scorer "
              f"time, generate calls {sc['generate_calls']}, forward tokens {sc.get('forward_tokens')}, padded "
              f"batches {sc.get('padded_batches')}; same execution successes in both: {same}", flush=True)

    got = alternating({"sequential": sequential, "pipeline": pipeline}, args.rounds, on_round=log_round)
    n = len(got["sequential"][0]["traces"])
    ratio, lo, hi = log_interval([s["wall"] / p["wall"] for s, p in zip(got["sequential"], got["pipeline"])])
    seq_epm = statistics.median(60 * n / s["wall"] for s in got["sequential"])
    pipe_epm = statistics.median(60 * n / p["wall"] for p in got["pipeline"])
    mean_batch = statistics.fmean(p["stats"]["scorer"]["mean_batch_size"] for p in got["pipeline"])
    print(f"pipeline over sequential (wall, incl. startup): {ratio:.2f}x [{lo:.2f}, {hi:.2f}] over {args.rounds} "
          f"alternating round(s) (geometric mean, 95% t-interval on the log scale)")
    report({"ratio": f"{ratio:.2f}", "ratio_lo": f"{lo:.3f}", "ratio_hi": f"{hi:.3f}", "seq_epm": f"{seq_epm:.1f}",
            "pipe_epm": f"{pipe_epm:.1f}", "mean_batch": f"{mean_batch:.2f}", "rounds": args.rounds})

if __name__ == "__main__":
    main()
