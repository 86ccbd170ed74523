"""What the machine's processor can do, read once: which reduced-precision kernels are worth asking for.

bf16 halves the bytes per weight and, on CPUs with AVX512-BF16 (``vdpbf16ps``) or AMX tiles, runs matrix
products at two or more times float32's rate; elsewhere PyTorch emulates it and it is slower than float32.
So a reduced precision is chosen only where the instructions exist, and the choice is logged.
"""
from __future__ import annotations

import functools
from pathlib import Path


@functools.lru_cache(maxsize=None)
def cpu_flags() -> frozenset[str]:
    """The flags of the first processor in ``/proc/cpuinfo`` (empty where the file does not exist)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def cpu_has_bf16() -> bool:
    """True where the CPU computes bf16 products natively (AVX512-BF16 or AMX-BF16)."""
    return bool({"avx512_bf16", "amx_bf16"} & cpu_flags())


def bf16_available(use_gpu: bool = False) -> bool:
    """bf16 is worth using: on a GPU that supports it, or on a CPU with native bf16 instructions."""
    if use_gpu:
        import torch

        return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    return cpu_has_bf16()
