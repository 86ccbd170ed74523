"""Several score requests at once for the Hugging Face engine: one padded forward, or a loop of packed ones,
whichever this device runs faster.

Several requests (``score_batch``, e.g. the scorer actor's batch from many episodes) can run as one
padded batch: row r holds request r's packed options (:mod:`groundplan.llm.hf_scoring`), its own cached
prefix is copied into the row's key/value slots (padding masked out), and one forward serves all rows;
vocabulary logits are computed only at the scored positions. That wins where one request leaves the
device idle (GPUs) and loses where one request already keeps it busy (a small CPU, where the copies and
padding cost more than the larger matmuls save), so ``batched_forward="auto"`` times both on the first
multi-request batches and keeps the faster per device (``chosen``).
"""
from __future__ import annotations

import logging
import time
from typing import Sequence

import numpy as np
import torch

from groundplan.core.errors import InvalidInputError
from groundplan.llm.base import OptionScore, ScoreRequest
from groundplan.llm.hf_scoring import PackedScorer, Prepared, option_score
from groundplan.llm.hf_tree import TreePack

log = logging.getLogger(__name__)

BATCHED_MODES = ("auto", "on", "off")


def check_batch_options(batched_forward: str, max_batch_rows: int) -> None:
    """Refuse a layout mode or row bound :class:`BatchScorer` cannot use (the engine asks before it loads
    a model, so a bad option costs no load)."""
    if batched_forward not in BATCHED_MODES:
        raise InvalidInputError(f"batched_forward must be one of {', '.join(BATCHED_MODES)}, got {batched_forward!r}")
    if max_batch_rows < 1:
        raise InvalidInputError("max_batch_rows must be at least 1")


class BatchScorer:
    """``score_batch`` over a :class:`~groundplan.llm.hf_scoring.PackedScorer`.

    Args:
        scorer: the one-request scorer (its tokeniser, key/value context, counters and lock are shared).
        batched_forward: ``"on"`` (padded), ``"off"`` (a loop of packed ``score`` calls), or ``"auto"``:
            time both on the first multi-request batches and keep the faster on this device.
        max_batch_rows: most requests in one padded forward (bounds the key/value copy's memory).
    """

    def __init__(self, scorer: PackedScorer, batched_forward: str = "auto", max_batch_rows: int = 16) -> None:
        check_batch_options(batched_forward, max_batch_rows)
        self.scorer = scorer
        self.batched_forward = batched_forward
        self.max_batch_rows = int(max_batch_rows)
        #: "padded" or "loop" once chosen ("on"/"off" choose at once; "auto" after timing both)
        self.chosen: str | None = {"on": "padded", "off": "loop"}.get(batched_forward)
        self.trial_s: dict[str, list[float]] = {"padded": [], "loop": []}

    def score_padded(self, prepared: list[Prepared], packs: list[TreePack]) -> list[list[list[float]]]:
        """Token log-probs of several requests in one forward: row r = request r's options packed as one
        token tree after its own cached prefix (copied into the row's first ``past_len`` key/value slots;
        the slots up to the longest prefix are padding that no query sees). Each option token sees its own
        request's prefix and its own ancestors in the tree, at the positions a lone forward would use, so
        each row computes what :meth:`PackedScorer.score_packed` computes for that request. ``packs[r]``:
        request r's options as one tree (:meth:`PackedScorer.pack` of all of them)."""
        kvc, stats = self.scorer.kv, self.scorer.stats
        body, head = kvc.head()  # type: ignore[misc]
        rows = len(prepared)
        longest = max(pr.past_len for pr in prepared)
        width = max(pack.rows for pack in packs)
        ids = np.zeros((rows, width), dtype=np.int64)
        pos = np.zeros((rows, width), dtype=np.int64)
        allowed = np.zeros((rows, width, longest + width), dtype=bool)
        keep_rows, keep_cols, picks, targets, owners = [], [], [], [], []
        token_lps = [self.scorer.first_token_lps(pr) for pr in prepared]
        for r, (pr, pack) in enumerate(zip(prepared, packs)):
            n, base = pack.rows, len(keep_rows)
            ids[r, :n] = pack.ids
            pos[r, :n] = pr.past_len + pack.depth
            keep_rows += [r] * len(pack.keep)
            keep_cols += pack.keep
            picks += [base + k for k in pack.pick]
            targets += pack.targets
            owners += [(r, i) for i in pack.owners]
            allowed[r, :n, :pr.past_len] = True
            allowed[r, :n, longest:longest + n] = pack.visible
            allowed[r, n:, 0] = True  # padding queries see one column (their outputs are never read)
            stats.forward_tokens += n
        kv = []
        for layer in range(len(prepared[0].kv)):
            k0, v0 = prepared[0].kv[layer]
            k = k0.new_zeros(rows, k0.shape[1], longest + width, k0.shape[3])
            v = v0.new_zeros(rows, v0.shape[1], longest + width, v0.shape[3])
            for r, pr in enumerate(prepared):
                k[r, :, :pr.past_len] = pr.kv[layer][0][0, :, :pr.past_len]
                v[r, :, :pr.past_len] = pr.kv[layer][1][0, :, :pr.past_len]
            kv.append((k, v))
        mask = torch.from_numpy(allowed).to(kvc.device)[:, None]
        if not kvc.bool_mask:
            dtype = kvc.model.dtype
            mask = torch.zeros(mask.shape, dtype=dtype, device=kvc.device).masked_fill(~mask, torch.finfo(dtype).min)
        if targets:
            out = body(input_ids=torch.as_tensor(ids, device=kvc.device), position_ids=torch.as_tensor(pos, device=kvc.device),
                       attention_mask=mask, past_key_values=kvc.new_cache(kv, longest), use_cache=True)
            hidden = out.last_hidden_state[torch.as_tensor(keep_rows, device=kvc.device), torch.as_tensor(keep_cols, device=kvc.device)]
            lp = torch.log_softmax(kvc.head_logits(head, hidden), dim=-1)
            picked = lp[torch.as_tensor(picks, device=lp.device), torch.as_tensor(targets, device=lp.device)].tolist()
            for (r, i), value in zip(owners, picked):
                token_lps[r][i].append(value)
            stats.logit_positions += len(keep_rows)
        stats.padded_batches += 1
        return token_lps

    @torch.inference_mode()
    def score_batch(self, requests: Sequence[ScoreRequest], layout: str | None = None) -> list[list[OptionScore]]:
        """Several requests: a loop of packed ``score`` calls (each on its own longest cached prefix) or
        one padded forward per ``max_batch_rows`` requests (see the module doc), as ``batched_forward``
        chose for this device; ``layout`` ("loop" / "padded") forces one."""
        scorer, stats = self.scorer, self.scorer.stats
        requests = [(p, list(o)) for p, o in requests]
        mode = layout or self.chosen
        if layout not in (None, "loop", "padded"):
            raise InvalidInputError(f"layout must be 'loop' or 'padded', got {layout!r}")
        if len(requests) < 2 or mode == "loop" or scorer.kv.head() is None:
            return [scorer.score(p, o) for p, o in requests]
        with scorer.lock:
            trial = mode is None  # "auto" and not chosen yet: time this batch, whole, in the layout on trial
            if trial:
                mode = "padded" if len(self.trial_s["padded"]) <= len(self.trial_s["loop"]) else "loop"
            sync = torch.cuda.synchronize if scorer.kv.device.type == "cuda" else (lambda: None)
            sync()
            t0 = time.perf_counter()
            if mode == "loop":  # what the chosen loop runs: each request alone, its context tail fused
                out = [scorer.score(p, o) for p, o in requests]
            else:
                prepared = [scorer.prepare(p, o) for p, o in requests]
                token_lps: list[list[list[float]]] = [[] for _ in prepared]
                packs = [scorer.pack(pr, list(range(len(pr.plans)))) for pr in prepared]
                fits = [r for r, pack in enumerate(packs) if pack.rows <= scorer.kv.max_pack_tokens]
                for r in range(len(prepared)):
                    if r not in fits:
                        token_lps[r] = scorer.score_packed(prepared[r])
                for g in range(0, len(fits), self.max_batch_rows):
                    group = fits[g:g + self.max_batch_rows]
                    for r, lps in zip(group, self.score_padded([prepared[r] for r in group], [packs[r] for r in group])):
                        token_lps[r] = lps
                stats.score_calls += len(prepared)
                stats.options_scored += sum(len(pr.options) for pr in prepared)
                out = [[option_score(o, lps) for o, lps in zip(pr.options, row)] for pr, row in zip(prepared, token_lps)]
            sync()
            if trial:  # the whole batch, context forwards included, per scored option token: the same work either way
                tokens = sum(s.num_tokens for r in out for s in r)
                self.record_trial(mode, (time.perf_counter() - t0) / max(tokens, 1))
        return out

    def record_trial(self, mode: str, seconds_per_token: float, trials: int = 3) -> None:
        """``batched_forward="auto"``: keep the layout with the lower median time per option token
        after ``trials`` multi-request batches of each."""
        self.trial_s[mode].append(seconds_per_token)
        if all(len(v) >= trials for v in self.trial_s.values()):
            med = {k: float(np.median(v)) for k, v in self.trial_s.items()}
            self.chosen = min(med, key=med.get)  # type: ignore[arg-type]
            log.info("score_batch on %s: padded %.3g s/token, loop %.3g s/token -> %s", self.scorer.kv.device.type,
                     med["padded"], med["loop"], self.chosen)
