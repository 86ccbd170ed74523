"""Shared-prefix packed option scoring for the Hugging Face engine (one request: a prompt and its options).

SayCan's pattern is many short options after one long prompt. The prompt runs once, or not at all when
the prefix cache holds it (:meth:`~groundplan.llm.hf_kv.KVContext.context`); then all options are packed
after it into one sequence whose 4-D attention mask lets every option token see the prompt's cached
keys/values and the earlier tokens of its own option only (the layout of tree attention / SpecInfer).
Position ids restart after the prompt for every option, so each option is computed as in a lone
``prompt + option`` forward: the same function, though not bit-identically, since the other options in
the pack and the cached prefix's length change the float32 reduction order (differences of about 1e-5 in
log p, tested at 1e-3). Vocabulary logits are computed only at the positions that predict an option
token. :meth:`PackedScorer.score_reference` is the naive baseline (one full forward per option).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from groundplan.llm.base import OptionScore
from groundplan.llm.hf_kv import KV, EnginePart
from groundplan.llm.hf_tokens import OptionPlan

#: (ids, log-probs) of the most likely tokens at one scored position
Top = tuple[np.ndarray, np.ndarray]


@dataclass
class Prepared:
    """One score request after tokenisation and its context forward (or prefix-cache hit)."""

    options: list[str]
    plans: list[OptionPlan]
    kv: KV
    past_len: int
    last: torch.Tensor  # log-probs of the token after the context

    @property
    def pack_tokens(self) -> int:
        return sum(len(p.segment) for p in self.plans)


def option_score(option: str, lps: list[float]) -> OptionScore:
    """An option's score from its tokens' log-probs: their sum and mean (the per-token length normalisation)."""
    total = float(sum(lps))
    return OptionScore(option=option, logprob_sum=total, logprob_mean=total / len(lps), num_tokens=len(lps))


class PackedScorer(EnginePart):
    """Scores one request's options packed after its cached context (see the module doc).

    Built with the engine's parts (:class:`~groundplan.llm.hf_kv.EnginePart`).
    """

    def prepare(self, prompt: str, options: Sequence[str]) -> Prepared:
        """Tokenise a request at the option boundary and compute (or find cached) its shared context."""
        options = list(options)
        ctx, plans, _ = self.tokens.split(prompt, options)
        kv, last_logits = self.kv.context(ctx)
        return Prepared(options, plans, kv, len(ctx), torch.log_softmax(last_logits, dim=-1))

    def first_token_lps(self, pr: Prepared) -> list[list[float]]:
        """Each option's log-prob list, started with its first token when the context's cached
        next-token logits predict it (the option's first token directly follows the context)."""
        return [[float(pr.last[p.segment[0]])] if p.scored_from == 0 else [] for p in pr.plans]

    def chunks(self, plans: list[OptionPlan]) -> list[list[int]]:
        """Option indices grouped into packs of at most ``max_pack_tokens`` tokens (an option longer
        than that is a pack of its own)."""
        chunks, cur, size = [], [], 0
        for i, p in enumerate(plans):
            n = len(p.segment)
            if cur and size + n > self.kv.max_pack_tokens:
                chunks.append(cur)
                cur, size = [], 0
            cur.append(i)
            size += n
        if cur:
            chunks.append(cur)
        return chunks

    def score_packed(self, pr: Prepared) -> list[list[float]]:
        """Token log-probs of one request's options: packed after its context, one forward per chunk."""
        return self.packed(pr)[0]

    def packed(self, pr: Prepared, top_k: int = 0) -> tuple[list[list[float]], list[list[Top]]]:
        """:meth:`score_packed`, and with ``top_k`` > 0 also the ``top_k`` most likely tokens (ids,
        log-probs) at every scored position of every option."""
        kvc = self.kv
        plans, kv, past_len = pr.plans, pr.kv, pr.past_len
        token_lps = self.first_token_lps(pr)
        tops: list[list[Top]] = [[] for _ in plans]
        if top_k:
            first_v, first_i = pr.last.topk(top_k)
            first = (first_i.cpu().numpy(), first_v.float().cpu().numpy())
            for p, t in zip(plans, tops):
                if p.scored_from == 0:
                    t.append(first)
        for chunk in self.chunks(plans):
            ids, seg_ids, pos, keep, targets, owners = [], [], [], [], [], []
            start = 0
            for i in chunk:
                seg, s0 = plans[i].segment, plans[i].scored_from
                ids.append(seg)
                seg_ids.append(np.full(len(seg), i))
                pos.append(np.arange(past_len, past_len + len(seg)))
                for j in range(max(s0, 1), len(seg)):
                    keep.append(start + j - 1)
                    targets.append(seg[j])
                    owners.append(i)
                start += len(seg)
            seg_arr = np.concatenate(seg_ids)
            if keep:
                input_ids = torch.as_tensor(np.concatenate(ids), device=kvc.device).unsqueeze(0)
                position_ids = torch.as_tensor(np.concatenate(pos), device=kvc.device).unsqueeze(0)
                keep_t = torch.as_tensor(keep, device=kvc.device)
                out = kvc.model(
                    input_ids=input_ids,
                    position_ids=position_ids,
                    attention_mask=kvc.packed_mask(seg_arr, past_len),
                    past_key_values=kvc.new_cache(kv, past_len),
                    use_cache=True,
                    logits_to_keep=keep_t,
                )
                lp = torch.log_softmax(out.logits[0].float(), dim=-1)
                picked = lp.gather(1, torch.as_tensor(targets, device=lp.device).unsqueeze(1)).squeeze(1).tolist()
                for owner, value in zip(owners, picked):
                    token_lps[owner].append(value)
                if top_k:
                    tv, ti = lp.topk(top_k, dim=-1)
                    tv, ti = tv.cpu().numpy(), ti.cpu().numpy()
                    for row, owner in enumerate(owners):
                        tops[owner].append((ti[row], tv[row]))
                self.stats.forward_tokens += len(seg_arr)
                self.stats.logit_positions += len(keep)
        return token_lps, tops

    @torch.inference_mode()
    def score(self, prompt: str, options: Sequence[str]) -> list[OptionScore]:
        """Log-prob of each option as the continuation of ``prompt`` (shared-prefix, packed)."""
        options = list(options)
        with self.lock:
            pr = self.prepare(prompt, options)
            token_lps = self.score_packed(pr)
            self.stats.score_calls += 1
            self.stats.options_scored += len(options)
        return [option_score(o, lps) for o, lps in zip(options, token_lps)]

    @torch.inference_mode()
    def score_reference(self, prompt: str, options: Sequence[str]) -> list[OptionScore]:
        """The naive baseline: one full forward pass per ``prompt + option``, all logits computed.
        Used by tests (equivalence) and the scoring benchmark (speed-up)."""
        options = list(options)
        model, device = self.kv.model, self.kv.device
        with self.lock:
            _, plans, fulls = self.tokens.split(prompt, options, splice=False)
            results = []
            for opt, plan, full in zip(options, plans, fulls):
                first = len(full) - (len(plan.segment) - plan.scored_from)
                logits = model(input_ids=torch.as_tensor(full, device=device).unsqueeze(0)).logits[0]
                lp = torch.log_softmax(logits.float(), dim=-1)
                tgt = torch.as_tensor(full[first:], device=lp.device)
                results.append(option_score(opt, lp[first - 1 : len(full) - 1].gather(1, tgt.unsqueeze(1)).squeeze(1).tolist()))
        return results
