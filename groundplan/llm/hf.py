"""Hugging Face transformers backend: shared-prefix option scoring, prefix-cached generation.

Scoring (SayCan's pattern: many short options after one long prompt). The prompt runs once, or not
at all when the prefix cache holds it; then all options are packed after it into one sequence whose
4-D attention mask lets every option token see the prompt's cached keys/values and the earlier tokens
of its own option only (the layout of tree attention / SpecInfer). Position ids restart after the
prompt for every option, so each option is computed as in a lone ``prompt + option`` forward: the
same function, though not bit-identically, since the other options in the pack and the cached prefix's
length change the float32 reduction order (differences of about 1e-5 in log p, tested at 1e-3).
Vocabulary logits are computed only at the positions that predict an option token.

Several requests (``score_batch``, e.g. the scorer actor's batch from many episodes) can also run as
one padded batch: row r holds request r's packed options, its own cached prefix is copied into the
row's key/value slots (padding masked out), and one forward serves all rows; vocabulary logits are
computed only at the scored positions. That wins where one request leaves the device idle (GPUs) and
loses where one request already keeps it busy (a small CPU, where the copies and padding cost more
than the larger matmuls save), so ``batched_forward="auto"`` times both on the first multi-request
batches and keeps the faster per device (``batched_forward_chosen``).

Tokenisation at the boundary: an option's tokens are those it gets inside ``prompt + option``,
i.e. every token of the joint encoding whose character span ends past the prompt (a leading space
or a merge across the boundary included), conditioned on the joint encoding's own prompt tokens. For
byte-level BPE tokenizers the joint encodings are built by encoding the prompt once and only its last
line with each option (checked against one true joint encoding per call; see ``_joint_encodings``).

Prompt log-probs (``prompt_logprobs``: every token of a text with its log-prob, what an OpenAI-style
server returns for ``echo`` with ``logprobs``, SayCan's scoring pattern over HTTP) take the same path:
texts that share a token prefix are one request whose context is that prefix (prefix-cached) and whose
options are the rest of each text, packed after it. The context's own positions need their log-probs
too, which plain key/values cannot give, so a context computed this way is cached as a
:class:`_ScoredEntry` that also keeps each position's log-prob and top tokens (in a prefix cache of its
own, ``scored_cache``, with the same byte budget, so plain entries never shadow them); since position j's
log-probs depend only on tokens 0..j, a later text sharing m tokens with it reuses them up to m, as it
reuses the key/values, and pays only for its new tokens.
"""
from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch
from transformers.cache_utils import DynamicLayer

from groundplan.core.errors import InvalidInputError
from groundplan.llm.base import Generation, GenerationParams, OptionScore, PromptLogprobs, ScoreRequest
from groundplan.llm.embeddings import SentenceEmbedder
from groundplan.llm.loading import DEFAULT_EMBEDDER, DEFAULT_LLM, load_causal_lm
from groundplan.llm.prefix_cache import CacheEntry, PrefixCache, common_prefix_len

log = logging.getLogger(__name__)


@dataclass
class EngineStats:
    """Counters for benchmarks and the scorer actor's metrics."""

    score_calls: int = 0
    options_scored: int = 0
    forward_tokens: int = 0  # tokens run through the transformer (prompt remainder + options)
    logit_positions: int = 0  # positions at which vocabulary logits were computed
    padded_batches: int = 0  # score_batch calls served by one padded multi-request forward
    beam_searches: int = 0  # beam_candidates calls
    prompt_logprob_texts: int = 0  # texts given per-token log-probs (prompt_logprobs)
    beam_memo_hits: int = 0  # of which answered from the beam memo
    splice_fallbacks: int = 0  # score calls whose spliced encoding differed from the joint one (encoded jointly)


class _BufferLayer(DynamicLayer):
    """A key/value cache layer over preallocated [1, heads, capacity, head_dim] buffers.

    ``update`` writes the new keys/values in place after the first ``length`` positions and returns
    views, instead of ``torch.cat``-ing the whole cached prefix onto them as transformers'
    ``DynamicLayer`` does on every forward (which profiling showed to be ~20% of a SayCan step)."""

    is_sliding = False
    is_compileable = False

    def __init__(self, kbuf: torch.Tensor, vbuf: torch.Tensor, length: int) -> None:
        super().__init__()
        self.kbuf, self.vbuf, self.length = kbuf, vbuf, length
        self.dtype, self.device = kbuf.dtype, kbuf.device
        self.is_initialized = True
        self.keys, self.values = kbuf[:, :, :length], vbuf[:, :, :length]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        end = self.length + key_states.shape[-2]
        if end > self.kbuf.shape[-2]:  # out of headroom: grow once (a copy), then keep appending
            cap = max(end, 2 * self.kbuf.shape[-2])
            self.kbuf = _grow(self.kbuf, cap, self.length)
            self.vbuf = _grow(self.vbuf, cap, self.length)
        self.kbuf[:, :, self.length:end] = key_states
        self.vbuf[:, :, self.length:end] = value_states
        self.length = end
        self.keys, self.values = self.kbuf[:, :, :end], self.vbuf[:, :, :end]
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.length

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.length + query_length, 0

    def get_max_length(self) -> int:
        return -1


#: most alternatives per position ``prompt_logprobs`` returns (the OpenAI API's limit for ``logprobs``)
TOP_LOGPROBS = 5
#: positions whose vocabulary logits are computed at once when a context needs all of them
_LOGIT_CHUNK = 256
#: tokens of a text that must agree for ``prompt_logprobs`` to score it with others as one request
_GROUP_KEY = 32
#: context tokens ``prompt_logprobs`` may pack again per text to reuse a cached context exactly
_PACK_SLACK = 32


@dataclass
class _ScoredEntry(CacheEntry):
    """A prefix-cache entry that also holds, at every position j >= 1, log p(token j | tokens < j) and the
    ``TOP_LOGPROBS`` most likely tokens there (ids and log-probs); position 0 is unused. Kept in the
    engine's ``scored_cache`` for ``_context_positions``."""

    token_lp: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.float32))
    top_ids: np.ndarray = field(default_factory=lambda: np.zeros((0, TOP_LOGPROBS), dtype=np.int64))
    top_lp: np.ndarray = field(default_factory=lambda: np.zeros((0, TOP_LOGPROBS), dtype=np.float32))

    def __post_init__(self) -> None:
        super().__post_init__()
        self.nbytes += self.token_lp.nbytes + self.top_ids.nbytes + self.top_lp.nbytes


def _grow(buf: torch.Tensor, capacity: int, keep: int) -> torch.Tensor:
    new = buf.new_empty(buf.shape[0], buf.shape[1], capacity, buf.shape[3])
    new[:, :, :keep] = buf[:, :, :keep]
    return new


@dataclass
class _OptionPlan:
    segment: np.ndarray  # tokens after the shared context (context tail + option tokens)
    scored_from: int  # index in ``segment`` of the first option token


@dataclass
class _Prepared:
    """One score request after tokenisation and its context forward (or prefix-cache hit)."""

    options: list[str]
    plans: list[_OptionPlan]
    kv: list[tuple[torch.Tensor, torch.Tensor]]
    past_len: int
    last: torch.Tensor  # log-probs of the token after the context

    @property
    def pack_tokens(self) -> int:
        return sum(len(p.segment) for p in self.plans)


BATCHED_MODES = ("auto", "on", "off")


class HFLanguageModel:
    """The default :class:`~groundplan.llm.base.LanguageModel`, backed by transformers.

    Args:
        model: an embedded model name (``smollm2-135m-instruct``), a Hugging Face id or a local path.
        dtype: ``auto`` (bf16 on GPU, fp32 on CPU), ``float32``, ``bfloat16`` or ``float16``.
        device_map: passed to ``from_pretrained`` when a GPU is present (accelerate placement).
        embedder: sentence encoder for :meth:`embed`.
        prefix_cache_mb: byte budget of the cross-call prefix cache (LRU).
        max_pack_tokens: option tokens packed into one forward pass (bounds memory); also the longest
            row of a padded multi-request batch (longer requests are scored alone).
        batched_forward: ``score_batch`` of several requests as one padded forward: ``"on"``, ``"off"``
            (a loop of packed ``score`` calls), or ``"auto"``: time both on the first multi-request
            batches and keep the faster on this device.
        max_batch_rows: most requests in one padded forward (bounds the key/value copy's memory).
        beam_memo_size: diverse beam searches remembered by (prompt, parameters), LRU (0: none).
    """

    def __init__(
        self,
        model: str = DEFAULT_LLM,
        dtype: str = "auto",
        device_map: str | None = "auto",
        embedder: str = DEFAULT_EMBEDDER,
        prefix_cache_mb: int = 1024,
        max_pack_tokens: int = 512,
        batched_forward: str = "auto",
        max_batch_rows: int = 16,
        beam_memo_size: int = 20000,
    ) -> None:
        if max_pack_tokens < 1:
            raise InvalidInputError("max_pack_tokens must be at least 1")
        if batched_forward not in BATCHED_MODES:
            raise InvalidInputError(f"batched_forward must be one of {', '.join(BATCHED_MODES)}, got {batched_forward!r}")
        if max_batch_rows < 1:
            raise InvalidInputError("max_batch_rows must be at least 1")
        if beam_memo_size < 0:
            raise InvalidInputError("beam_memo_size must be >= 0 (0 disables the memo)")
        loaded = load_causal_lm(model, dtype=dtype, device_map=device_map)
        self.name = model
        self.model = loaded.model
        self.tokenizer = loaded.tokenizer
        self.device = self.model.get_input_embeddings().weight.device
        self.cache = PrefixCache(int(prefix_cache_mb) << 20)
        self.scored_cache = PrefixCache(int(prefix_cache_mb) << 20)  # _ScoredEntry only (prompt_logprobs)
        self.max_pack_tokens = int(max_pack_tokens)
        self.stats = EngineStats()
        self._embedder = SentenceEmbedder(embedder)
        self._lock = threading.RLock()
        self._bool_mask = self.model.config._attn_implementation == "sdpa"
        _add_sliding_window(self.model, self._head())
        self._special = set(self.tokenizer.all_special_ids)
        self._line_splice = _pretokenizes_by_regex(self.tokenizer)
        self._eos = {i for i in [self.tokenizer.eos_token_id] if i is not None}
        self.batched_forward = batched_forward
        self.max_batch_rows = int(max_batch_rows)
        #: "padded" or "loop" once chosen ("on"/"off" choose at once; "auto" after timing both)
        self.batched_forward_chosen: str | None = {"on": "padded", "off": "loop"}.get(batched_forward)
        self._trial_s: dict[str, list[float]] = {"padded": [], "loop": []}
        self.beam_memo_size = int(beam_memo_size)
        self._beam_memo: OrderedDict[bytes, list] = OrderedDict()
        self._token_texts: dict[int, str] = {}

    @property
    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    # ------------------------------------------------------------------ tokenisation
    def _encode(self, text: str) -> np.ndarray:
        return np.asarray(self.tokenizer(text, add_special_tokens=True).input_ids, dtype=np.int64)

    def _strip_appended(self, ids: list[int], offs: list[tuple[int, int]]) -> tuple[list[int], list[tuple[int, int]]]:
        """Drop trailing special tokens some tokenizers append (EOS): they are not the text's."""
        while len(ids) > 1 and ids[-1] in self._special and tuple(offs[-1]) == (0, 0):
            ids, offs = ids[:-1], offs[:-1]
        return ids, offs

    def _encoded(self, ids: Sequence[int], offs: Sequence[Sequence[int]], shift: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """(token ids, each token's character end + ``shift``) as arrays, appended special tokens dropped."""
        ids, offs = self._strip_appended(list(ids), [tuple(o) for o in offs])
        return np.asarray(ids, dtype=np.int64), np.asarray([e for _, e in offs], dtype=np.int64).reshape(-1) + shift

    def _joint_encodings(self, prompt: str, options: Sequence[str], splice: bool = True) -> list[tuple[np.ndarray, np.ndarray]]:
        """Token ids and each token's character end, of every ``prompt + option`` as the tokenizer
        encodes the joint text.

        Encoding 51 copies of a 3,000-character prompt costs tens of milliseconds of CPU per SayCan step,
        more than the step's whole forward on a GPU. So with ``splice`` the prompt is encoded once, cut at
        the start of its last line (a token boundary), and only ``last line + option`` is encoded per
        option, after the tokens the first option's joint encoding has before that line (the one full
        encoding a call makes). That equals the joint encoding when the tokenizer pre-tokenises by a regular expression
        (byte-level BPE: GPT-2, Llama 3, SmolLM2, Qwen), whose pieces never run from a newline into a
        line that starts with a non-space character, and merges stay inside a piece; so the splice is used
        only for such tokenizers (``_line_splice``) and such a last line. The first option's spliced
        encoding is also checked against its joint one on every call; a difference falls back to encoding
        every option jointly (``stats.splice_fallbacks``)."""
        joint = [prompt + o for o in options]
        cut = prompt.rfind("\n", 0, len(prompt) - 1) + 1
        if splice and self._line_splice and cut > 0 and not prompt[cut].isspace() and len(options) > 1:
            first = self.tokenizer(joint[0], add_special_tokens=True, return_offsets_mapping=True)
            k = _tokens_before(first["offset_mapping"], cut)
            if k is not None:
                ids0, ends0 = self._encoded(first["input_ids"], first["offset_mapping"])
                enc = self.tokenizer([t[cut:] for t in joint], add_special_tokens=False, return_offsets_mapping=True)
                spliced = []
                for ids, offs in zip(enc["input_ids"], enc["offset_mapping"]):
                    tail_ids, tail_ends = self._encoded(ids, offs, cut)
                    spliced.append((np.concatenate([ids0[:k], tail_ids]), np.concatenate([ends0[:k], tail_ends])))
                if np.array_equal(ids0, spliced[0][0]) and np.array_equal(ends0, spliced[0][1]):
                    return spliced
                self.stats.splice_fallbacks += 1
        enc = self.tokenizer(joint, add_special_tokens=True, return_offsets_mapping=True)
        return [self._encoded(ids, offs) for ids, offs in zip(enc["input_ids"], enc["offset_mapping"])]

    def _split(self, prompt: str, options: Sequence[str], splice: bool = True) -> tuple[np.ndarray, list[_OptionPlan], list[np.ndarray]]:
        """Tokenise ``prompt + option`` jointly and find each option's own tokens (see module doc).

        Returns the context shared by all options, each option's segment after it, and each option's
        full joint encoding (for the reference path, which encodes every option jointly: ``splice=False``)."""
        if not options:
            raise InvalidInputError("score() needs at least one option")
        plen = len(prompt)
        fulls, firsts = [], []
        for opt, (ids, ends) in zip(options, self._joint_encodings(prompt, options, splice=splice)):
            past = np.flatnonzero(ends > plen)
            first = int(past[0]) if len(past) else None
            if not opt or first is None:
                raise InvalidInputError(f"option {opt!r} adds no tokens to the prompt")
            if first == 0:
                raise InvalidInputError("the prompt is empty and the model has no BOS token to condition on")
            fulls.append(ids)
            firsts.append(first)
        shared = min(firsts)
        base = fulls[0][:shared]
        for f in fulls[1:]:
            neq = np.flatnonzero(f[:shared] != base)
            if len(neq):
                shared = int(neq[0])
                base = base[:shared]
        if shared == 0:
            raise InvalidInputError("the options share no prompt tokens to condition on")
        plans = [_OptionPlan(f[shared:], k - shared) for f, k in zip(fulls, firsts)]
        return base, plans, fulls

    # ------------------------------------------------------------------ forward helpers
    def _new_cache(self, kv: list[tuple[torch.Tensor, torch.Tensor]], length: int):
        """A transformers cache whose layers append in place into ``kv``'s buffers after ``length``."""
        from transformers import DynamicCache

        cache = DynamicCache(config=self.model.config)
        cache.layers = [_BufferLayer(k, v, length) for k, v in kv]
        return cache

    def _empty_buffers(self, capacity: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        cfg = self.model.config.get_text_config(decoder=True)
        heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        dtype = self.model.dtype
        out = []
        for layer in range(cfg.num_hidden_layers):
            device = self._layer_device(layer)
            shape = (1, heads, capacity, head_dim)
            out.append((torch.empty(shape, dtype=dtype, device=device), torch.empty(shape, dtype=dtype, device=device)))
        return out

    def _layer_device(self, layer: int) -> torch.device:
        """Where a decoder layer's cache lives (layers may sit on different GPUs under device_map)."""
        device_map = getattr(self.model, "hf_device_map", None) or {}
        for name, dev in device_map.items():
            if name.endswith(f"layers.{layer}"):
                return torch.device(f"cuda:{dev}" if isinstance(dev, int) else dev)
        return self.device

    def _context(self, ctx: np.ndarray) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], torch.Tensor]:
        """Key/values of ``ctx`` and the (raw) logits of the token after it, reusing the prefix cache.

        At least the last context token is recomputed unless an entry matches ``ctx`` exactly, since
        partial entries hold no logits at the match point."""
        entry, m = self.cache.lookup(ctx)
        if entry is not None and m == len(ctx) == len(entry):
            return entry.kv, entry.last_logits
        m = min(m, len(ctx) - 1)
        # fresh buffers with headroom for the option packs (or samples) that will follow this context
        kv = self._empty_buffers(len(ctx) + self.max_pack_tokens)
        if entry is not None and m > 0:
            for (k, v), (ek, ev) in zip(kv, entry.kv):
                k[:, :, :m] = ek[:, :, :m]
                v[:, :, :m] = ev[:, :, :m]
        else:
            m = 0
        new = torch.as_tensor(ctx[m:], device=self.device).unsqueeze(0)
        positions = torch.arange(m, len(ctx), device=self.device).unsqueeze(0)
        cache = self._new_cache(kv, m)
        out = self.model(input_ids=new, position_ids=positions, past_key_values=cache, use_cache=True, logits_to_keep=1)
        self.stats.forward_tokens += len(ctx) - m
        self.stats.logit_positions += 1
        kv = [(layer.kbuf, layer.vbuf) for layer in cache.layers]  # a layer may have grown its buffers
        last = out.logits[0, -1].float()
        self.cache.insert(CacheEntry(tokens=np.array(ctx), kv=kv, last_logits=last))
        return kv, last

    def _packed_mask(self, seg_ids: np.ndarray, past_len: int) -> torch.Tensor:
        """[1, 1, Q, past+Q] mask: all cached columns, plus causal attention within one's own segment."""
        q = len(seg_ids)
        idx = np.arange(q)
        own = (seg_ids[:, None] == seg_ids[None, :]) & (idx[None, :] <= idx[:, None])
        return self._mask_tensor(np.concatenate([np.ones((q, past_len), dtype=bool), own], axis=1))

    def _mask_tensor(self, allowed: np.ndarray) -> torch.Tensor:
        """A [Q, K] allowed-attention matrix as the model's [1, 1, Q, K] mask: boolean for SDPA,
        additive (0 / dtype min) for eager attention."""
        mask = torch.from_numpy(allowed).to(self.device)
        if not self._bool_mask:
            dtype = self.model.dtype
            mask = torch.zeros(allowed.shape, dtype=dtype, device=self.device).masked_fill(~mask, torch.finfo(dtype).min)
        return mask[None, None]

    def _chunks(self, plans: list[_OptionPlan]) -> list[list[int]]:
        chunks, cur, size = [], [], 0
        for i, p in enumerate(plans):
            n = len(p.segment)
            if cur and size + n > self.max_pack_tokens:
                chunks.append(cur)
                cur, size = [], 0
            cur.append(i)
            size += n
        if cur:
            chunks.append(cur)
        return chunks

    # ------------------------------------------------------------------ public API
    def _prepare(self, prompt: str, options: Sequence[str]) -> _Prepared:
        options = list(options)
        ctx, plans, _ = self._split(prompt, options)
        kv, last_logits = self._context(ctx)
        return _Prepared(options, plans, kv, len(ctx), torch.log_softmax(last_logits, dim=-1))

    def _first_token_lps(self, pr: _Prepared) -> list[list[float]]:
        """Each option's log-prob list, started with its first token when the context's cached
        next-token logits predict it (the option's first token directly follows the context)."""
        return [[float(pr.last[p.segment[0]])] if p.scored_from == 0 else [] for p in pr.plans]

    def _score_packed(self, pr: _Prepared) -> list[list[float]]:
        """Token log-probs of one request's options: packed after its context, one forward per chunk."""
        return self._packed(pr)[0]

    def _packed(self, pr: _Prepared, top_k: int = 0) -> tuple[list[list[float]], list[list[tuple[np.ndarray, np.ndarray]]]]:
        """:meth:`_score_packed`, and with ``top_k`` > 0 also the ``top_k`` most likely tokens (ids,
        log-probs) at every scored position of every option."""
        plans, kv, past_len = pr.plans, pr.kv, pr.past_len
        token_lps = self._first_token_lps(pr)
        tops: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in plans]
        if top_k:
            first_v, first_i = pr.last.topk(top_k)
            first = (first_i.cpu().numpy(), first_v.float().cpu().numpy())
            for p, t in zip(plans, tops):
                if p.scored_from == 0:
                    t.append(first)
        for chunk in self._chunks(plans):
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
                input_ids = torch.as_tensor(np.concatenate(ids), device=self.device).unsqueeze(0)
                position_ids = torch.as_tensor(np.concatenate(pos), device=self.device).unsqueeze(0)
                keep_t = torch.as_tensor(keep, device=self.device)
                out = self.model(
                    input_ids=input_ids,
                    position_ids=position_ids,
                    attention_mask=self._packed_mask(seg_arr, past_len),
                    past_key_values=self._new_cache(kv, past_len),
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

    def _head(self) -> tuple[torch.nn.Module, torch.nn.Module] | None:
        """(decoder body, LM head) for computing logits at chosen (row, position) pairs only."""
        body = getattr(self.model, getattr(self.model, "base_model_prefix", "model"), None)
        head = self.model.get_output_embeddings()
        if body is None or head is None or body is self.model:
            return None
        return body, head

    def _score_padded(self, prepared: list[_Prepared]) -> list[list[list[float]]]:
        """Token log-probs of several requests in one forward: row r = request r's options packed after
        its own cached prefix (copied into the row's first ``past_len`` key/value slots; the slots up to
        the longest prefix are padding that no query sees). Each option token sees its own request's
        prefix and the earlier tokens of its own option, at the positions a lone forward would use, so
        each row computes what :meth:`_score_packed` computes for that request."""
        body, head = self._head()  # type: ignore[misc]
        rows = len(prepared)
        longest = max(pr.past_len for pr in prepared)
        width = max(pr.pack_tokens for pr in prepared)
        ids = np.zeros((rows, width), dtype=np.int64)
        pos = np.zeros((rows, width), dtype=np.int64)
        allowed = np.zeros((rows, width, longest + width), dtype=bool)
        keep_rows, keep_cols, targets, owners = [], [], [], []
        token_lps = [self._first_token_lps(pr) for pr in prepared]
        for r, pr in enumerate(prepared):
            seg_ids, start = [], 0
            for i, plan in enumerate(pr.plans):
                seg, n = plan.segment, len(plan.segment)
                ids[r, start:start + n] = seg
                pos[r, start:start + n] = np.arange(pr.past_len, pr.past_len + n)
                seg_ids.append(np.full(n, i))
                for j in range(max(plan.scored_from, 1), n):
                    keep_rows.append(r)
                    keep_cols.append(start + j - 1)
                    targets.append(seg[j])
                    owners.append((r, i))
                start += n
            seg_arr = np.concatenate(seg_ids)
            idx = np.arange(start)
            allowed[r, :start, :pr.past_len] = True
            allowed[r, :start, longest:longest + start] = (seg_arr[:, None] == seg_arr[None, :]) & (idx[None, :] <= idx[:, None])
            allowed[r, start:, 0] = True  # padding queries see one column (their outputs are never read)
            self.stats.forward_tokens += start
        kv = []
        for layer in range(len(prepared[0].kv)):
            k0, v0 = prepared[0].kv[layer]
            k = k0.new_zeros(rows, k0.shape[1], longest + width, k0.shape[3])
            v = v0.new_zeros(rows, v0.shape[1], longest + width, v0.shape[3])
            for r, pr in enumerate(prepared):
                k[r, :, :pr.past_len] = pr.kv[layer][0][0, :, :pr.past_len]
                v[r, :, :pr.past_len] = pr.kv[layer][1][0, :, :pr.past_len]
            kv.append((k, v))
        mask = torch.from_numpy(allowed).to(self.device)[:, None]
        if not self._bool_mask:
            dtype = self.model.dtype
            mask = torch.zeros(mask.shape, dtype=dtype, device=self.device).masked_fill(~mask, torch.finfo(dtype).min)
        if targets:
            out = body(input_ids=torch.as_tensor(ids, device=self.device), position_ids=torch.as_tensor(pos, device=self.device),
                       attention_mask=mask, past_key_values=self._new_cache(kv, longest), use_cache=True)
            hidden = out.last_hidden_state[torch.as_tensor(keep_rows, device=self.device), torch.as_tensor(keep_cols, device=self.device)]
            logits = head(hidden).float()
            cap = getattr(self.model.config, "final_logit_softcapping", None)
            if cap:
                logits = torch.tanh(logits / cap) * cap
            lp = torch.log_softmax(logits, dim=-1)
            picked = lp.gather(1, torch.as_tensor(targets, device=lp.device).unsqueeze(1)).squeeze(1).tolist()
            for (r, i), value in zip(owners, picked):
                token_lps[r][i].append(value)
            self.stats.logit_positions += len(targets)
        self.stats.padded_batches += 1
        return token_lps

    @torch.inference_mode()
    def score(self, prompt: str, options: Sequence[str]) -> list[OptionScore]:
        """Log-prob of each option as the continuation of ``prompt`` (shared-prefix, packed)."""
        options = list(options)
        with self._lock:
            pr = self._prepare(prompt, options)
            token_lps = self._score_packed(pr)
            self.stats.score_calls += 1
            self.stats.options_scored += len(options)
        return [_option_score(o, lps) for o, lps in zip(options, token_lps)]

    @torch.inference_mode()
    def score_batch(self, requests: Sequence[ScoreRequest], layout: str | None = None) -> list[list[OptionScore]]:
        """Several requests: a loop of packed :meth:`score` calls (each on its own longest cached
        prefix) or one padded forward per ``max_batch_rows`` requests (see the module doc), as
        ``batched_forward`` chose for this device; ``layout`` ("loop" / "padded") forces one."""
        requests = [(p, list(o)) for p, o in requests]
        mode = layout or self.batched_forward_chosen
        if layout not in (None, "loop", "padded"):
            raise InvalidInputError(f"layout must be 'loop' or 'padded', got {layout!r}")
        if len(requests) < 2 or mode == "loop" or self._head() is None:
            return [self.score(p, o) for p, o in requests]
        with self._lock:
            prepared = [self._prepare(p, o) for p, o in requests]
            trial = mode is None  # "auto" and not chosen yet: time this batch's option forwards
            if trial:
                mode = "padded" if len(self._trial_s["padded"]) <= len(self._trial_s["loop"]) else "loop"
            sync = torch.cuda.synchronize if self.device.type == "cuda" else (lambda: None)
            sync()
            t0 = time.perf_counter()
            token_lps: list[list[list[float]]] = [[] for _ in prepared]
            if mode == "loop":
                token_lps = [self._score_packed(pr) for pr in prepared]
            else:
                fits = [r for r, pr in enumerate(prepared) if pr.pack_tokens <= self.max_pack_tokens]
                for r in range(len(prepared)):
                    if r not in fits:
                        token_lps[r] = self._score_packed(prepared[r])
                for g in range(0, len(fits), self.max_batch_rows):
                    group = fits[g:g + self.max_batch_rows]
                    for r, lps in zip(group, self._score_padded([prepared[r] for r in group])):
                        token_lps[r] = lps
            sync()
            if trial:
                self._record_trial(mode, (time.perf_counter() - t0) / sum(pr.pack_tokens for pr in prepared))
            self.stats.score_calls += len(prepared)
            self.stats.options_scored += sum(len(pr.options) for pr in prepared)
        return [[_option_score(o, lps) for o, lps in zip(pr.options, row)] for pr, row in zip(prepared, token_lps)]

    def _record_trial(self, mode: str, seconds_per_token: float, trials: int = 3) -> None:
        """``batched_forward="auto"``: keep the layout with the lower median time per option token
        after ``trials`` multi-request batches of each."""
        self._trial_s[mode].append(seconds_per_token)
        if all(len(v) >= trials for v in self._trial_s.values()):
            med = {k: float(np.median(v)) for k, v in self._trial_s.items()}
            self.batched_forward_chosen = min(med, key=med.get)  # type: ignore[arg-type]
            log.info("score_batch on %s: padded %.3g s/token, loop %.3g s/token -> %s", self.device.type,
                     med["padded"], med["loop"], self.batched_forward_chosen)

    @torch.inference_mode()
    def score_reference(self, prompt: str, options: Sequence[str]) -> list[OptionScore]:
        """The naive baseline: one full forward pass per ``prompt + option``, all logits computed.
        Used by tests (equivalence) and the scoring benchmark (speed-up)."""
        options = list(options)
        with self._lock:
            _, plans, fulls = self._split(prompt, options, splice=False)
            results = []
            for opt, plan, full in zip(options, plans, fulls):
                first = len(full) - (len(plan.segment) - plan.scored_from)
                logits = self.model(input_ids=torch.as_tensor(full, device=self.device).unsqueeze(0)).logits[0]
                lp = torch.log_softmax(logits.float(), dim=-1)
                tgt = torch.as_tensor(full[first:], device=lp.device)
                results.append(_option_score(opt, lp[first - 1 : len(full) - 1].gather(1, tgt.unsqueeze(1)).squeeze(1).tolist()))
        return results

    # ------------------------------------------------------------------ prompt log-probs
    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """How many tokens each text encodes to (special tokens the tokenizer adds included)."""
        return [len(self._encode(t)) for t in texts]

    def _token_text(self, token_id: int) -> str:
        text = self._token_texts.get(token_id)
        if text is None:
            text = self._token_texts[token_id] = self.tokenizer.decode([token_id])
        return text

    def _prompt_tokens(self, prompt: str | Sequence[int]) -> tuple[str, np.ndarray, list[int]]:
        """(text, token ids, each token's character offset in the text) of a text or of token ids."""
        if isinstance(prompt, str):
            if not prompt:
                raise InvalidInputError("a prompt is empty")
            enc = self.tokenizer(prompt, add_special_tokens=True, return_offsets_mapping=True)
            ids, offs = list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]]
            ids, offs = self._strip_appended(ids, offs)
            return prompt, np.asarray(ids, dtype=np.int64), [int(o[0]) for o in offs]
        ids = [int(i) for i in prompt]
        if not ids:
            raise InvalidInputError("a prompt is an empty list of token ids")
        vocab = len(self.tokenizer)
        bad = [i for i in ids if not 0 <= i < vocab]
        if bad:
            raise InvalidInputError(f"token id {bad[0]} is not in this model's vocabulary (0..{vocab - 1})")
        text = self.tokenizer.decode(ids)
        enc = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        if list(enc["input_ids"]) == ids:
            offsets = [int(o[0]) for o in enc["offset_mapping"]]
        else:  # ids the tokenizer would not produce for this text: offsets by the tokens' own texts
            offsets = list(np.minimum(np.cumsum([0] + [len(self._token_text(i)) for i in ids[:-1]]), len(text)))
        return text, np.asarray(ids, dtype=np.int64), [int(o) for o in offsets]

    def _context_positions(self, ctx: np.ndarray) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], torch.Tensor,
                                                           np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`_context` that also returns each context position's log-prob and top tokens (arrays
        indexed by position; 0 unused), reusing a :class:`_ScoredEntry`'s up to the shared prefix: only
        the positions after it (and the one before, whose logits predict the first new token) run."""
        c = len(ctx)
        entry, m = self.scored_cache.lookup(ctx, prefer_shortest=True)
        scored = isinstance(entry, _ScoredEntry)
        if scored and m == c == len(entry):
            return entry.kv, entry.last_logits, entry.token_lp, entry.top_ids, entry.top_lp
        start = max(min(m, c) - 1, 0) if scored else 0
        kv = self._empty_buffers(c + self.max_pack_tokens)
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
        ids = torch.as_tensor(ctx[start:], device=self.device).unsqueeze(0)
        positions = torch.arange(start, c, device=self.device).unsqueeze(0)
        cache = self._new_cache(kv, start)
        parts = self._head()
        if parts is not None:
            body, head = parts
            hidden = body(input_ids=ids, position_ids=positions, past_key_values=cache, use_cache=True).last_hidden_state[0]
        else:
            logits_all = self.model(input_ids=ids, position_ids=positions, past_key_values=cache, use_cache=True).logits[0]
        last = None
        for a in range(0, c - start, _LOGIT_CHUNK):
            b = min(a + _LOGIT_CHUNK, c - start)
            if parts is not None:
                logits = head(hidden[a:b]).float()
                cap = getattr(self.model.config, "final_logit_softcapping", None)
                if cap:
                    logits = torch.tanh(logits / cap) * cap
            else:
                logits = logits_all[a:b].float()
            if b == c - start:
                last = logits[-1].clone()
            rows = b - a if b < c - start else b - a - 1  # the last position predicts the token after the context
            if rows <= 0:
                continue
            lp = torch.log_softmax(logits[:rows], dim=-1)
            targets = torch.as_tensor(ctx[start + a + 1:start + a + 1 + rows], device=lp.device)
            where = slice(start + a + 1, start + a + 1 + rows)
            token_lp[where] = lp.gather(1, targets.unsqueeze(1)).squeeze(1).cpu().numpy()
            tv, ti = lp.topk(TOP_LOGPROBS, dim=-1)
            top_ids[where], top_lp[where] = ti.cpu().numpy(), tv.cpu().numpy()
        self.stats.forward_tokens += c - start
        self.stats.logit_positions += c - start
        kv = [(layer.kbuf, layer.vbuf) for layer in cache.layers]
        self.scored_cache.insert(_ScoredEntry(tokens=np.array(ctx), kv=kv, last_logits=last, token_lp=token_lp,
                                              top_ids=top_ids, top_lp=top_lp))
        return kv, last, token_lp, top_ids, top_lp

    @torch.inference_mode()
    def prompt_logprobs(self, prompts: Sequence[str | Sequence[int]], top_k: int = 0) -> list[PromptLogprobs]:
        """Every token of each prompt (a text, or token ids) with its log-prob given the tokens before it
        (None for the first) and the ``top_k`` most likely tokens at each position: the OpenAI API's
        ``echo`` with ``logprobs``, which SayCan's public demo scored options with.

        Computed as option scoring is (module doc): prompts whose first tokens agree are one request whose
        context is their shared token prefix, from the prefix cache, with each prompt's remaining tokens
        packed after it as an option; the context's own positions come from a cached
        :class:`_ScoredEntry` where one shares the prefix. So scoring ``prompt + option`` for every option,
        one text each, costs about what :meth:`score` costs, not one full forward per text; the
        log-probs equal a full forward's within float32 rounding (~1e-5)."""
        if not 0 <= int(top_k) <= TOP_LOGPROBS:
            raise InvalidInputError(f"top_k must be between 0 and {TOP_LOGPROBS}, got {top_k}")
        encoded = [self._prompt_tokens(p) for p in prompts]
        lps: list[list[float | None]] = [[None] for _ in encoded]
        tops: list[list[tuple[tuple[str, float], ...]]] = [[()] for _ in encoded]
        groups: dict[bytes, list[int]] = {}
        for i, (_, ids, _) in enumerate(encoded):
            if len(ids) > 1:
                groups.setdefault(ids[:min(_GROUP_KEY, len(ids) - 1)].tobytes(), []).append(i)
        with self._lock:
            for members in groups.values():
                seqs = [encoded[i][1] for i in members]
                c = self._group_context(seqs)
                ctx = seqs[0][:c]
                kv, last, ctx_lp, ctx_ids, ctx_top = self._context_positions(ctx)
                pr = _Prepared([""] * len(seqs), [_OptionPlan(s[c:], 0) for s in seqs], kv, c,
                               torch.log_softmax(last, dim=-1))
                tail_lps, tail_tops = self._packed(pr, TOP_LOGPROBS if top_k else 0)
                for i, tl, tt in zip(members, tail_lps, tail_tops):
                    lps[i] += [float(v) for v in ctx_lp[1:c]] + list(tl)
                    if top_k:
                        tops[i] += [self._top(ctx_ids[j], ctx_top[j], top_k) for j in range(1, c)]
                        tops[i] += [self._top(ids_, vals, top_k) for ids_, vals in tt]
                    else:
                        tops[i] += [()] * (len(encoded[i][1]) - 1)
            self.stats.prompt_logprob_texts += len(encoded)
        return [PromptLogprobs(text=text, token_ids=tuple(int(t) for t in ids),
                               tokens=tuple(self._token_text(int(t)) for t in ids), offsets=tuple(offs),
                               logprobs=tuple(lp), top=tuple(top))
                for (text, ids, offs), lp, top in zip(encoded, lps, tops)]

    def _group_context(self, seqs: list[np.ndarray]) -> int:
        """How many leading tokens of a group of texts to treat as their shared context: all they share
        (leaving each at least one token to pack), or, when a cached :class:`_ScoredEntry` already holds
        all but a few of those, just what it holds, so the context is an exact cache hit (no forward, no
        copy) and the few others are packed with each text. A lone ``prompt + option`` text, the
        OpenAI-style client's one request per option, thereby reuses the prompt an earlier option's text
        left in the cache, as :meth:`score` reuses it for every option."""
        c = min(len(s) for s in seqs) - 1
        for s in seqs[1:]:
            c = min(c, common_prefix_len(seqs[0], s))
        entry, m = self.scored_cache.lookup(seqs[0][:c], prefer_shortest=True)
        if isinstance(entry, _ScoredEntry) and 1 <= m < c and (c - m) * max(len(seqs) - 1, 1) <= _PACK_SLACK:
            return m
        return c

    def _top(self, ids: np.ndarray, values: np.ndarray, k: int) -> tuple[tuple[str, float], ...]:
        return tuple((self._token_text(int(i)), float(v)) for i, v in zip(ids[:k], values[:k]))

    @torch.inference_mode()
    def generate(self, prompt: str, params: GenerationParams) -> list[Generation]:
        """``n`` samples decoded together over the cached prompt: the samples are packed side by side
        in one sequence (each attends to the prompt and its own tokens), so the prompt's key/values
        are never copied per sample. ``temperature == 0`` is greedy. Log-probs are the model's own
        (temperature 1, no penalty), as Zero-Shot Planners' P(â) requires.

        ``repetition_penalty`` is Hugging Face's (CTRL, Keskar et al. 2019): before sampling, the logit
        of every token already in the prompt or in the sample is divided by it when positive and
        multiplied by it when negative; Zero-Shot Planners search it over {1.0, 1.2, 1.5, 1.8} for
        Hugging Face models (Appendix A.1)."""
        n, temperature, top_p, max_new_tokens = params.n, params.temperature, params.top_p, params.max_new_tokens
        stop, seed, repetition_penalty = list(params.stop), params.seed, params.repetition_penalty
        ctx = self._encode(prompt)
        if len(ctx) == 0:
            raise InvalidInputError("the prompt is empty and the model has no BOS token to condition on")
        gen = torch.Generator(device="cpu")
        gen.manual_seed(int(seed) if seed is not None else int(torch.seed() % (2**63)))
        with self._lock:
            kv, last = self._context(ctx)
            past_len = len(ctx)
            cache = self._new_cache(kv, past_len)
            next_logits = last.unsqueeze(0).expand(n, -1)
            next_lp = torch.log_softmax(next_logits, dim=-1)
            seen = None
            if repetition_penalty != 1.0:
                seen = torch.zeros(next_logits.shape, dtype=torch.bool, device=next_logits.device)
                seen[:, torch.as_tensor(np.unique(ctx), device=seen.device)] = True
            tokens: list[list[int]] = [[] for _ in range(n)]
            lps: list[list[float]] = [[] for _ in range(n)]
            finished: list[str | None] = [None] * n
            for t in range(max_new_tokens):
                if seen is None:
                    chosen = _sample(next_lp, temperature, top_p, gen)
                else:
                    penalised = _repetition_penalty(next_logits, seen, repetition_penalty)
                    chosen = _sample(torch.log_softmax(penalised, dim=-1), temperature, top_p, gen)
                    seen[torch.arange(n, device=seen.device), torch.as_tensor(chosen, device=seen.device)] = True
                for j in range(n):
                    if finished[j] is None:
                        tokens[j].append(chosen[j])
                        lps[j].append(float(next_lp[j, chosen[j]]))
                        if chosen[j] in self._eos or _find_stop(self.tokenizer.decode(tokens[j], skip_special_tokens=True), stop) >= 0:
                            finished[j] = "stop"
                if all(f is not None for f in finished) or t == max_new_tokens - 1:
                    break
                ids = torch.as_tensor(chosen, device=self.device).unsqueeze(0)
                positions = torch.full((1, n), past_len + t, device=self.device)
                # cached generated columns are step-major (step t', sample j'); sample j sees j' == j
                seg = np.tile(np.arange(n), t + 1)
                q_seg = np.arange(n)
                allowed = np.concatenate([np.ones((n, past_len), dtype=bool), q_seg[:, None] == seg[None, :]], axis=1)
                out = self.model(input_ids=ids, position_ids=positions, attention_mask=self._mask_tensor(allowed),
                                 past_key_values=cache, use_cache=True)
                cache = out.past_key_values
                next_logits = out.logits[0].float()
                next_lp = torch.log_softmax(next_logits, dim=-1)
                self.stats.forward_tokens += n
        return [self._finish(tokens[j], lps[j], finished[j] or "length", stop) for j in range(n)]

    def _finish(self, tokens: list[int], lps: list[float], reason: str, stop: list[str]) -> Generation:
        text = self.tokenizer.decode(tokens, skip_special_tokens=True)
        cut = _find_stop(text, stop)
        keep = len(tokens)
        if tokens and tokens[-1] in self._eos:
            keep -= 1
        if cut >= 0:
            text = text[:cut]
            # count the tokens that lie wholly before the stop string (as OpenAI-style APIs do)
            keep = 0
            while keep < len(tokens) and len(self.tokenizer.decode(tokens[: keep + 1], skip_special_tokens=True)) <= cut:
                keep += 1
        used = lps[:keep] if keep else lps[:1]
        return Generation(text=text, logprob_mean=float(np.mean(used)) if used else 0.0, num_tokens=keep, finish_reason=reason)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self._embedder.embed(texts)

    def beam_candidates(self, prompt: str, params):
        """Token-level diverse beam search over this engine's cache (:mod:`groundplan.llm.beam_search`).

        Remembered by (prompt, parameters) in an LRU memo: the search has no randomness, and in a sweep
        the Greedy-Action rows propose after the same histories (the first step always), as Beam-Action's
        beams do after shared prefixes, so a repeat returns the candidates the search gave the first time."""
        from groundplan.llm.beam_search import diverse_beam_search

        self.stats.beam_searches += 1
        if not self.beam_memo_size:
            return diverse_beam_search(self, prompt, params)
        key = hashlib.blake2b(f"{params!r}\x00{prompt}".encode(), digest_size=20).digest()
        with self._lock:
            hit = self._beam_memo.get(key)
            if hit is not None:
                self._beam_memo.move_to_end(key)
                self.stats.beam_memo_hits += 1
                return list(hit)
        out = diverse_beam_search(self, prompt, params)
        with self._lock:
            self._beam_memo[key] = list(out)
            while len(self._beam_memo) > self.beam_memo_size:
                self._beam_memo.popitem(last=False)
        return out


def _add_sliding_window(model: torch.nn.Module, head: tuple[torch.nn.Module, torch.nn.Module] | None) -> None:
    """Give the engine's custom 4-D masks a sliding window where the model has sliding-window layers.

    transformers uses a 4-D mask as given in every layer, so in a model whose ``layer_types`` mix
    sliding-window and full attention (Gemma 2 and 3: a 512-token window in 5 of every 6 layers) packed
    options, padded batches, packed samples and beams would let the sliding layers see the whole prompt,
    unlike a plain forward. A hook on the decoder turns each such mask into the per-layer-type dict
    these models accept, the sliding layers' copy also hiding keys ``sliding_window`` or more positions
    behind the query. A key's position is taken to be its column: exact for the cached prompt's
    columns, and never smaller than the true position after them, so the window is exact while one
    option, sample or beam is shorter than the window. Forwards without a mask (a prompt's own) are left
    to the model."""
    cfg = model.config.get_text_config(decoder=True)
    window = getattr(cfg, "sliding_window", None)
    if not window or "sliding_attention" not in (getattr(cfg, "layer_types", None) or []):
        return
    target = head[0] if head is not None else model
    if getattr(target, "_groundplan_sliding_window", False):  # one hook per model, however many engines share it
        return

    def hook(module: torch.nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        mask, pos = kwargs.get("attention_mask"), kwargs.get("position_ids")
        if not isinstance(mask, torch.Tensor) or mask.dim() != 4 or pos is None:
            return None
        cols = torch.arange(mask.shape[-1], device=mask.device)
        far = cols[None, None, None, :] <= pos.to(mask.device)[:, None, :, None] - window
        sliding = mask & ~far if mask.dtype == torch.bool else mask.masked_fill(far, torch.finfo(mask.dtype).min)
        return args, {**kwargs, "attention_mask": {"full_attention": mask, "sliding_attention": sliding}}

    target.register_forward_pre_hook(hook, with_kwargs=True)
    target._groundplan_sliding_window = True
    log.info("sliding-window layers (window %d): the engine's 4-D masks get the window in those layers", window)


def _tokens_before(offsets: Sequence[Sequence[int]], cut: int) -> int | None:
    """How many leading tokens of an encoding end at or before character ``cut`` (special tokens the
    tokenizer prepends included), or None when no token boundary lies at ``cut``."""
    k = 0
    while k < len(offsets) and offsets[k][1] <= cut and not (k and tuple(offsets[k]) == (0, 0)):
        k += 1
    if k == 0 or k == len(offsets) or offsets[k][0] < cut or offsets[k - 1][1] != cut:
        return None
    return k


def _pretokenizes_by_regex(tokenizer) -> bool:
    """Whether a fast tokenizer splits text into pieces by a regular expression before merging
    (byte-level BPE's ``ByteLevel(use_regex=True)``, or a ``Split`` by pattern as Llama 3's), the
    condition for encoding a prompt's last line apart from the lines before it."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return False
    pre = json.loads(backend.to_str()).get("pre_tokenizer") or {}
    parts = pre.get("pretokenizers", [pre]) if pre.get("type") == "Sequence" else [pre]
    return any((p.get("type") == "ByteLevel" and p.get("use_regex", True)) or
               (p.get("type") == "Split" and "Regex" in (p.get("pattern") or {})) for p in parts)


def _option_score(option: str, lps: list[float]) -> OptionScore:
    total = float(sum(lps))
    return OptionScore(option=option, logprob_sum=total, logprob_mean=total / len(lps), num_tokens=len(lps))


def _find_stop(text: str, stop: Sequence[str]) -> int:
    hits = [i for i in (text.find(s) for s in stop) if i >= 0]
    return min(hits) if hits else -1


def _repetition_penalty(logits: torch.Tensor, seen: torch.Tensor, penalty: float) -> torch.Tensor:
    """Hugging Face's ``RepetitionPenaltyLogitsProcessor`` on [n, V] logits with a [n, V] seen mask."""
    penalised = torch.where(logits > 0, logits / penalty, logits * penalty)
    return torch.where(seen, penalised, logits)


def _sample(logprobs: torch.Tensor, temperature: float, top_p: float, gen: torch.Generator) -> list[int]:
    """Greedy (T=0) or temperature + nucleus (top-p) sampling from [n, V] log-probs."""
    if temperature == 0:
        return logprobs.argmax(dim=-1).tolist()
    probs = torch.softmax(logprobs / temperature, dim=-1).cpu()
    if top_p < 1.0:
        sorted_p, order = probs.sort(dim=-1, descending=True)
        cum = sorted_p.cumsum(dim=-1)
        drop = (cum - sorted_p) >= top_p  # keep the smallest set whose mass reaches top_p
        sorted_p = sorted_p.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter(1, order, sorted_p)
    return torch.multinomial(probs, 1, generator=gen).squeeze(1).tolist()


