"""Cross-episode batching headroom: what packing several episodes' SayCan requests into one forward
pass would save over scoring them one after another.

Issue 3's throughput target assumes that batching requests from concurrent episodes makes each
request cheaper. Requests from different episodes share only the cached few-shot prefix, so their
option tokens are new work either way: a packed forward can only win by running the matmuls at a
better efficiency (larger M). This benchmark measures exactly that on the real engine and model:
one SayCan kitchen request (the Appendix C.2 prompt, 51 options) is packed ``b`` times side by side
over the cached prompt (each copy attends to the prompt and to its own tokens only, the mask a
multi-request forward would use) and the per-request time of one forward is compared with ``b = 1``.

``ratio`` = per-request time at b = 1 / per-request time at the largest b: the most any cross-episode
batching of the scorer's forward passes can gain on this device (above 1 on GPUs, where one request
leaves the device mostly idle; about 1 or below on a small CPU, where one request already keeps the
cores busy).

    python benchmarks/bench_batch_scaling.py [--model NAME] [--batches 1 2 4] [--repeats 3]
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from groundplan.envs.kitchen.skills import SKILLS
from groundplan.llm.hf import HFLanguageModel
from groundplan.planners.saycan import load_prompt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    # headroom for the largest pack: the forward writes its keys/values after the cached prompt
    lm = HFLanguageModel(args.model, dtype=args.dtype, max_pack_tokens=600 * max(args.batches))
    device = lm.device
    prompt = load_prompt("saycan_kitchen") + "Human: How would you bring me a coke can?\nRobot: 1. find a coke can, 2."
    options = [" " + s for s in SKILLS]
    ctx, plans, _ = lm._split(prompt, options)
    segments = [p.segment for p in plans]
    one_ids = np.concatenate(segments)
    one_seg = np.concatenate([np.full(len(s), i) for i, s in enumerate(segments)])
    print(f"model={args.model} device={device.type} dtype={lm.model.dtype} torch_threads={torch.get_num_threads()}")
    print(f"prompt_tokens={len(ctx)} option_tokens_per_request={len(one_ids)} options={len(options)}")

    kv, _ = lm._context(ctx)
    per_request: dict[int, float] = {}
    with torch.inference_mode():
        for b in args.batches:
            ids = np.tile(one_ids, b)
            seg = np.concatenate([one_seg + r * len(segments) for r in range(b)])  # each copy its own segments
            pos = np.tile(np.arange(len(ctx), len(ctx) + len(one_ids)), b)
            inputs = dict(
                input_ids=torch.as_tensor(ids, device=device).unsqueeze(0),
                position_ids=torch.as_tensor(pos, device=device).unsqueeze(0),
                attention_mask=lm._packed_mask(seg, len(ctx)),
                use_cache=True,
                logits_to_keep=len(ids),
            )
            times = []
            for _ in range(args.repeats + 1):  # the first run is a warm-up
                t0 = time.perf_counter()
                lm.model(past_key_values=lm._new_cache(kv, len(ctx)), **inputs)
                if device.type == "cuda":
                    torch.cuda.synchronize()
                times.append(time.perf_counter() - t0)
            per_request[b] = statistics.median(times[1:]) / b
            print(f"b={b}: one forward over {len(ids)} tokens {per_request[b] * b * 1e3:.0f} ms, "
                  f"{per_request[b] * 1e3:.0f} ms per request")
    largest = max(args.batches)
    ratio = per_request[min(args.batches)] / per_request[largest]
    print(f"per-request speed-up from packing {largest} requests into one forward: {ratio:.2f}x")
    print(f"result: ratio={ratio:.2f} ms_per_request_b1={per_request[min(args.batches)] * 1e3:.0f} "
          f"ms_per_request_b{largest}={per_request[largest] * 1e3:.0f}")


if __name__ == "__main__":
    main()
