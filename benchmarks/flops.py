"""The work a causal LM's forwards do, and the hardware's matmul peak to set it against.

A benchmark that says how close a scorer runs to the machine needs two numbers measured in the same process:
the FLOPs its forwards performed and the best FLOP/s a plain matmul reaches here. :class:`ForwardClock` counts
the first from the forwards' own arguments (hooks on the model, so the scorer under test is unchanged), and
:func:`matmul_flops` times the second.

The linear layers' FLOPs are 2 x parameters x rows (Kaplan et al. 2020, section 2.1), split so that no row is
over-counted: every input row runs the body (every weight but the token embedding and the output head), and
only the rows whose logits are computed (``logits_to_keep``) run the head; the embedding is a lookup. The
attention products are 4 x query rows x key columns x head_dim x heads x layers, dense over the mask, as the
kernel computes them.
"""
from __future__ import annotations

import time
from typing import Any

import torch


def matmul_flops(dtype: torch.dtype, device: str, seconds: float = 2.0) -> float:
    """Best sustained FLOP/s of a square matmul on this machine (the 'FLOP limit')."""
    best = 0.0
    for n in (512, 1024, 2048):
        a = torch.randn(n, n, dtype=dtype, device=device)
        b = torch.randn(n, n, dtype=dtype, device=device)
        a @ b
        reps, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds / 3:
            a @ b
            reps += 1
        if device == "cuda":
            torch.cuda.synchronize()
        best = max(best, 2 * n**3 * reps / (time.perf_counter() - t0))
    return best


def model_shape(model: Any) -> dict[str, int]:
    """What a FLOP count needs: the decoder's weights without the embedding and the LM head (``body``), layers,
    attention width (heads x head_dim), hidden size and vocabulary."""
    cfg = model.config.get_text_config(decoder=True)
    embed = model.get_input_embeddings().weight.numel()
    head = model.get_output_embeddings().weight
    tied = head.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    body = sum(p.numel() for p in model.parameters()) - embed - (0 if tied else head.numel())
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    return {"body": int(body), "layers": int(cfg.num_hidden_layers), "attn": int(cfg.num_attention_heads * head_dim),
            "hidden": int(cfg.hidden_size), "vocab": int(cfg.vocab_size)}


def linear_flops(shape: dict[str, int], rows: float, logit_rows: float) -> float:
    """The linear layers' FLOPs: 2 x the body's parameters x input rows + 2 x the head's (hidden x vocabulary)
    x the rows whose logits are computed."""
    return 2.0 * (shape["body"] * rows + shape["hidden"] * shape["vocab"] * logit_rows)


def attention_flops(shape: dict[str, int], pairs: float) -> float:
    """The attention products' FLOPs for ``pairs`` (query row, key column) pairs: 4 x pairs x the attention
    width x layers (the scores and the weighted sum)."""
    return 4.0 * pairs * shape["attn"] * shape["layers"]


def logit_rows(logits_to_keep: Any, rows: int) -> int:
    """How many of a forward's ``rows`` get logits: transformers' ``logits_to_keep`` is 0 (all), a count of
    last rows, or the row indices."""
    if isinstance(logits_to_keep, torch.Tensor):
        return int(logits_to_keep.numel())
    if isinstance(logits_to_keep, int) and logits_to_keep > 0:
        return min(logits_to_keep, rows)
    return rows


class ForwardClock:
    """Wall time spent inside a causal LM's forwards, their input rows, logit rows and attention work
    (query rows x key columns), and the FLOPs those come to for this model."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.shape = model_shape(model)
        self.reset()
        self._t0 = 0.0
        model.register_forward_pre_hook(self._start, with_kwargs=True)
        model.register_forward_hook(self._stop)

    def reset(self) -> None:
        self.seconds, self.forwards, self.tokens, self.logit_rows, self.attention = 0.0, 0, 0, 0, 0

    @property
    def linear_flops(self) -> float:
        return linear_flops(self.shape, self.tokens, self.logit_rows)

    @property
    def attention_flops(self) -> float:
        return attention_flops(self.shape, self.attention)

    @property
    def flops(self) -> float:
        return self.linear_flops + self.attention_flops

    def _start(self, module: Any, args: tuple, kwargs: dict) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        cache = kwargs.get("past_key_values", kwargs.get("cache"))  # transformers' old name and its new one
        q = int(ids.shape[-1]) if ids is not None else 0
        batch = int(ids.shape[0]) if ids is not None and ids.dim() == 2 else 1
        past = int(cache.get_seq_length()) if cache is not None else 0
        self.tokens += batch * q
        self.logit_rows += batch * logit_rows(kwargs.get("logits_to_keep", 0), q)
        self.attention += batch * q * (past + q)  # query rows x key columns of this forward
        self._t0 = time.perf_counter()

    def _stop(self, module: Any, args: tuple, out: Any) -> None:
        self.seconds += time.perf_counter() - self._t0
        self.forwards += 1
