"""Shared-prefix packed option scoring for the Hugging Face engine (one request: a prompt and its options).

SayCan's pattern is many short options after one long prompt. The prompt runs once, or not at all when
the prefix cache holds it (:meth:`~groundplan.llm.hf_kv.KVContext.context`); then all options are packed
after it into one sequence as a token tree (:mod:`groundplan.llm.hf_tree`: a prefix several options share
is one row), whose 4-D attention mask lets every row see the prompt's cached keys/values and its own
ancestors only (the layout of tree attention / SpecInfer). Position ids count a row's depth after the
prompt, so each option is computed as in a lone ``prompt + option`` forward: the same function, though not
bit-identically, since the other rows of the pack and the cached prefix's length change the float32
reduction order (differences of about 1e-5 in log p, tested at 1e-3). Vocabulary logits are computed only
at the rows that predict an option token, once a row however many options read it.
:meth:`PackedScorer.score_reference` is the naive baseline (one full forward per option).

One forward per step: when the prefix cache holds all of the prompt but a short tail (a SayCan step after
the previous one: the chosen skill and the next step number, ~10 tokens), the tail runs in the same forward
as the first pack of options, its rows first (causal among themselves), every option row seeing them
(``fuse_tail``). On a CPU each forward streams every weight once, so the tail's own forward cost as much
as a tenth of a warm step; its logits and keys/values are the same function as before (float reduction
order aside, as above).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from groundplan.llm.base import OptionScore
from groundplan.llm.hf_kv import KV, EnginePart
from groundplan.llm.hf_tokens import OptionPlan
from groundplan.llm.hf_tree import TreePack, tree_chunks, tree_pack

#: (ids, log-probs) of the most likely tokens at one scored position
Top = tuple[np.ndarray, np.ndarray]


@dataclass
class Prepared:
    """One score request after tokenisation and its context forward (or prefix-cache hit)."""

    options: list[str]
    plans: list[OptionPlan]
    kv: KV
    past_len: int
    last: torch.Tensor | None  # log-probs of the token after the context (None while ``pending`` runs)
    ctx: np.ndarray | None = None  # the context's tokens, kept while ``pending`` runs
    pending: int = 0  # context tokens not computed yet: they run with the first pack (``fuse_tail``)
    keep_tail: bool = False  # keep the raw logits of every pending row (``tail_logits``), not only the last
    tail_logits: torch.Tensor | None = None  # [pending, vocab] raw logits of the pending rows, with ``keep_tail``


def option_score(option: str, lps: list[float]) -> OptionScore:
    """An option's score from its tokens' log-probs: their sum and mean (the per-token length normalisation)."""
    total = float(sum(lps))
    return OptionScore(option=option, logprob_sum=total, logprob_mean=total / len(lps), num_tokens=len(lps))


#: the longest context tail computed in the options' forward (``fuse_tail``); a longer one (a cold prompt) runs
#: alone, on the model's causal path, whose attention skips the masked half
FUSE_TAIL_MAX = 64


class PackedScorer(EnginePart):
    """Scores one request's options packed after its cached context (see the module doc).

    Built with the engine's parts (:class:`~groundplan.llm.hf_kv.EnginePart`).
    """

    #: run a short uncached context tail in the first options' forward (one forward per warm step)
    fuse_tail: bool = True
    #: pack the options as a token tree, a shared prefix once (False: each option on its own branch, the flat
    #: layout; a benchmark's baseline)
    share_prefixes: bool = True

    def prepare(self, prompt: str, options: Sequence[str], fuse: bool = False) -> Prepared:
        """Tokenise a request at the option boundary and compute (or find cached) its shared context; with
        ``fuse``, a context that extends a cached prefix by at most :data:`FUSE_TAIL_MAX` tokens leaves them to
        :meth:`packed` (a context with nothing cached runs alone, so a cold step's scores stay those of a
        re-scored warm one, bit for bit)."""
        options = list(options)
        ctx, plans, _ = self.tokens.split(prompt, options)
        kv, m, last = self.kv.begin(ctx)
        if last is None and fuse and 0 < m and len(ctx) - m <= FUSE_TAIL_MAX:
            return Prepared(options, plans, kv, len(ctx), None, ctx, len(ctx) - m)
        if last is None:
            kv, last = self.kv.context(ctx)
        return Prepared(options, plans, kv, len(ctx), torch.log_softmax(last, dim=-1))

    def first_token_lps(self, pr: Prepared) -> list[list[float]]:
        """Each option's log-prob list, started with its first token when the context's cached
        next-token logits predict it (the option's first token directly follows the context)."""
        return [[float(pr.last[p.segment[0]])] if p.scored_from == 0 else [] for p in pr.plans]

    def chunks(self, plans: list[OptionPlan]) -> list[list[int]]:
        """Option indices grouped into token trees of at most ``max_pack_tokens`` rows (an option longer
        than that is a pack of its own)."""
        return tree_chunks([p.segment for p in plans], self.kv.max_pack_tokens, self.share_prefixes)

    def score_packed(self, pr: Prepared) -> list[list[float]]:
        """Token log-probs of one request's options: packed after its context, one forward per chunk."""
        return self.packed(pr)[0]

    def packed(self, pr: Prepared, top_k: int = 0,
               ends: bool = False) -> tuple[list[list[float]], list[list[Top]], list[torch.Tensor | None]]:
        """:meth:`score_packed`, and with ``top_k`` > 0 also the ``top_k`` most likely tokens (ids,
        log-probs) at every scored position of every option; with ``ends``, also the raw logits of the token
        after each option (computed in the same forward: one more row an option), else Nones."""
        plans = pr.plans
        token_lps: list[list[float]] = []
        tops: list[list[Top]] = [[] for _ in plans]
        after: list[torch.Tensor | None] = [None] * len(plans)
        chunks = self.chunks(plans) or [[]]
        for n, chunk in enumerate(chunks):
            pack = self.pack(pr, chunk, ends)
            tail = pr.pending if n == 0 else 0
            lp, end_logits = self.forward(pr, pack, tail) if (pack.keep or pack.ends or tail) else (None, None)
            if end_logits is not None:
                for i, row in zip(chunk, end_logits):
                    after[i] = row
            if n == 0:  # the context's next-token log-probs exist now: every option's first token
                token_lps = self.first_token_lps(pr)
                if top_k:
                    first_v, first_i = pr.last.topk(top_k)
                    first = (first_i.cpu().numpy(), first_v.float().cpu().numpy())
                    for p, t in zip(plans, tops):
                        if p.scored_from == 0:
                            t.append(first)
            if lp is None:
                continue
            pick = torch.as_tensor(pack.pick, device=lp.device)
            picked = lp[pick, torch.as_tensor(pack.targets, device=lp.device)].tolist()
            for owner, value in zip(pack.owners, picked):
                token_lps[owner].append(value)
            if top_k:
                tv, ti = lp.topk(top_k, dim=-1)
                tv, ti = tv.cpu().numpy(), ti.cpu().numpy()
                for row, owner in zip(pack.pick, pack.owners):
                    tops[owner].append((ti[row], tv[row]))
        return token_lps, tops, after

    def pack(self, pr: Prepared, chunk: list[int], ends: bool = False) -> TreePack:
        """The token tree of the options ``chunk`` after ``pr``'s context (with ``ends``, each option's
        last row too)."""
        return tree_pack([p.segment for p in pr.plans], [p.scored_from for p in pr.plans], chunk, ends,
                         self.share_prefixes)

    def forward(self, pr: Prepared, pack: TreePack, tail: int) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """Run one pack after the cached context; with ``tail`` > 0 the context's last ``tail`` tokens run
        first in the same forward (rows before the pack), which completes and caches the context and sets
        ``pr.last``; with ``pr.keep_tail`` it also sets ``pr.tail_logits`` (the raw logits of every tail row,
        which the echo path needs for the context's own positions) and leaves the caching to that caller.
        Returns the log-probs at the pack's ``keep`` rows (None when it scores none) and the raw logits at
        its ``ends`` rows (None when it has none)."""
        kvc = self.kv
        keep = pack.keep
        start = pr.past_len - tail
        ids, pos = [pack.ids], [pr.past_len + pack.depth]
        if tail:
            ids = [pr.ctx[start:], *ids]
            pos = [np.arange(start, pr.past_len), *pos]
        head = list(range(tail)) if tail and pr.keep_tail else [tail - 1] if tail else []
        rows = head + [tail + k for k in keep] + [tail + k for k in pack.ends]
        cache = kvc.new_cache(pr.kv, start)
        out = kvc.model(
            input_ids=torch.as_tensor(np.concatenate(ids), device=kvc.device).unsqueeze(0),
            position_ids=torch.as_tensor(np.concatenate(pos), device=kvc.device).unsqueeze(0),
            attention_mask=kvc.packed_mask(pack.visible, start, tail),
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=torch.as_tensor(rows, device=kvc.device),
        )
        logits = out.logits[0].float()
        self.stats.forward_tokens += tail + pack.rows
        self.stats.logit_positions += len(rows)
        if tail:
            last = logits[len(head) - 1].clone()  # cached: not a view that keeps every row's logits alive
            if pr.keep_tail:  # the caller caches the context, with its positions, in a cache of its own
                pr.tail_logits = logits[:len(head)]
                pr.kv = kvc.buffers(cache)
            else:
                pr.kv = kvc.finish(pr.ctx, cache, last)
            pr.last, pr.pending, pr.ctx = torch.log_softmax(last, dim=-1), 0, None
            logits = logits[len(head):]
        end_logits = logits[len(keep):] if pack.ends else None
        return (torch.log_softmax(logits[:len(keep)], dim=-1) if keep else None), end_logits

    @torch.inference_mode()
    def score(self, prompt: str, options: Sequence[str]) -> list[OptionScore]:
        """Log-prob of each option as the continuation of ``prompt`` (shared-prefix, packed)."""
        options = list(options)
        with self.lock:
            pr = self.prepare(prompt, options, fuse=self.fuse_tail)
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
