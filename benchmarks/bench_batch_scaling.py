"""Cross-episode batching headroom: what packing several episodes' SayCan requests into one forward
pass would save over scoring them one after another.

Issue 3's throughput target assumes that batching requests from concurrent episodes makes each
request cheaper. Requests from different episodes share only the cached few-shot prefix, so their
option tokens are new work either way: a packed forward can only win by running the matmuls at a
better efficiency (larger M). This benchmark measures exactly that on the real engine and model:
one SayCan kitchen request (the Appendix C.2 prompt, 51 options) is scored with its options repeated
``b`` times, which the engine packs into one forward over the cached prompt (each option attends to
the prompt and to its own tokens only, the mask a multi-request forward would use), and the
per-request time is compared with ``b = 1``.

``ratio`` = per-request time at b = 1 / per-request time at the largest b: the most any cross-episode
batching of the scorer's forward passes can gain on this device (above 1 on GPUs, where one request
leaves the device mostly idle; about 1 or below on a small CPU, where one request already keeps the
cores busy).

    python benchmarks/bench_batch_scaling.py [--model NAME] [--batches 1 2 4] [--repeats 7]
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from groundplan.envs.kitchen.skills import SKILLS
from groundplan.llm.hf import HFLanguageModel
from groundplan.planners.saycan import load_prompt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()

    # headroom for the largest pack, so that ``b`` copies of the options run in one forward pass
    lm = HFLanguageModel(args.model, dtype=args.dtype, max_pack_tokens=600 * max(args.batches))
    prompt = load_prompt("saycan_kitchen") + "Human: How would you bring me a coke can?\nRobot: 1. find a coke can, 2."
    options = [" " + s for s in SKILLS]
    lm.score(prompt, options)  # the prompt goes into the prefix cache: every timed call is warm
    tokens = lm.stats.forward_tokens
    lm.score(prompt, options)
    per_request_tokens = lm.stats.forward_tokens - tokens
    print(f"model={args.model} device={lm.device.type} dtype={lm.model.dtype} torch_threads={torch.get_num_threads()}")
    print(f"prompt_tokens={len(lm.tokenizer(prompt).input_ids)} option_tokens_per_request={per_request_tokens} "
          f"options={len(options)}")

    per_request: dict[int, float] = {}
    for b in args.batches:
        times = []
        for _ in range(args.repeats + 1):  # the first run is a warm-up
            t0 = time.perf_counter()
            lm.score(prompt, options * b)  # the engine packs every option of the b requests in one forward
            if lm.device.type == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        per_request[b] = statistics.median(times[1:]) / b
        print(f"b={b}: one forward over {b * per_request_tokens} tokens {per_request[b] * b * 1e3:.0f} ms, "
              f"{per_request[b] * 1e3:.0f} ms per request")
    largest = max(args.batches)
    ratio = per_request[min(args.batches)] / per_request[largest]
    print(f"per-request speed-up from packing {largest} requests into one forward: {ratio:.2f}x")
    print(f"result: ratio={ratio:.2f} ms_per_request_b1={per_request[min(args.batches)] * 1e3:.0f} "
          f"ms_per_request_b{largest}={per_request[largest] * 1e3:.0f}")


if __name__ == "__main__":
    main()
