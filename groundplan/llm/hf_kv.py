"""The Hugging Face engine's key/value state: a prompt's cached prefix, in-place cache buffers, attention masks.

Every forward the engine runs after a prompt (packed options, padded batches, packed samples, beams)
attends to the prompt's key/values from the prefix cache (:mod:`groundplan.llm.prefix_cache`) and appends
its own columns into the same preallocated buffers (:class:`_BufferLayer`), so a long prompt is computed
once and never copied per option, sample or beam. Which earlier columns a new token may see is a custom
4-D mask (tree attention: the prompt's columns plus the token's own ancestors in the pack), built here.
"""
from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import torch
from transformers.cache_utils import DynamicLayer

from groundplan.llm.hf_stats import EngineStats
from groundplan.llm.prefix_cache import CacheEntry, PrefixCache

if TYPE_CHECKING:
    from groundplan.llm.hf_tokens import BoundaryTokenizer

log = logging.getLogger(__name__)

KV = list[tuple[torch.Tensor, torch.Tensor]]
#: most tokens :meth:`KVContext.borrow` runs after a cached entry into its headroom instead of caching them: an
#: option or a few plan steps, which later calls run again (cheaply) rather than copy a whole prompt to keep
BORROW_TOKENS = 64


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


def _grow(buf: torch.Tensor, capacity: int, keep: int) -> torch.Tensor:
    new = buf.new_empty(buf.shape[0], buf.shape[1], capacity, buf.shape[3])
    new[:, :, :keep] = buf[:, :, :keep]
    return new


class KVContext:
    """A causal LM's forwards over cached prefixes: key/value buffers, the prefix cache, masks.

    Args:
        model: the transformers causal LM.
        cache: the prefix cache of plain entries (:meth:`context` reads and fills it).
        stats: the engine's counters (``forward_tokens``, ``logit_positions``).
        max_pack_tokens: headroom after a context for the tokens that follow it in one forward (option
            packs, samples); also the scorers' pack bound, read from here so it is set in one place.
        lenders: other prefix caches whose entries :meth:`borrow` may run after (the echo scorer's, whose
            entries hold the same key/values and more).
    """

    def __init__(self, model: Any, cache: PrefixCache, stats: EngineStats, max_pack_tokens: int,
                 lenders: Sequence[PrefixCache] = ()) -> None:
        self.model = model
        self.cache = cache
        self.lenders = [cache, *lenders]
        self.stats = stats
        self.max_pack_tokens = int(max_pack_tokens)
        self.device = model.get_input_embeddings().weight.device
        self.bool_mask = model.config._attn_implementation == "sdpa"

    def new_cache(self, kv: KV, length: int):
        """A transformers cache whose layers append in place into ``kv``'s buffers after ``length``."""
        from transformers import DynamicCache

        cache = DynamicCache(config=self.model.config)
        cache.layers = [_BufferLayer(k, v, length) for k, v in kv]
        return cache

    def empty_buffers(self, capacity: int) -> KV:
        """Uninitialised per-layer (keys, values) buffers of ``capacity`` positions, on each layer's device."""
        cfg = self.model.config.get_text_config(decoder=True)
        heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        dtype = self.model.dtype
        out = []
        for layer in range(cfg.num_hidden_layers):
            device = self.layer_device(layer)
            shape = (1, heads, capacity, head_dim)
            out.append((torch.empty(shape, dtype=dtype, device=device), torch.empty(shape, dtype=dtype, device=device)))
        return out

    def layer_device(self, layer: int) -> torch.device:
        """Where a decoder layer's cache lives (layers may sit on different GPUs under device_map)."""
        device_map = getattr(self.model, "hf_device_map", None) or {}
        for name, dev in device_map.items():
            if name.endswith(f"layers.{layer}"):
                return torch.device(f"cuda:{dev}" if isinstance(dev, int) else dev)
        return self.device

    def begin(self, ctx: np.ndarray) -> tuple[KV, int, torch.Tensor | None]:
        """Buffers holding the longest cached prefix of ``ctx``: ``(kv, m, last)`` with ``ctx[:m]``'s keys/values
        in ``kv`` (room for ``max_pack_tokens`` more after ``ctx``) and, on an exact hit, the raw logits of the
        token after ``ctx`` (``m == len(ctx)``); otherwise ``last`` is None and ``ctx[m:]`` still has to run
        (``m < len(ctx)``: at least the last token runs, since partial entries hold no logits at the match point)."""
        entry, m = self.cache.lookup(ctx)
        if entry is not None and m == len(ctx) == len(entry):
            return entry.kv, len(ctx), entry.last_logits
        m = min(m, len(ctx) - 1)
        # fresh buffers with headroom for the option packs (or samples) that will follow this context
        kv = self.empty_buffers(len(ctx) + self.max_pack_tokens)
        if entry is not None and m > 0:
            for (k, v), (ek, ev) in zip(kv, entry.kv):
                k[:, :, :m] = ek[:, :, :m]
                v[:, :, :m] = ev[:, :, :m]
        else:
            m = 0
        return kv, m, None

    @staticmethod
    def buffers(cache: Any) -> KV:
        """The per-layer (keys, values) buffers a forward wrote into through ``cache`` (a layer may have grown
        them)."""
        return [(layer.kbuf, layer.vbuf) for layer in cache.layers]

    def finish(self, ctx: np.ndarray, cache: Any, last: torch.Tensor) -> KV:
        """Cache ``ctx`` once a forward has written its last keys/values into ``cache``'s layers; returns its
        buffers (:meth:`buffers`)."""
        kv = self.buffers(cache)
        self.cache.insert(CacheEntry(tokens=np.array(ctx), kv=kv, last_logits=last))
        return kv

    def context(self, ctx: np.ndarray) -> tuple[KV, torch.Tensor]:
        """Key/values of ``ctx`` and the (raw) logits of the token after it, reusing the prefix cache
        (:meth:`begin`) and running what it does not hold."""
        kv, m, last = self.begin(ctx)
        if last is not None:
            return kv, last
        new = torch.as_tensor(ctx[m:], device=self.device).unsqueeze(0)
        positions = torch.arange(m, len(ctx), device=self.device).unsqueeze(0)
        cache = self.new_cache(kv, m)
        out = self.model(input_ids=new, position_ids=positions, past_key_values=cache, use_cache=True, logits_to_keep=1)
        self.stats.forward_tokens += len(ctx) - m
        self.stats.logit_positions += 1
        last = out.logits[0, -1].float()
        return self.finish(ctx, cache, last), last

    def borrow(self, ctx: np.ndarray, room: int) -> tuple[KV, torch.Tensor, bool]:
        """Key/values of ``ctx`` for forwards that are not kept (a generation's samples), and the raw logits of
        the token after it: ``(kv, last, borrowed)``.

        Where a cached entry (of this context's cache or a lender's) is ``ctx`` itself, or a prefix of it with
        at most :data:`BORROW_TOKENS` more tokens and ``room`` positions still free in its headroom after
        them, the rest of ``ctx`` runs into that headroom (``borrowed``): the headroom is every entry's
        scratch space under the engine's lock, where option packs and samples go, so nothing is copied and
        nothing is cached. Otherwise :meth:`context` (copy the longest cached prefix, run the rest, cache
        ``ctx``). The key/values are the same either way: the same prefix columns, the same forward after
        them. A client that scores ``prompt + option`` with ``echo`` and then samples after it (as
        lm-evaluation-harness asks, one token) thereby copies no prompt."""
        best, best_m = None, 0
        for cache in self.lenders:
            entry, m = cache.lookup(ctx, prefer_shortest=True)
            if entry is not None and m == len(entry) and m > best_m:
                best, best_m = entry, m
        if best is not None and best.last_logits is not None:
            extra = len(ctx) - best_m
            free = best.kv[0][0].shape[-2] - best_m
            if extra == 0:
                return best.kv, best.last_logits, True
            if extra <= BORROW_TOKENS and extra + room <= free:
                new = torch.as_tensor(ctx[best_m:], device=self.device).unsqueeze(0)
                positions = torch.arange(best_m, len(ctx), device=self.device).unsqueeze(0)
                out = self.model(input_ids=new, position_ids=positions, past_key_values=self.new_cache(best.kv, best_m),
                                 use_cache=True, logits_to_keep=1)
                self.stats.forward_tokens += extra
                self.stats.logit_positions += 1
                self.stats.borrowed_contexts += 1
                return best.kv, out.logits[0, -1].float(), True
        kv, last = self.context(ctx)
        return kv, last, False

    def packed_mask(self, visible: np.ndarray, past_len: int, tail: int = 0) -> torch.Tensor:
        """[1, 1, Q, past+Q] mask: all cached columns, plus the pack's own rows as ``visible`` allows (a
        token tree's ancestors and self, :mod:`groundplan.llm.hf_tree`). With ``tail`` > 0 the first
        ``tail`` rows are the context's own last tokens, computed in the same forward: they attend causally
        among themselves (and to no option row), and every option row sees all of them."""
        q = tail + len(visible)
        own = np.zeros((q, q), dtype=bool)
        own[:tail, :tail] = np.tri(tail, dtype=bool)
        own[tail:, :tail] = True
        own[tail:, tail:] = visible
        return self.mask_tensor(np.concatenate([np.ones((q, past_len), dtype=bool), own], axis=1))

    def mask_tensor(self, allowed: np.ndarray) -> torch.Tensor:
        """A [Q, K] allowed-attention matrix as the model's [1, 1, Q, K] mask: boolean for SDPA,
        additive (0 / dtype min) for eager attention."""
        mask = torch.from_numpy(allowed).to(self.device)
        if not self.bool_mask:
            dtype = self.model.dtype
            mask = torch.zeros(allowed.shape, dtype=dtype, device=self.device).masked_fill(~mask, torch.finfo(dtype).min)
        return mask[None, None]

    def head(self) -> tuple[torch.nn.Module, torch.nn.Module] | None:
        """(decoder body, LM head) for computing logits at chosen (row, position) pairs only."""
        body = getattr(self.model, getattr(self.model, "base_model_prefix", "model"), None)
        head = self.model.get_output_embeddings()
        if body is None or head is None or body is self.model:
            return None
        return body, head

    def head_logits(self, head: torch.nn.Module, hidden: torch.Tensor) -> torch.Tensor:
        """float32 logits of ``hidden`` states, soft-capped as the model's own forward caps them (Gemma 2)."""
        logits = head(hidden).float()
        cap = getattr(self.model.config, "final_logit_softcapping", None)
        if cap:
            logits = torch.tanh(logits / cap) * cap
        return logits


def add_sliding_window(model: torch.nn.Module, head: tuple[torch.nn.Module, torch.nn.Module] | None) -> None:
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


class EnginePart:
    """A part of the engine that runs the model over the shared key/value context: it holds the engine's
    tokeniser, that context, its counters and its lock (held while the model and caches are used).

    Args:
        tokens: the engine's option-boundary tokeniser (encoding, EOS ids, decoding).
        kv: the key/value context (prefix cache, buffers, masks); its ``max_pack_tokens`` bounds a pack.
        stats: the engine's counters.
        lock: the engine's lock.
    """

    def __init__(self, tokens: "BoundaryTokenizer", kv: KVContext, stats: EngineStats, lock: threading.RLock) -> None:
        self.tokens = tokens
        self.kv = kv
        self.stats = stats
        self.lock = lock
