"""Per-token prompt log-probs for the Hugging Face engine: what an OpenAI-style server returns for ``echo``
with ``logprobs``, SayCan's scoring pattern over HTTP.

They take the option-scoring path (:mod:`groundplan.llm.hf_scoring`): texts that share a token prefix
are one request whose context is that prefix (prefix-cached) and whose options are the rest of each text,
packed after it. The context's own positions need their log-probs too, which plain key/values cannot
give, so a context computed this way is cached as a :class:`ScoredEntry` that also keeps each position's
log-prob and top tokens (in a prefix cache of its own, ``scored_cache``, so plain entries never shadow
them); since position j's log-probs depend only on tokens 0..j, a later text sharing m tokens with it
reuses them up to m, as it reuses the key/values, and pays only for its new tokens; when they are few
(a SayCan step's prompt after the previous step's), they run as the first rows of the options' forward, as
a warm ``score`` step's tail does, so a step's texts cost one pass over the weights.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch

from groundplan.core.errors import InvalidInputError
from groundplan.llm.base import PromptLogprobs
from groundplan.llm.hf_kv import KV
from groundplan.llm.hf_scoring import FUSE_TAIL_MAX, PackedScorer, Prepared
from groundplan.llm.hf_tokens import OptionPlan
from groundplan.llm.prefix_cache import CacheEntry, PrefixCache, common_prefix_len

#: most alternatives per position ``prompt_logprobs`` returns (the OpenAI API's limit for ``logprobs``)
TOP_LOGPROBS = 5
#: positions whose vocabulary logits are computed at once when a context needs all of them
_LOGIT_CHUNK = 256
#: tokens of a text that must agree for ``prompt_logprobs`` to score it with others as one request
_GROUP_KEY = 32
#: context tokens ``prompt_logprobs`` may pack again per text to reuse a cached context exactly
_PACK_SLACK = 32


@dataclass
class ScoredEntry(CacheEntry):
    """A prefix-cache entry that also holds, at every position j >= 1, log p(token j | tokens < j) and the
    ``TOP_LOGPROBS`` most likely tokens there (ids and log-probs); position 0 is unused. Kept in the
    engine's ``scored_cache`` for :meth:`EchoScorer.context_positions`."""

    token_lp: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.float32))
    top_ids: np.ndarray = field(default_factory=lambda: np.zeros((0, TOP_LOGPROBS), dtype=np.int64))
    top_lp: np.ndarray = field(default_factory=lambda: np.zeros((0, TOP_LOGPROBS), dtype=np.float32))

    def __post_init__(self) -> None:
        super().__post_init__()
        self.nbytes += self.token_lp.nbytes + self.top_ids.nbytes + self.top_lp.nbytes


@dataclass
class Positions:
    """A context's key/values, the raw logits of the token after it, and per position the log-prob of its
    own token and the top tokens (indexed by position; 0 unused). While ``pending`` > 0 its last ``pending``
    tokens have not run (they run in the options' forward) and ``last`` is None."""

    ctx: np.ndarray
    kv: KV
    last: torch.Tensor | None
    token_lp: np.ndarray
    top_ids: np.ndarray
    top_lp: np.ndarray
    pending: int = 0


class NextLogits:
    """The raw next-token logits after texts that ``prompt_logprobs`` scored with ``keep_next``, by the texts'
    token ids, until a ``generate`` of one token after the same text takes them (at most ``max_bytes``, the
    logits and the texts and ids kept with them counted; the oldest go first).

    An OpenAI-style client that scores ``prompt + option`` with ``echo`` asks for a token after it in the
    same request (lm-evaluation-harness sends ``max_tokens: 1``). The packed forward that gives the text's
    log-probs gives that token's logits too, at the text's last row, so the token needs no forward of its
    own: without this each text ran one more forward after its cached prompt, a whole pass over the weights
    for a token or two (what made the OpenAI route several times slower than the in-process step)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = int(max_bytes)
        self.entries: OrderedDict[bytes, tuple[torch.Tensor, str | None, int]] = OrderedDict()  # logits, text, bytes
        self.texts: dict[str, np.ndarray] = {}  # a kept text's token ids, while its logits are kept
        self.nbytes = 0
        self.lock = threading.Lock()

    def put(self, ids: np.ndarray, logits: torch.Tensor, text: str | None = None) -> None:
        """Keep ``logits`` after ``ids``; ``text``, the prompt those ids encode, lets the generate that
        follows find them without encoding the text again (:meth:`ids_of`)."""
        ids = np.asarray(ids, dtype=np.int64)
        key = ids.tobytes()
        with self.lock:
            if (old := self.entries.pop(key, None)) is not None:
                self._drop(old)
            size = logits.nbytes + (ids.nbytes + len(text) if text is not None else 0)
            self.entries[key] = (logits, text, size)
            if text is not None:
                self.texts[text] = ids
            self.nbytes += size
            while self.nbytes > self.max_bytes and self.entries:
                self._drop(self.entries.popitem(last=False)[1])

    def _drop(self, entry: tuple[torch.Tensor, str | None, int]) -> None:
        _, text, size = entry
        self.nbytes -= size
        if text is not None:
            self.texts.pop(text, None)

    def ids_of(self, text: str) -> np.ndarray | None:
        """The token ids of ``text`` where its next-token logits are kept, else None. Encoding is what a
        one-token generate after an echo request otherwise costs: a thousand-token text takes the tokenizer
        about 1.4 ms, 70 ms for a kitchen step's 51 texts, a tenth of the step."""
        with self.lock:
            return self.texts.get(text)

    def take(self, ids: np.ndarray) -> torch.Tensor | None:
        """The logits after ``ids``, removed (one generate uses them), or None."""
        with self.lock:
            entry = self.entries.pop(np.asarray(ids, dtype=np.int64).tobytes(), None)
            if entry is None:
                return None
            self._drop(entry)
            return entry[0]


class EchoScorer:
    """``prompt_logprobs`` over a :class:`~groundplan.llm.hf_scoring.PackedScorer` (its tokeniser,
    key/value context, counters and lock), a prefix cache of :class:`ScoredEntry` (``scored_cache``) and the
    next-token logits it keeps for a generate (``nexts``)."""

    def __init__(self, scorer: PackedScorer, scored_cache: PrefixCache, nexts: NextLogits) -> None:
        self.scorer = scorer
        self.scored_cache = scored_cache
        self.nexts = nexts

    def context_positions(self, ctx: np.ndarray, fuse: bool = False) -> Positions:
        """:meth:`~groundplan.llm.hf_kv.KVContext.context` that also gives each context position's log-prob and
        top tokens, reusing a :class:`ScoredEntry`'s up to the shared prefix: only the positions after it (and
        the one before, whose logits predict the first new token) run. With ``fuse``, when those are at most
        :data:`~groundplan.llm.hf_scoring.FUSE_TAIL_MAX` tokens after a cached prefix, they do not run here:
        the result is ``pending`` and they run as the first rows of the options' forward (as a warm ``score``
        step's tail does), which :meth:`finish_positions` completes. A context with nothing cached runs alone."""
        kvc, stats = self.scorer.kv, self.scorer.stats
        c = len(ctx)
        entry, m = self.scored_cache.lookup(ctx, prefer_shortest=True)
        scored = isinstance(entry, ScoredEntry)
        if scored and m == c == len(entry):
            return Positions(ctx, entry.kv, entry.last_logits, entry.token_lp, entry.top_ids, entry.top_lp)
        start = max(min(m, c) - 1, 0) if scored else 0
        kv = kvc.empty_buffers(c + kvc.max_pack_tokens)
        token_lp = np.zeros(c, dtype=np.float32)
        top_ids = np.zeros((c, TOP_LOGPROBS), dtype=np.int64)
        top_lp = np.zeros((c, TOP_LOGPROBS), dtype=np.float32)
        if start > 0:
            for (k, v), (ek, ev) in zip(kv, entry.kv):
                k[:, :, :start] = ek[:, :, :start]
                v[:, :, :start] = ev[:, :, :start]
            token_lp[:start + 1] = entry.token_lp[:start + 1]
            top_ids[:start + 1] = entry.top_ids[:start + 1]
            top_lp[:start + 1] = entry.top_lp[:start + 1]
            if fuse and c - start <= FUSE_TAIL_MAX:
                return Positions(ctx, kv, None, token_lp, top_ids, top_lp, pending=c - start)
        ids = torch.as_tensor(ctx[start:], device=kvc.device).unsqueeze(0)
        positions = torch.arange(start, c, device=kvc.device).unsqueeze(0)
        cache = kvc.new_cache(kv, start)
        parts = kvc.head()
        if parts is not None:
            body, head = parts
            hidden = body(input_ids=ids, position_ids=positions, past_key_values=cache, use_cache=True).last_hidden_state[0]
        else:
            logits_all = kvc.model(input_ids=ids, position_ids=positions, past_key_values=cache, use_cache=True).logits[0]
        last = None
        for a in range(0, c - start, _LOGIT_CHUNK):
            b = min(a + _LOGIT_CHUNK, c - start)
            logits = kvc.head_logits(head, hidden[a:b]) if parts is not None else logits_all[a:b].float()
            if b == c - start:
                last = logits[-1].clone()
            self._fill(ctx, start + a, logits[:b - a if b < c - start else b - a - 1], token_lp, top_ids, top_lp)
        stats.forward_tokens += c - start
        stats.logit_positions += c - start
        kv = kvc.buffers(cache)
        self.scored_cache.insert(ScoredEntry(tokens=np.array(ctx), kv=kv, last_logits=last, token_lp=token_lp,
                                             top_ids=top_ids, top_lp=top_lp))
        return Positions(ctx, kv, last, token_lp, top_ids, top_lp)

    def finish_positions(self, pos: Positions, pr: Prepared) -> None:
        """Complete a ``pending`` :class:`Positions` from the options' forward that ran its tail
        (``pr.tail_logits``: row i predicts the token after context position ``start + i``) and cache it."""
        self._fill(pos.ctx, len(pos.ctx) - pos.pending, pr.tail_logits[:-1], pos.token_lp, pos.top_ids, pos.top_lp)
        pos.kv, pos.last, pos.pending = pr.kv, pr.tail_logits[-1].clone(), 0
        pr.tail_logits = None
        self.scored_cache.insert(ScoredEntry(tokens=np.array(pos.ctx), kv=pos.kv, last_logits=pos.last,
                                             token_lp=pos.token_lp, top_ids=pos.top_ids, top_lp=pos.top_lp))

    @staticmethod
    def _fill(ctx: np.ndarray, at: int, logits: torch.Tensor, token_lp: np.ndarray, top_ids: np.ndarray,
              top_lp: np.ndarray) -> None:
        """Positions ``at + 1 ...`` of the arrays from ``logits`` (row i: the logits after context position
        ``at + i``): the log-prob of the context's own token there and the top tokens."""
        rows = len(logits)
        if rows <= 0:
            return
        lp = torch.log_softmax(logits.float(), dim=-1)
        where = slice(at + 1, at + 1 + rows)
        targets = torch.as_tensor(ctx[where], device=lp.device)
        token_lp[where] = lp.gather(1, targets.unsqueeze(1)).squeeze(1).cpu().numpy()
        tv, ti = lp.topk(TOP_LOGPROBS, dim=-1)
        top_ids[where], top_lp[where] = ti.cpu().numpy(), tv.cpu().numpy()

    @torch.inference_mode()
    def prompt_logprobs(self, prompts: Sequence[str | Sequence[int]], top_k: int = 0,
                        keep_next: bool = False) -> list[PromptLogprobs]:
        """Every token of each prompt (a text, or token ids) with its log-prob given the tokens before it
        (None for the first) and the ``top_k`` most likely tokens at each position: the OpenAI API's
        ``echo`` with ``logprobs``, which SayCan's public demo scored options with.

        Computed as option scoring is (module doc): prompts whose first tokens agree are one request whose
        context is their shared token prefix, from the prefix cache, with each prompt's remaining tokens
        packed after it as an option; the context's own positions come from a cached
        :class:`ScoredEntry` where one shares the prefix. So scoring ``prompt + option`` for every option,
        one text each, costs about what ``score`` costs, not one full forward per text; the
        log-probs equal a full forward's within float32 rounding (~1e-5). ``keep_next``: each text's
        next-token logits, from the same forward, are kept for a one-token generate (:class:`NextLogits`)."""
        if not 0 <= int(top_k) <= TOP_LOGPROBS:
            raise InvalidInputError(f"top_k must be between 0 and {TOP_LOGPROBS}, got {top_k}")
        tokens = self.scorer.tokens
        encoded = tokens.prompts_tokens(prompts)
        lps: list[list[float | None]] = [[None] for _ in encoded]
        tops: list[list[tuple[tuple[str, float], ...]]] = [[()] for _ in encoded]
        names: list[list[str] | None] = [None] * len(encoded)  # each token's text
        groups: dict[bytes, list[int]] = {}
        for i, (_, ids, _) in enumerate(encoded):
            if len(ids) > 1:
                groups.setdefault(ids[:min(_GROUP_KEY, len(ids) - 1)].tobytes(), []).append(i)
        with self.scorer.lock:
            for members in groups.values():
                seqs = [encoded[i][1] for i in members]
                c = self.group_context(seqs)
                ctx = seqs[0][:c]
                pos = self.context_positions(ctx, fuse=self.scorer.fuse_tail)
                plans = [OptionPlan(s[c:], 0) for s in seqs]
                if pos.pending:  # the context's tail runs as the first rows of the options' forward
                    pr = Prepared([""] * len(seqs), plans, pos.kv, c, None, ctx, pos.pending, keep_tail=True)
                else:
                    pr = Prepared([""] * len(seqs), plans, pos.kv, c, torch.log_softmax(pos.last, dim=-1))
                tail_lps, tail_tops, after = self.scorer.packed(pr, TOP_LOGPROBS if top_k else 0, keep_next)
                if pos.pending:
                    self.finish_positions(pos, pr)
                ctx_lp, ctx_ids, ctx_top = pos.token_lp, pos.top_ids, pos.top_lp
                for i, row in zip(members, after):
                    if row is not None:
                        self.nexts.put(encoded[i][1], row.clone(), prompts[i] if isinstance(prompts[i], str) else None)
                shared_lp = [float(v) for v in ctx_lp[1:c]]  # the context's positions, once for all its texts
                shared_top = [self.top(ctx_ids[j], ctx_top[j], top_k) for j in range(1, c)] if top_k else []
                shared_names = [tokens.token_text(t) for t in ctx.tolist()]
                for i, tl, tt in zip(members, tail_lps, tail_tops):
                    names[i] = shared_names + [tokens.token_text(t) for t in encoded[i][1][c:].tolist()]
                    lps[i] += shared_lp + list(tl)
                    if top_k:
                        tops[i] += shared_top
                        tops[i] += [self.top(ids_, vals, top_k) for ids_, vals in tt]
                    else:
                        tops[i] += [()] * (len(encoded[i][1]) - 1)
            self.scorer.stats.prompt_logprob_texts += len(encoded)
        return [PromptLogprobs(text=text, token_ids=tuple(ids.tolist()),
                               tokens=tuple(name if name is not None else map(tokens.token_text, ids.tolist())),
                               offsets=tuple(offs), logprobs=tuple(lp), top=tuple(top))
                for (text, ids, offs), lp, top, name in zip(encoded, lps, tops, names)]

    def group_context(self, seqs: list[np.ndarray]) -> int:
        """How many leading tokens of a group of texts to treat as their shared context: all they share
        (leaving each at least one token to pack), or, when a cached :class:`ScoredEntry` already holds
        all but a few of those, just what it holds, so the context is an exact cache hit (no forward, no
        copy) and the few others are packed with each text. A lone ``prompt + option`` text, the
        OpenAI-style client's one request per option, thereby reuses the prompt an earlier option's text
        left in the cache, as ``score`` reuses it for every option."""
        c = min(len(s) for s in seqs) - 1
        for s in seqs[1:]:
            c = min(c, common_prefix_len(seqs[0], s))
        entry, m = self.scored_cache.lookup(seqs[0][:c], prefer_shortest=True)
        if isinstance(entry, ScoredEntry) and 1 <= m < c and (c - m) * max(len(seqs) - 1, 1) <= _PACK_SLACK:
            return m
        return c

    def top(self, ids: np.ndarray, values: np.ndarray, k: int) -> tuple[tuple[str, float], ...]:
        """The first ``k`` (token text, log-prob) pairs of a position's most likely tokens."""
        tokens = self.scorer.tokens
        return tuple((tokens.token_text(int(i)), float(v)) for i, v in zip(ids[:k], values[:k]))
