"""Shared-prefix option scoring on llama.cpp's sequence ids and KV copy, for the ``llamacpp`` backend.

The idea is llama.cpp's own (its parallel-decoding example): one KV cache holds several sequences, a
sequence can be copied to another id without copying its key/values (with a unified KV cache a copy only
tags the same cells with a second id), and one ``llama_decode`` batch can mix tokens of different ids, each
attending only to its own sequence; a batch token may belong to several ids at once. So the prompt is
evaluated once into sequence 0 (keeping the longest token prefix sequence 0 already held from the previous
call), every option gets its own id sharing the prompt's cells, and the options go into one batch as a
token tree (:mod:`groundplan.llm.hf_tree`): a prefix several options share is one batch token tagged with
all their ids, so it is evaluated once, with logits requested only where an option token is predicted; the
option ids are dropped afterwards. The token rule is groundplan's
(:mod:`groundplan.llm.hf_tokens`): an option's tokens are those of ``prompt + option`` whose byte span ends
past the prompt, conditioned on the joint encoding's own prompt tokens.

llama-cpp-python 0.3.36 names the KV calls ``llama_memory_seq_rm`` / ``llama_memory_seq_cp`` on the
context's ``llama_memory_t`` (the older ``llama_kv_self_*`` names are gone).
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from groundplan.core.errors import InfrastructureError, InvalidInputError
from groundplan.llm.hf_tokens import OptionPlan, splice_cut, split_at_boundary
from groundplan.llm.hf_tree import tree_chunks, tree_pack


@dataclass
class LlamaCppStats:
    """Counters that show whether the prefix reuse and the line splice do their job."""

    score_calls: int = 0
    options_scored: int = 0
    prompt_tokens_reused: int = 0
    prompt_tokens_evaluated: int = 0
    splice_fallbacks: int = 0
    decode_calls: int = 0
    #: option tokens evaluated in the batches after the prompt (token-tree rows)
    option_tokens_evaluated: int = 0


def log_softmax_at(rows: np.ndarray, targets: Sequence[int]) -> list[float]:
    """log-softmax of each row at its target token, without materialising the whole log-softmax."""
    if not len(targets):
        return []
    top = rows.max(axis=1, keepdims=True)
    lse = top[:, 0] + np.log(np.exp(rows - top).sum(axis=1))  # float32: ~1e-6, and 4x faster than float64
    return [float(rows[k, t] - lse[k]) for k, t in enumerate(targets)]


class LlamaCppTokens:
    """llama.cpp's tokenizer with groundplan's prompt/option boundary (:class:`groundplan.llm.hf_tokens.BoundaryTokenizer`).

    Args:
        lib: the ``llama_cpp`` module.
        model: a ``llama_cpp._internals.LlamaModel``.
        stats: the backend's counters.
    """

    def __init__(self, lib: Any, model: Any, stats: LlamaCppStats) -> None:
        self.lib, self.model, self.stats = lib, model, stats
        self._buf = ctypes.create_string_buffer(256)
        self._piece_len: dict[int, int] = {}

    def encode(self, text: str, bos: bool = True) -> list[int]:
        """``text``'s tokens; with ``bos`` llama.cpp adds BOS only if the GGUF asks for it, as transformers'
        ``add_special_tokens=True`` does for the hf backend (SmolLM2's GGUF: ``add_bos_token = false``)."""
        return list(self.model.tokenize(text.encode("utf-8"), bos, False)) if text else []

    def piece(self, token: int) -> bytes:
        """One token's bytes (empty for control tokens such as BOS)."""
        n = self.lib.llama_token_to_piece(self.model.vocab, int(token), self._buf, len(self._buf), 0, False)
        return self._buf.raw[:max(n, 0)]

    def ends(self, ids: Sequence[int]) -> np.ndarray:
        """Each token's byte end in the decoded text (the byte offsets transformers' offsets give in characters)."""
        lens = []
        for t in ids:
            n = self._piece_len.get(t)
            if n is None:
                n = self._piece_len[t] = len(self.piece(t))
            lens.append(n)
        return np.cumsum(np.asarray(lens, dtype=np.int64))

    def joint_encodings(self, prompt: str, options: Sequence[str], splice: bool = True) -> list[list[int]]:
        """Every ``prompt + option`` as llama.cpp encodes the joint text. With ``splice``, as the hf backend
        does for byte-level BPE: the prompt up to its last line is encoded once and only ``last line +
        option`` per option, checked against the first option's true joint encoding (a difference falls
        back to joint encodings, ``stats.splice_fallbacks``); tokenising 51 copies of a 3,000-character
        prompt would cost about 0.1 s per step."""
        joint = [prompt + o for o in options]
        cut = splice_cut(prompt, options) if splice else 0
        if cut:
            head = self.encode(prompt[:cut])
            spliced = [head + self.encode(t[cut:], bos=False) for t in joint]
            if spliced[0] == self.encode(joint[0]):
                return spliced
            self.stats.splice_fallbacks += 1
        return [self.encode(t) for t in joint]

    def split(self, prompt: str, options: Sequence[str], splice: bool = True) -> tuple[np.ndarray, list[OptionPlan], list[np.ndarray]]:
        """The context all options share, each option's plan after it, and each full joint encoding
        (the hf backend's :meth:`~groundplan.llm.hf_tokens.BoundaryTokenizer.split`, on llama.cpp's tokens)."""
        encodings = [(ids, self.ends(ids)) for ids in self.joint_encodings(prompt, options, splice)] if options else []
        return split_at_boundary(options, encodings, len(prompt.encode("utf-8")))


class SequenceKV:
    """One llama.cpp context with a unified KV cache of ``n_seq_max + 1`` sequence ids: sequence 0 holds
    the last prompt (reused by the next call as far as its tokens agree), ids 1.. are forked from it per
    option or sample and dropped after use (llama.cpp's sequence ids and KV copy)."""

    def __init__(self, lib: Any, internals: Any, model: Any, n_ctx: int, n_seq_max: int, n_threads: int,
                 stats: LlamaCppStats) -> None:
        params = lib.llama_context_default_params()
        params.n_ctx, params.n_batch, params.n_ubatch = n_ctx, n_ctx, min(512, n_ctx)
        params.n_seq_max, params.kv_unified, params.no_perf = n_seq_max + 1, True, True
        params.n_threads = params.n_threads_batch = n_threads
        self.lib, self.stats = lib, stats
        self.ctx = internals.LlamaContext(model=model, params=params, verbose=False)
        self.batch = internals.LlamaBatch(n_tokens=n_ctx, embd=0, n_seq_max=n_seq_max, verbose=False)
        self.n_ctx, self.n_seq_max, self.n_vocab = n_ctx, n_seq_max, model.n_vocab()
        self.cached: list[int] = []  # the tokens sequence 0 holds, at positions 0..

    def reset(self) -> None:
        """Empty the KV cache (every sequence)."""
        self.lib.llama_memory_clear(self.ctx.memory, True)
        self.cached = []

    def decode(self, tokens: Sequence[int], pos: Sequence[int], seqs: Sequence[int | Sequence[int]],
               wanted: Sequence[bool]) -> np.ndarray:
        """Evaluate one batch (a token's ``seqs`` entry: its sequence id, or the ids it belongs to); the
        logits of the ``wanted`` tokens, in batch order, as a view valid only until the next decode (read
        it at once)."""
        b = self.batch.batch
        for i, (t, p, s, w) in enumerate(zip(tokens, pos, seqs, wanted)):
            ids = (s,) if isinstance(s, (int, np.integer)) else s
            b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = t, p, len(ids), w
            for k, sid in enumerate(ids):
                b.seq_id[i][k] = sid
        b.n_tokens = len(tokens)
        rc = self.lib.llama_decode(self.ctx.ctx, b)
        self.stats.decode_calls += 1
        if rc != 0:
            raise InfrastructureError(f"llama_decode returned {rc} for a batch of {len(tokens)} tokens")
        n_out = int(sum(bool(w) for w in wanted))
        if not n_out:
            return np.zeros((0, self.n_vocab), dtype=np.float32)
        ptr = self.lib.llama_get_logits(self.ctx.ctx)
        return np.ctypeslib.as_array(ptr, shape=(n_out * self.n_vocab,)).reshape(n_out, self.n_vocab)

    def prompt(self, ctx: Sequence[int]) -> np.ndarray:
        """Put ``ctx`` in sequence 0, evaluating only what follows its common prefix with what sequence 0
        held (its last token is evaluated again for its logits); the next token's logits (a copy)."""
        ctx = list(ctx)
        if len(ctx) >= self.n_ctx:
            raise InvalidInputError(f"the prompt has {len(ctx)} tokens; n_ctx is {self.n_ctx}")
        keep = 0
        for a, b in zip(self.cached, ctx):
            if a != b:
                break
            keep += 1
        keep = min(keep, len(ctx) - 1)
        if not self.lib.llama_memory_seq_rm(self.ctx.memory, 0, keep, -1):
            self.reset()
            keep = 0
        self.cached = ctx[:keep]
        last = None
        for start in range(keep, len(ctx), self.n_ctx):
            chunk = ctx[start:start + self.n_ctx]
            wanted = [False] * len(chunk)
            wanted[-1] = start + len(chunk) == len(ctx)
            rows = self.decode(chunk, range(start, start + len(chunk)), [0] * len(chunk), wanted)
            if len(rows):
                last = rows[-1].copy()
        self.cached = ctx
        self.stats.prompt_tokens_reused += keep
        self.stats.prompt_tokens_evaluated += len(ctx) - keep
        assert last is not None
        return last

    def fork(self, n: int) -> list[int]:
        """Sequence ids 1..n sharing sequence 0's cells."""
        ids = list(range(1, n + 1))
        for s in ids:
            self.lib.llama_memory_seq_cp(self.ctx.memory, 0, s, -1, -1)
        return ids

    def drop(self, ids: Sequence[int]) -> None:
        """Remove forked sequences (the cells sequence 0 shares stay)."""
        for s in ids:
            self.lib.llama_memory_seq_rm(self.ctx.memory, s, -1, -1)


def score_plans(kv: SequenceKV, ctx: Sequence[int], plans: Sequence[OptionPlan], share: bool = True) -> list[list[float]]:
    """Token log-probs of every option: the context once into sequence 0, then each chunk of options (at
    most ``n_seq_max``) as forked sequences in one batch holding their token tree, positions continuing
    after the context. A tree row is evaluated only where a read row attends to it (an option's last token
    is not, unless it begins another option); an option's first token is read from the context's last
    logits. ``share=False`` gives each option a branch of its own (the flat layout)."""
    last = kv.prompt(ctx)
    top = last.max()
    lse_last = float(top + np.log(np.exp(last - top).sum()))
    lps = [[float(last[p.segment[0]]) - lse_last] if p.scored_from == 0 else [] for p in plans]
    past, budget = len(ctx), kv.n_ctx - len(ctx)
    segments, scored_from = [p.segment for p in plans], [p.scored_from for p in plans]
    longest = max((len(s) - 1 for s in segments), default=0)
    if longest > budget:
        raise InvalidInputError(f"an option needs {longest} tokens after the prompt; n_ctx leaves {budget}")
    for chunk in tree_chunks(segments, budget, share, kv.n_seq_max):
        pack = tree_pack(segments, scored_from, chunk, ends=True, share=share)
        if not pack.keep:
            continue
        rows = np.flatnonzero(pack.visible[pack.keep].any(axis=0))  # the read rows and their ancestors
        on_path = pack.visible[pack.ends][:, rows]  # [option of the chunk, row]: the row lies on its path
        ids = kv.fork(len(chunk))
        kv.stats.option_tokens_evaluated += len(rows)
        try:
            seqs = [[ids[k] for k in np.flatnonzero(col)] for col in on_path.T]
            wanted = np.isin(rows, pack.keep)  # ascending, as ``keep``: the logits come back in its order
            logits = kv.decode(pack.ids[rows].tolist(), (past + pack.depth[rows]).tolist(), seqs, wanted.tolist())
            for owner, value in zip(pack.owners, log_softmax_at(logits[pack.pick], pack.targets)):
                lps[owner].append(value)
        finally:
            kv.drop(ids)
    return lps


def reference_plans(kv: SequenceKV, fulls: Sequence[Sequence[int]], plans: Sequence[OptionPlan]) -> list[list[float]]:
    """The naive baseline: each ``prompt + option`` evaluated whole from an empty cache, logits at every
    position that predicts an option token (what tests compare :func:`score_plans` with)."""
    out = []
    for full, p in zip(fulls, plans):
        kv.reset()
        first = len(full) - (len(p.segment) - p.scored_from)
        wanted = [first - 1 <= j < len(full) - 1 for j in range(len(full))]
        rows = kv.decode(list(full), range(len(full)), [0] * len(full), wanted)
        out.append(log_softmax_at(rows, list(full[first:])))
    kv.reset()
    return out
