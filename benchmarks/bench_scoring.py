"""Scoring benchmark: naive per-option forwards vs shared-prefix packed scoring on the SayCan kitchen.

Prompt: the SayCan Appendix C.2 few-shot dialog + an instruction + one executed step; options: every
kitchen skill (51). Prints options/s for both paths and their ratio, the packed path's share of this
machine's measured matmul FLOP/s (2 x parameters x tokens), and one SayCan step's cost with a warm
prefix cache (the previous step's prompt cached) against a cold one.

    python benchmarks/bench_scoring.py [--model NAME] [--naive-options 12] [--repeats 3]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

from groundplan.envs.kitchen.skills import SKILLS
from groundplan.llm.hf import HFLanguageModel
from groundplan.planners.saycan import load_prompt

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks.harness, when run as a script
from benchmarks.flops import matmul_flops  # noqa: E402
from benchmarks.harness import report  # noqa: E402
from benchmarks.harness import timed as harness_timed  # noqa: E402


def timed(fn, repeats: int) -> float:
    """Median seconds of ``repeats`` calls (the harness's timer, synchronised on a GPU)."""
    return harness_timed(fn, repeats, sync=torch.cuda.synchronize if torch.cuda.is_available() else None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--naive-options", type=int, default=12, help="options timed on the naive path (a rate)")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    lm = HFLanguageModel(args.model, dtype=args.dtype)
    device = "cuda" if lm.device.type == "cuda" else "cpu"
    options = [" " + s for s in SKILLS]
    step1 = load_prompt("saycan_kitchen") + "Human: How would you bring me a coke can?\nRobot: 1."
    prompt = step1 + " find a coke can, 2."
    n_prompt = len(lm.tokenizer(prompt).input_ids)
    params = lm.num_parameters
    print(f"model={args.model} params={params/1e6:.1f}M device={device} dtype={lm.model.dtype}")
    print(f"prompt_tokens={n_prompt} options={len(options)} torch_threads={torch.get_num_threads()}")

    peak = matmul_flops(lm.model.dtype, device)
    print(f"matmul peak: {peak/1e9:.1f} GFLOP/s")

    sub = options[: args.naive_options]
    lm.score_reference(prompt, sub[:1])  # warm-up
    t_naive = timed(lambda: lm.score_reference(prompt, sub), 1)
    naive_ops = len(sub) / t_naive
    print(f"naive (one full forward per option): {naive_ops:.2f} options/s ({len(sub)} options in {t_naive:.2f} s)")

    def cold():
        lm.cache.clear()
        lm.score(prompt, options)

    cold()  # warm-up
    tok0 = lm.stats.forward_tokens
    t_cold = timed(cold, args.repeats)
    tokens_per_call = (lm.stats.forward_tokens - tok0) / args.repeats
    batched_ops = len(options) / t_cold
    flop_fraction = 2 * params * tokens_per_call / t_cold / peak
    print(f"shared-prefix packed (cold cache, prompt included): {batched_ops:.2f} options/s "
          f"({t_cold*1e3:.0f} ms/step, {tokens_per_call:.0f} tokens, {tokens_per_call/t_cold:.0f} tokens/s)")
    print(f"ratio over naive: {batched_ops/naive_ops:.1f}x; FLOP fraction: {flop_fraction:.2f}")

    # one SayCan step: cold = nothing cached; warm = the previous step's prompt is in the cache
    def warm():
        lm.cache.clear()
        lm.score(step1, options)

    warm_times = []
    for _ in range(args.repeats):
        warm()
        t0 = time.perf_counter()
        lm.score(prompt, options)
        warm_times.append(time.perf_counter() - t0)
    t_warm = statistics.median(warm_times)
    print(f"SayCan step: warm prefix cache {t_warm*1e3:.0f} ms, cold {t_cold*1e3:.0f} ms ({t_cold/t_warm:.1f}x)")
    report({"ratio": f"{batched_ops / naive_ops:.1f}", "flop_fraction": f"{flop_fraction:.2f}",
            "warm_step_s": f"{t_warm:.3f}", "cold_step_s": f"{t_cold:.3f}"})


if __name__ == "__main__":
    main()
