"""Serve load benchmark: concurrent POST /v1/score on loopback against the embedded model, against the
same requests sent one at a time, the two timed in alternating windows of one run.

Each request is one SayCan kitchen step as a remote caller would send it: the Appendix C.2 few-shot
prompt with a kitchen task's instruction (``build_prompt``, the prompt the planner scores its first step
on) and the kitchen env's own skill list as the options (all 51 by default; ``--options k`` sends a
rotating window of k of them). The requests cycle through the kitchen's instructions, family by family.

- **serial** (the unbatched baseline): one caller, one request at a time (each scorer batch holds one);
- **concurrent**: ``--concurrency`` callers, threads started behind a barrier and timed over one shared
  wall-clock window, so that the scorer host's batcher can group requests into one ``score_batch``.

Both send the same requests, with the scorer's score memo off (it would answer every repeated request
without the model). After an untimed warm-up pass over all of them (model load paths, the
engine's prefix cache, its ``batched_forward="auto"`` trials), ``--rounds`` rounds each time one serial
and one concurrent window, in alternating order (serial first, then concurrent first, ...), so that a
change in the machine's load lands on both. ``batched_ratio`` = concurrent throughput / serial
throughput (req/s over req/s), the geometric mean of the per-round ratios (its 95% t-interval on the
log scale is logged); ``rps`` and ``p99_ms`` are the concurrent windows' pooled throughput and 99th
percentile latency.

    PYTHONPATH=. flock /tmp/gp-heavy.lock python benchmarks/bench_serve.py [--requests 32] [--concurrency 8]
        [--rounds 3] [--options 51]

Last line: ``result: batched_ratio=<x> rps=<x> p99_ms=<x> options=<k>``.
"""
from __future__ import annotations

import argparse
import logging
import socket
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import requests

from groundplan.planners.saycan import build_prompt, load_prompt
from groundplan.serve.config import ServeConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks.harness, when run as a script
from benchmarks.harness import alternating, log_interval, percentile, report, run_in_window, setup_logging  # noqa: E402

log = logging.getLogger("bench_serve")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kitchen_step() -> tuple[list[str], list[str]]:
    """The kitchen env's skill list (what its observation offers at every step) and its task
    instructions, interleaved by family (task 0 of each family, then task 1, ...)."""
    from groundplan.config import EnvSpec
    from groundplan.factory import make_env

    env = make_env(EnvSpec(name="kitchen"))
    tasks = env.tasks()
    skills = list(env.reset(tasks[0], 0).skills)
    by_family: dict[str, list[str]] = {}
    for t in tasks:
        by_family.setdefault(t.family, []).append(t.instruction)
    width = max(len(v) for v in by_family.values())
    instructions = [v[i] for i in range(width) for v in by_family.values() if i < len(v)]
    return skills, instructions


def make_requests(n: int, options: int, skills: Sequence[str], instructions: Sequence[str]) -> list[dict]:
    """``n`` score requests: request i scores ``options`` skills (all of them, or a window starting at
    skill 3i, wrapping around the list) after the prompt of instruction i (cycling)."""
    if not 1 <= options <= len(skills):
        raise ValueError(f"--options must be between 1 and {len(skills)} (the kitchen's skills), got {options}")
    few_shot = load_prompt("saycan_kitchen")
    out = []
    for i in range(n):
        prompt = build_prompt(few_shot, instructions[i % len(instructions)])
        start = (i * 3) % len(skills) if options < len(skills) else 0
        opts = [" " + skills[(start + j) % len(skills)] for j in range(options)]
        out.append({"prompt": prompt, "options": opts, "request_id": f"r{i}"})
    return out


def _caller(base: str, bodies: list[dict]) -> Callable[[], dict[str, list]]:
    """One caller: its HTTP session is opened outside the window; the work sends ``bodies`` in turn."""
    session = requests.Session()

    def work() -> dict[str, list]:
        latencies, batches = [], []
        for body in bodies:
            t0 = time.perf_counter()
            r = session.post(f"{base}/v1/score", json=body, timeout=600)
            latencies.append(time.perf_counter() - t0)
            r.raise_for_status()
            batches.append(r.json()["batch_size"])
        return {"latencies": latencies, "batches": batches}

    return work


def run(base: str, reqs: list[dict], concurrency: int) -> dict:
    """Send ``reqs`` from ``concurrency`` callers (caller k sends requests k, k + concurrency, ...), threads
    behind one barrier, timed over one shared window (:func:`benchmarks.harness.run_in_window`)."""
    w = run_in_window(_caller, [(base, reqs[k::concurrency]) for k in range(concurrency)], mode="thread")
    latencies, batches = w.totals["latencies"], w.totals["batches"]
    return {"n": len(latencies), "wall_s": w.window_s, "rps": w.rate("latencies"), "latencies": latencies,
            "p50_ms": 1e3 * statistics.median(latencies), "p99_ms": 1e3 * percentile(latencies, 0.99),
            "mean_batch": statistics.mean(batches)}


def main(argv: Sequence[str] | None = None, lm_factory: Callable[[], Any] | None = None) -> None:
    """``lm_factory`` replaces the configured model in the scorer replica (the test passes a fake)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=32, help="requests per window")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3, help="rounds of (serial, concurrent) windows, order alternating")
    ap.add_argument("--options", type=int, default=51, help="options per request (the kitchen has 51 skills)")
    ap.add_argument("--batch", type=int, default=8, help="scorer max_batch_size")
    ap.add_argument("--model", default="smollm2-135m-instruct")
    args = ap.parse_args(argv)
    if args.rounds < 1 or args.requests < 1 or args.concurrency < 1:
        ap.error("--rounds, --requests and --concurrency must be at least 1")
    setup_logging()

    skills, instructions = kitchen_step()
    try:
        reqs = make_requests(args.requests, args.options, skills, instructions)
    except ValueError as exc:
        ap.error(str(exc))

    from ray import serve

    from groundplan.serve.app import run_server

    port = _free_port()
    cfg = ServeConfig(
        name="bench", port=port, viewer_dir=None, llm={"model": args.model},
        planners=[{"name": "saycan_novf", "label": "No-VF"}],
        limits={"max_options": max(64, args.options), "max_prompt_chars": 20000},
        # memo off: every window sends the same requests again, which the scorer's score memo would answer
        # without the model; what is measured is batching, as before the memo reached Serve
        scorer={"max_batch_size": args.batch, "batch_wait_timeout_s": 0.005, "max_ongoing_requests": 4 * args.batch,
                "placement": {"num_cpus": 1}, "autoscaling": {"min_replicas": 1, "max_replicas": 1}, "memo_size": 0},
        planner={"placement": {"num_cpus": 0.1}}, ingress={"placement": {"num_cpus": 0.1}, "max_ongoing_requests": 128})
    log.info("%d requests of %d options (prompt %d chars), %d concurrent callers vs one at a time, %d rounds",
             len(reqs), args.options, len(reqs[0]["prompt"]), args.concurrency, args.rounds)
    from groundplan.actors.group import RunnerGroup

    group = RunnerGroup(cpus_needed=2)
    group.connect()
    try:
        run_server(cfg, blocking=False, lm_factory=lm_factory)
        base = f"http://127.0.0.1:{port}"
        run(base, reqs, args.concurrency)  # warm-up, untimed: every prompt once, batched

        def show(r: int, order: tuple[str, ...], got: dict[str, dict]) -> None:
            log.info("round %d (%s first): serial %.2f req/s, concurrent %.2f req/s (mean batch %.2f): %.2fx",
                     r + 1, order[0], got["serial"]["rps"], got["concurrent"]["rps"],
                     got["concurrent"]["mean_batch"], got["concurrent"]["rps"] / got["serial"]["rps"])

        windows = alternating({"serial": lambda: run(base, reqs, 1),
                               "concurrent": lambda: run(base, reqs, args.concurrency)}, args.rounds, show)
        ratios = [c["rps"] / s["rps"] for s, c in zip(windows["serial"], windows["concurrent"])]
    finally:
        serve.shutdown()
        group.close()

    pooled = {}
    for name, ws in windows.items():
        lat = [x for w in ws for x in w["latencies"]]
        pooled[name] = {"n": len(lat), "wall_s": sum(w["wall_s"] for w in ws), "p50_ms": 1e3 * statistics.median(lat),
                        "p99_ms": 1e3 * percentile(lat, 0.99),
                        "mean_batch": statistics.fmean(w["mean_batch"] for w in ws)}
        pooled[name]["rps"] = pooled[name]["n"] / pooled[name]["wall_s"]
    for name, label in (("serial", "one at a time"), ("concurrent", f"{args.concurrency} concurrent")):
        p = pooled[name]
        log.info("%14s: n=%d %.2f req/s  p50 %.0f ms  p99 %.0f ms  mean batch %.2f  (%.1f s over %d windows)", label,
                 p["n"], p["rps"], p["p50_ms"], p["p99_ms"], p["mean_batch"], p["wall_s"], args.rounds)
    ratio, lo, hi = log_interval(ratios)
    log.info("batched_ratio (concurrent req/s / serial req/s): %.2fx, 95%% CI %.2f-%.2f over %d rounds "
             "(geometric mean, t-interval on log ratios)", ratio, lo, hi, len(ratios))
    con = pooled["concurrent"]
    report({"batched_ratio": f"{ratio:.2f}", "rps": f"{con['rps']:.2f}", "p99_ms": f"{con['p99_ms']:.0f}",
            "options": args.options})


if __name__ == "__main__":
    main()
