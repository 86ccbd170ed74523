"""Serve load benchmark: concurrent POST /v1/score on loopback against the embedded model, against the
same requests sent one at a time.

Each request is one SayCan step as a remote caller would send it: the Appendix C.2 few-shot prompt, an
instruction, and ``--options`` kitchen skills. Concurrent callers (threads started behind a barrier,
timed over one shared wall-clock window) let ``@serve.batch`` group requests into one ``score_batch``;
the baseline sends the same requests sequentially (each batch holds one). Reports req/s, p50/p99
latency and the mean batch size (from each response's ``batch_size``).

    PYTHONPATH=. flock /tmp/gp-heavy.lock python benchmarks/bench_serve.py [--requests 64] [--concurrency 8]

Last line: ``result: batched_ratio=<x> rps=<x> p99_ms=<x>``.
"""
from __future__ import annotations

import argparse
import logging
import socket
import statistics
import threading
import time

import requests

from groundplan.envs.kitchen.skills import SKILLS
from groundplan.planners.saycan import build_prompt, load_prompt
from groundplan.serve.config import ServeConfig

log = logging.getLogger("bench_serve")
INSTRUCTIONS = ["How would you bring me a coke can?", "Bring me an apple from the counter.",
                "Throw away the sponge.", "I spilled my drink, can you help?", "Put the chips on the table.",
                "How would you bring me something to eat?", "Move the 7up can to the trash.", "Bring me a fruit."]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_requests(n: int, options: int) -> list[dict]:
    few_shot = load_prompt("saycan_kitchen")
    out = []
    for i in range(n):
        prompt = build_prompt(few_shot, INSTRUCTIONS[i % len(INSTRUCTIONS)]) + " 1."
        opts = [" " + s for s in SKILLS[(i * 3) % (len(SKILLS) - options):][:options]]
        out.append({"prompt": prompt, "options": opts, "request_id": f"r{i}"})
    return out


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def run(base: str, reqs: list[dict], concurrency: int) -> dict:
    latencies: list[float] = []
    batches: list[int] = []
    lock = threading.Lock()
    barrier = threading.Barrier(concurrency + 1)

    def worker(k: int) -> None:
        session = requests.Session()
        barrier.wait()
        for body in reqs[k::concurrency]:
            t0 = time.perf_counter()
            r = session.post(f"{base}/v1/score", json=body, timeout=300)
            dt = time.perf_counter() - t0
            r.raise_for_status()
            with lock:
                latencies.append(dt)
                batches.append(r.json()["batch_size"])

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(concurrency)]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    return {"n": len(latencies), "wall_s": wall, "rps": len(latencies) / wall,
            "p50_ms": 1e3 * statistics.median(latencies), "p99_ms": 1e3 * percentile(latencies, 0.99),
            "mean_batch": statistics.mean(batches)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--options", type=int, default=8, help="options per request")
    ap.add_argument("--batch", type=int, default=8, help="scorer max_batch_size")
    ap.add_argument("--model", default="smollm2-135m-instruct")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    import ray
    from ray import serve

    from groundplan.serve.app import run_server

    port = _free_port()
    cfg = ServeConfig(
        name="bench", port=port, viewer_dir=None, llm={"model": args.model},
        planners=[{"name": "saycan_novf", "label": "No-VF"}], limits={"max_options": 64, "max_prompt_chars": 20000},
        scorer={"max_batch_size": args.batch, "batch_wait_timeout_s": 0.005, "max_ongoing_requests": 4 * args.batch,
                "placement": {"num_cpus": 1}, "autoscaling": {"min_replicas": 1, "max_replicas": 1}},
        planner={"placement": {"num_cpus": 0.1}}, ingress={"placement": {"num_cpus": 0.1}, "max_ongoing_requests": 128})
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        run_server(cfg, blocking=False)
        base = f"http://127.0.0.1:{port}"
        reqs = make_requests(args.requests, args.options)
        run(base, reqs[: 2 * args.concurrency], args.concurrency)  # warm-up: model load paths, prefix cache
        seq = run(base, reqs, 1)
        con = run(base, reqs, args.concurrency)
    finally:
        serve.shutdown()
        ray.shutdown()
    for name, r in (("one at a time", seq), (f"{args.concurrency} concurrent", con)):
        print(f"{name:>14}: n={r['n']} {r['rps']:.2f} req/s  p50 {r['p50_ms']:.0f} ms  p99 {r['p99_ms']:.0f} ms  "
              f"mean batch {r['mean_batch']:.2f}  ({r['wall_s']:.1f} s)")
    ratio = con["rps"] / seq["rps"]
    print(f"result: batched_ratio={ratio:.2f} rps={con['rps']:.2f} p99_ms={con['p99_ms']:.0f} "
          f"seq_rps={seq['rps']:.2f} mean_batch={con['mean_batch']:.2f}")


if __name__ == "__main__":
    main()
