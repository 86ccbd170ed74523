"""A latency-model language model: stands in for a GPU scorer in ``bench_runtime_scale.py``.

``score_batch`` of n requests sleeps ``fixed_ms + per_request_ms * b`` for each forward of b <= ``max_batch``
requests, so a simulated GPU uses no CPU of this machine; scores are deterministic pseudo-random
log-probs in [-12, 0] (crc32 of prompt and option), so SayCan plans are reproducible. It declares
``memoizable = False``: the scorer's memo must not hide the simulated cost. Each forward appends
``<end time> <requests>`` to ``log_path`` (one file for all replicas on this machine), from which the
benchmark measures steady-state throughput.
"""
from __future__ import annotations

import os
import time
import zlib
from typing import Sequence

import numpy as np

from groundplan.llm.base import Generation, GenerationParams, OptionScore, ScoreRequest


class LatencyLM:
    memoizable = False

    def __init__(self, fixed_ms: float, per_request_ms: float, max_batch: int = 32, log_path: str | None = None) -> None:
        self.name = f"latency-model({fixed_ms}+{per_request_ms}/req, max {max_batch})"
        self.fixed_s, self.per_request_s, self.max_batch = fixed_ms / 1e3, per_request_ms / 1e3, int(max_batch)
        self.log_path = log_path

    def cost_s(self, n: int) -> float:
        """Seconds to serve n simultaneous requests: full forwards of max_batch, then the rest."""
        full, rest = divmod(n, self.max_batch)
        return full * (self.fixed_s + self.per_request_s * self.max_batch) + (self.fixed_s + self.per_request_s * rest if rest else 0.0)

    def score_batch(self, requests: Sequence[ScoreRequest]) -> list[list[OptionScore]]:
        time.sleep(self.cost_s(len(requests)))
        if self.log_path:
            with open(self.log_path, "a") as f:
                f.write(f"{time.time():.6f} {len(requests)} {os.getpid()}\n")
        out = []
        for prompt, options in requests:
            row = []
            for o in options:
                lp = -12.0 * (zlib.crc32(f"{prompt}\x00{o}".encode()) % 10_007) / 10_006
                n = max(1, len(o.split()))
                row.append(OptionScore(option=o, logprob_sum=lp, logprob_mean=lp / n, num_tokens=n))
            out.append(row)
        return out

    def score(self, prompt: str, options: Sequence[str]) -> list[OptionScore]:
        return self.score_batch([(prompt, list(options))])[0]

    def generate(self, prompt: str, params: GenerationParams) -> list[Generation]:
        raise NotImplementedError("the latency model only scores")

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        raise NotImplementedError("the latency model only scores")
