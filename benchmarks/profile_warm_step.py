"""Profile of a warm SayCan step on this machine: where its time goes and how close it runs to the hardware.

A warm step is what a sweep runs: the previous step's prompt is in the prefix cache and the new prompt adds
a short tail (the chosen skill and the next step number), then all 51 kitchen skills are scored after it
(the prompt of ``bench_scoring.py``: Appendix C.2's dialog, an instruction and one executed step). Two engine
settings are timed in alternating rounds on the same model: ``two_forwards`` (the tail runs alone, then the
options' pack: the engine before ``PackedScorer.fuse_tail``) and ``one_forward`` (the tail runs as the first
rows of the options' forward). For each, per step:

- wall time, and the time inside the model's forwards (a forward hook pair), so ``overhead`` = the share of
  the step outside them: tokenising, cache lookups and copies, masks, log-softmax, Python;
- ``peak_fraction`` = 2 x parameters x tokens run / step time / the machine's matmul peak (the measure
  ``bench_scoring.py`` reports, square float32 matmuls timed here in the same process);
- ``attention_share``: the FLOPs of the attention products (4 x query rows x key columns x head_dim x heads x
  layers, dense over the mask, as the kernel computes them), over the linear layers' 2 x parameters x tokens:
  the work the parameter count does not see, which grows with the cached prompt's length;
- ``peak_fraction_all`` = (linear + attention FLOPs) / step time / peak.

    python benchmarks/profile_warm_step.py [--rounds 6] [--threads N]

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
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # benchmarks.*, when run as `python benchmarks/<name>.py`
from benchmarks.bench_scoring import matmul_flops  # noqa: E402
from benchmarks.harness import alternating, log_interval, report, setup_logging  # noqa: E402

log = logging.getLogger("profile_warm_step")


class ForwardClock:
    """Wall time spent inside the model's forwards, and the query rows and key columns of each."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.seconds, self.forwards, self.tokens, self.attention = 0.0, 0, 0, 0
        self._t0 = 0.0
        model.register_forward_pre_hook(self._start, with_kwargs=True)
        model.register_forward_hook(self._stop)

    def reset(self) -> None:
        self.seconds, self.forwards, self.tokens, self.attention = 0.0, 0, 0, 0

    def _start(self, module: Any, args: tuple, kwargs: dict) -> None:
        ids = kwargs.get("input_ids")
        cache = kwargs.get("past_key_values")
        q = int(ids.shape[-1]) if ids is not None else 0
        past = int(cache.get_seq_length()) if cache is not None else 0
        self.tokens += q
        self.attention += q * (past + q)  # query rows x key columns of this forward
        self._t0 = time.perf_counter()

    def _stop(self, module: Any, args: tuple, out: Any) -> None:
        self.seconds += time.perf_counter() - self._t0
        self.forwards += 1


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    args = ap.parse_args(argv)
    setup_logging()
    if args.threads:
        torch.set_num_threads(args.threads)

    from groundplan.envs.kitchen.skills import SKILLS
    from groundplan.llm.hf import HFLanguageModel
    from groundplan.planners.saycan import load_prompt

    lm = HFLanguageModel(args.model)
    scorer = lm._scorer
    cfg = lm.model.config.get_text_config(decoder=True)
    heads = cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    params = lm.num_parameters
    options = [" " + s for s in SKILLS]
    step1 = load_prompt("saycan_kitchen") + "Human: How would you bring me a coke can?\nRobot: 1."
    step2 = step1 + " find a coke can, 2."
    peak = matmul_flops(lm.model.dtype, "cuda" if lm.device.type == "cuda" else "cpu")
    log.info("model %s (%.1fM parameters), torch threads %d, matmul peak %.1f GFLOP/s", args.model, params / 1e6,
             torch.get_num_threads(), peak / 1e9)
    clock = ForwardClock(lm.model)
    scores: dict[bool, list[float]] = {}

    def warm_step(fuse: bool) -> dict[str, float]:
        scorer.fuse_tail = fuse
        lm.cache.clear()
        lm.score(step1, options)  # the previous step, cached
        clock.reset()
        t0 = time.perf_counter()
        got = lm.score(step2, options)
        wall = time.perf_counter() - t0
        scores[fuse] = [s.logprob_sum for s in got]
        linear = 2 * params * clock.tokens
        attention = 4 * clock.attention * head_dim * heads * cfg.num_hidden_layers
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
    two, one = out["two_forwards"], out["one_forward"]
    report({"warm_ms_two": f"{two['wall'] * 1e3:.0f}", "warm_ms_one": f"{one['wall'] * 1e3:.0f}",
            "speedup": f"{ratio:.2f}", "overhead_two": f"{two['overhead']:.3f}", "overhead_one": f"{one['overhead']:.3f}",
            "peak_fraction_two": f"{two['peak_fraction']:.2f}", "peak_fraction_one": f"{one['peak_fraction']:.2f}",
            "attention_share": f"{one['attention_share']:.2f}", "peak_fraction_all_one": f"{one['peak_fraction_all']:.2f}",
            "max_abs_diff": f"{diff:.2g}"})


if __name__ == "__main__":
    main()
