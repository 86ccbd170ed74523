"""Cross-episode batching headroom on this device: b SayCan requests from b different episodes scored
one after another (the per-request loop) vs in one padded forward (the engine's multi-request layout:
each request's options packed in its own row after its own cached prefix), and, for reference, the
options of one request repeated b times in one packed sequence (the earlier form of this benchmark).

The b requests are real kitchen steps of different episodes: Appendix C.2's prompt, b different
instructions, one executed step each, all 51 skills as options. Each has its own prompt, so each row
of the padded batch has its own cached prefix (sharing only the few-shot part, as concurrent episodes
do); all prefixes are cached before timing, as in a running sweep.

``ratio`` = per-request time of the loop / per-request time of the padded forward at the largest b:
above 1 where batching requests pays on this device (GPUs), about 1 or below on a small CPU, where
one request already keeps the cores busy. ``HFLanguageModel(batched_forward="auto")`` makes the same
comparison at run time and keeps the faster layout.

    python benchmarks/bench_batch_scaling.py [--model NAME] [--batches 1 2 4] [--repeats 3]

Last line: ``result: ratio=<x> ms_per_request_loop=<x> ms_per_request_padded=<x> ms_per_request_packed=<x>`` (at the largest b)
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from groundplan.envs.kitchen.skills import SKILLS
from groundplan.llm.hf import HFLanguageModel
from groundplan.planners.saycan import load_prompt

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks.harness, when run as a script
from benchmarks.harness import report  # noqa: E402
from benchmarks.harness import timed as harness_timed  # noqa: E402

INSTRUCTIONS = ["How would you bring me a coke can?", "Throw away the sponge.", "Bring me an apple from the counter.",
                "Put the chips in the drawer.", "Bring me something to drink.", "Move the water bottle to the table.",
                "I spilled my coke, can you help?", "Bring me the rice chips."]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    if max(args.batches) > len(INSTRUCTIONS):
        raise SystemExit(f"at most {len(INSTRUCTIONS)} requests")

    lm = HFLanguageModel(args.model, dtype=args.dtype, max_pack_tokens=600 * max(args.batches),
                         max_batch_rows=max(args.batches))
    few = load_prompt("saycan_kitchen")
    options = [" " + s for s in SKILLS]
    requests = [(f"{few}Human: {ins}\nRobot: 1. find a coke can, 2.", options) for ins in INSTRUCTIONS]
    for p, o in requests[: max(args.batches)]:
        lm.score(p, o)  # every prompt goes into the prefix cache: timed calls are warm, as in a sweep
    sync = torch.cuda.synchronize if lm.device.type == "cuda" else (lambda: None)
    print(f"model={args.model} device={lm.device.type} dtype={lm.model.dtype} torch_threads={torch.get_num_threads()} "
          f"prompt_tokens={len(lm.tokenizer(requests[0][0]).input_ids)} options={len(options)}")

    def timed(fn) -> float:
        return harness_timed(fn, args.repeats, warmup=1, sync=sync)  # the first run is a warm-up

    ms: dict[tuple[str, int], float] = {}
    for b in args.batches:
        reqs = requests[:b]
        ms["loop", b] = 1e3 * timed(lambda: lm.score_batch(reqs, layout="loop")) / b
        ms["padded", b] = 1e3 * timed(lambda: lm.score_batch(reqs, layout="padded")) / b if b > 1 else ms["loop", b]
        ms["packed", b] = 1e3 * timed(lambda: lm.score(reqs[0][0], options * b)) / b
        print(f"b={b}: per request: loop {ms['loop', b]:.0f} ms, padded forward {ms['padded', b]:.0f} ms, "
              f"one request's options x{b} packed {ms['packed', b]:.0f} ms")
    big = max(args.batches)
    ratio = ms["loop", big] / ms["padded", big]
    print(f"padded multi-request forward vs per-request loop at b={big}: {ratio:.2f}x per request "
          f"(median of {args.repeats}; a shared machine: noisy)")
    report({"ratio": f"{ratio:.2f}", "ms_per_request_loop": f"{ms['loop', big]:.0f}",
            "ms_per_request_padded": f"{ms['padded', big]:.0f}", "ms_per_request_packed": f"{ms['packed', big]:.0f}"})


if __name__ == "__main__":
    main()
