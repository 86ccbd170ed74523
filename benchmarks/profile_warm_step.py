"""Profile of a warm SayCan step on this machine: where its time goes and how close it runs to the hardware.

A warm step is what a sweep runs: the previous step's prompt is in the prefix cache and the new prompt adds
a short tail (the chosen skill and the next step number), then all 51 kitchen skills are scored after it
(the prompt of ``bench_scoring.py``: Appendix C.2's dialog, an instruction and one executed step). Two engine
settings are timed in alternating rounds on the same model: ``two_forwards`` (the tail runs alone, then the
options' pack: the engine before ``PackedScorer.fuse_tail``) and ``one_forward`` (the tail runs as the first
rows of the options' forward). For each, per step:

- wall time, and the time inside the model's forwards (a forward hook pair), so ``overhead`` = the share of
  the step outside them: tokenising, cache lookups and copies, masks, log-softmax, Python;
- ``peak_fraction`` = the linear layers' FLOPs / step time / the machine's matmul peak (square matmuls of
  the model's dtype timed here in the same process). The FLOPs are :class:`benchmarks.flops.ForwardClock`'s:
  2 x the body's parameters x input rows + 2 x the head's x the rows whose logits are computed. Runs before
  2026-12-06 counted 2 x all parameters x input rows, which over-counts the head on rows without logits;
- ``attention_share``: the FLOPs of the attention products (4 x query rows x key columns x head_dim x heads x
  layers, dense over the mask, as the kernel computes them), over the linear layers': the work the
  parameter count does not see, which grows with the cached prompt's length;
- ``peak_fraction_all`` = (linear + attention FLOPs) / step time / peak.

With ``--ops N``, one more warm step of the one-forward setting runs under ``torch.profiler`` (the previous
step cached outside it) and its ``N`` costliest operators (self CPU time) are logged: which kernels the step's
time goes to.

    python benchmarks/profile_warm_step.py [--rounds 6] [--threads N] [--ops 12]

Last line: ``result: warm_ms_two=... warm_ms_one=... speedup=... overhead_two=... overhead_one=...
peak_fraction_two=... peak_fraction_one=... attention_share=... peak_fraction_all_one=... max_abs_diff=...``
"""
from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # benchmarks.*, when run as `python benchmarks/<name>.py`
from benchmarks.flops import ForwardClock, matmul_flops  # noqa: E402
from benchmarks.harness import alternating, log_interval, report, setup_logging  # noqa: E402

log = logging.getLogger("profile_warm_step")


def log_operators(step: Callable[[], object], top: int) -> None:
    """Run ``step`` once under ``torch.profiler`` and log its ``top`` costliest operators by self CPU time,
    each with its share of the profiled total."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    ops = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
    total = sum(e.self_cpu_time_total for e in ops) or 1.0
    log.info("one warm step under torch.profiler: %.0f ms of operator self time", total / 1e3)
    for e in ops[:top]:
        log.info("  %-52s %8.1f ms %5.1f%%  %5d calls", e.key, e.self_cpu_time_total / 1e3,
                 100 * e.self_cpu_time_total / total, e.count)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--ops", type=int, default=0, help="log this many of the costliest operators of one step")
    args = ap.parse_args(argv)
    setup_logging()
    if args.threads:
        torch.set_num_threads(args.threads)

    from groundplan.envs.kitchen.skills import SKILLS
    from groundplan.llm.hf import HFLanguageModel
    from groundplan.planners.saycan import load_prompt

    lm = HFLanguageModel(args.model)
    scorer = lm._scorer
    params = lm.num_parameters
    options = [" " + s for s in SKILLS]
    step1 = load_prompt("saycan_kitchen") + "Human: How would you bring me a coke can?\nRobot: 1."
    step2 = step1 + " find a coke can, 2."
    peak = matmul_flops(lm.model.dtype, "cuda" if lm.device.type == "cuda" else "cpu")
    log.info("model %s (%.1fM parameters), torch threads %d, matmul peak %.1f GFLOP/s", args.model, params / 1e6,
             torch.get_num_threads(), peak / 1e9)
    clock = ForwardClock(lm.model)
    scores: dict[bool, list[float]] = {}

    def previous_step(fuse: bool) -> None:
        scorer.fuse_tail = fuse
        lm.cache.clear()
        lm.score(step1, options)  # the previous step, cached

    def warm_step(fuse: bool) -> dict[str, float]:
        previous_step(fuse)
        clock.reset()
        t0 = time.perf_counter()
        got = lm.score(step2, options)
        wall = time.perf_counter() - t0
        scores[fuse] = [s.logprob_sum for s in got]
        linear, attention = clock.linear_flops, clock.attention_flops
        return {"wall": wall, "forward": clock.seconds, "forwards": clock.forwards, "tokens": clock.tokens,
                "linear": linear, "attention": attention}

    for fuse in (False, True):  # warm-up: weights paged in, kernels chosen
        warm_step(fuse)
    got = alternating({"two_forwards": lambda: warm_step(False), "one_forward": lambda: warm_step(True)},
                      args.rounds)
    out: dict[str, dict[str, float]] = {}
    for side, rows in got.items():
        wall = statistics.median(r["wall"] for r in rows)
        overhead = statistics.median(1 - r["forward"] / r["wall"] for r in rows)
        r0 = rows[0]
        out[side] = {"wall": wall, "overhead": overhead, "peak_fraction": r0["linear"] / wall / peak,
                     "peak_fraction_all": (r0["linear"] + r0["attention"]) / wall / peak,
                     "attention_share": r0["attention"] / r0["linear"]}
        log.info("%s: %.0f ms per warm step (rounds: %s), %d forward(s), %d tokens, overhead outside the forwards "
                 "%.1f%%, peak fraction %.2f (linear) / %.2f (linear + attention)", side, wall * 1e3,
                 ", ".join(f"{r['wall'] * 1e3:.0f}" for r in rows), r0["forwards"], r0["tokens"],
                 100 * overhead, out[side]["peak_fraction"], out[side]["peak_fraction_all"])
    ratio, lo, hi = log_interval([a["wall"] / b["wall"] for a, b in zip(got["two_forwards"], got["one_forward"])])
    diff = max(abs(a - b) for a, b in zip(scores[False], scores[True]))
    log.info("one forward per step: %.2fx faster (95%% CI %.2f-%.2f); largest |log p| difference %.2g", ratio, lo,
             hi, diff)
    if args.ops:
        previous_step(True)
        log_operators(lambda: lm.score(step2, options), args.ops)
    two, one = out["two_forwards"], out["one_forward"]
    report({"warm_ms_two": f"{two['wall'] * 1e3:.0f}", "warm_ms_one": f"{one['wall'] * 1e3:.0f}",
            "speedup": f"{ratio:.2f}", "overhead_two": f"{two['overhead']:.3f}", "overhead_one": f"{one['overhead']:.3f}",
            "peak_fraction_two": f"{two['peak_fraction']:.2f}", "peak_fraction_one": f"{one['peak_fraction']:.2f}",
            "attention_share": f"{one['attention_share']:.2f}", "peak_fraction_all_one": f"{one['peak_fraction_all']:.2f}",
            "max_abs_diff": f"{diff:.2g}"})


if __name__ == "__main__":
    main()
