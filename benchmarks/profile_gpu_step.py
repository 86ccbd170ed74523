"""Where one prefix-cached SayCan scoring step spends its time: phases, cProfile and torch.profiler.

The engine and the random model of ``bench_gpu.py`` (``--arch``; 51 kitchen options after the Appendix C.2
prompt and one executed step). Times each phase of ``HFLanguageModel.score`` (encoding, context lookup,
the options' pack forward), then prints cProfile's top functions and torch.profiler's top operators, which
show how much of a step the device is busy and how much is CPU (module calls, launches, tokenisation).

    python benchmarks/profile_gpu_step.py                       # CUDA: llama-3.2-1b in bf16
    python benchmarks/profile_gpu_step.py --device cpu --arch tiny
"""
from __future__ import annotations

import argparse
import cProfile
import io
import logging
import os
import pstats
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_gpu

log = logging.getLogger("profile_gpu_step")


def median_ms(fn: Callable[[], Any], n: int = 10) -> tuple[float, Any]:
    """Median wall milliseconds of ``n`` synchronised calls after a warm-up (``bench_gpu.timed``), in
    inference mode (the engine's private phases assume it), and the warm-up's result."""
    with torch.inference_mode():
        seconds, out = bench_gpu.timed(fn, n)
    return 1e3 * seconds, out


def main(argv: Sequence[str] | None = None) -> dict[str, float]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default=None, choices=list(bench_gpu.ARCHS), help="default: llama-3.2-1b (CUDA), tiny (CPU)")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--options", type=int, default=51)
    ap.add_argument("--tokenizer", default=None, help="tokenizer folder (as bench_gpu.py's --tokenizer)")
    ap.add_argument("--out", default=None, help="folder for cprofile.txt and torch_profile.txt")
    args = ap.parse_args(argv)
    if args.tokenizer:
        os.environ[bench_gpu.TOKENIZER_ENV] = args.tokenizer
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    device = args.device
    arch = args.arch or ("llama-3.2-1b" if device == "cuda" else "tiny")
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    lm = bench_gpu.make_engine(arch, dtype, device, max_batch_rows=32, prefix_cache_mb=16384)
    prompt, options = bench_gpu.kitchen_requests(1, args.options)[0]
    prompt += " find a coke can, 2."
    for _ in range(3):
        lm.score(prompt, options)
    phases = {"step_ms": median_ms(lambda: lm.score(prompt, options))[0],
              "split_ms": median_ms(lambda: lm._split(prompt, options))[0]}
    phases["prepare_ms"], prepared = median_ms(lambda: lm._prepare(prompt, options))
    phases["pack_forward_ms"] = median_ms(lambda: lm._packed(prepared))[0]
    log.info("%s on %s, %d options, prompt cached: %s", arch, device, len(options),
             ", ".join(f"{k} {v:.1f}" for k, v in phases.items()))

    prof = cProfile.Profile()
    prof.enable()
    for _ in range(5):
        lm.score(prompt, options)
    bench_gpu._sync()
    prof.disable()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(30)

    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=activities) as tprof:
        for _ in range(3):
            lm.score(prompt, options)
        bench_gpu._sync()
    key = "self_cuda_time_total" if device == "cuda" else "self_cpu_time_total"
    table = tprof.key_averages().table(sort_by=key, row_limit=20)
    print(text.getvalue())
    print(table)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        Path(args.out, "cprofile.txt").write_text(text.getvalue())
        Path(args.out, "torch_profile.txt").write_text(
            table + "\n\n" + tprof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30))
    bench_gpu.release_engine(lm)
    return phases


if __name__ == "__main__":
    main()
