"""Automatic prefix caching of key/value states across calls, with LRU eviction by bytes.

Every SayCan step re-scores a prompt that shares its few-shot examples with every other episode and
its plan-so-far with the previous step. Like vLLM's automatic prefix caching or SGLang's
RadixAttention, a lookup returns the stored entry with the longest common token prefix with the new
prompt; because the key/value state at position j depends only on tokens 0..j, the first ``m``
positions of any entry that agrees on ``m`` tokens are valid for the new prompt (the same values up
to float32 rounding: key/values computed in a longer or shorter forward differ in the last digits, so
scores after a warm prefix match a cold run to about 1e-5, not bit for bit). Unlike vLLM, this
cache also serves requests that need prompt log-probs, which is exactly SayCan's scoring pattern.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch


@dataclass
class CacheEntry:
    """Key/value state for ``tokens`` and the next-token logits after the last token (so an exact
    hit needs no forward pass at all).

    ``kv`` holds per layer a (keys, values) pair of buffers [1, heads, capacity, head_dim] whose first
    ``len(tokens)`` positions are this entry's state; the rest is headroom that a later forward over
    this prefix writes into in place (see ``groundplan.llm.hf_kv``), so the prefix is never re-copied.
    """

    tokens: np.ndarray
    kv: list[tuple[torch.Tensor, torch.Tensor]]
    last_logits: torch.Tensor
    nbytes: int = field(init=False)

    def __post_init__(self) -> None:
        self.nbytes = sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in self.kv)
        self.nbytes += self.last_logits.numel() * self.last_logits.element_size()

    def __len__(self) -> int:
        return len(self.tokens)


def common_prefix_len(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    if n == 0:
        return 0
    neq = np.flatnonzero(a[:n] != b[:n])
    return int(neq[0]) if len(neq) else n


@dataclass
class CacheStats:
    lookups: int = 0
    hit_tokens: int = 0
    query_tokens: int = 0
    evictions: int = 0

    @property
    def hit_rate(self) -> float:
        """Fraction of looked-up prompt tokens whose key/values came from the cache."""
        return self.hit_tokens / self.query_tokens if self.query_tokens else 0.0


class PrefixCache:
    """LRU store of :class:`CacheEntry` bounded by ``max_bytes``. Thread-safe."""

    def __init__(self, max_bytes: int = 1 << 30) -> None:
        self.max_bytes = int(max_bytes)
        self._entries: OrderedDict[int, CacheEntry] = OrderedDict()
        self._next_id = 0
        self._bytes = 0
        self._lock = threading.Lock()
        self.stats = CacheStats()

    @property
    def nbytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, tokens: Sequence[int] | np.ndarray, max_len: int | None = None,
               prefer_shortest: bool = False) -> tuple[CacheEntry | None, int]:
        """The entry sharing the longest prefix with ``tokens`` and that length (capped at ``max_len``). With
        ``prefer_shortest``, of entries sharing as much, the shortest, so an entry that is exactly the
        shared prefix (an exact hit, which needs no forward pass) wins over longer ones that would have to be
        copied; without it the first found wins, as option scoring has always looked up (another entry
        computes the same key/values along another float path, within ~1e-5)."""
        q = np.asarray(tokens, dtype=np.int64)
        cap = len(q) if max_len is None else min(max_len, len(q))
        best, best_len, best_id = None, 0, None
        with self._lock:
            for eid, entry in self._entries.items():
                m = common_prefix_len(entry.tokens, q[:cap])
                if m > best_len or (prefer_shortest and m and m == best_len and len(entry) < len(best)):
                    best, best_len, best_id = entry, m, eid
            if best_id is not None:
                self._entries.move_to_end(best_id)
            self.stats.lookups += 1
            self.stats.hit_tokens += best_len
            self.stats.query_tokens += cap
        return best, best_len

    def insert(self, entry: CacheEntry) -> None:
        """Store ``entry``; entries that are strict prefixes of it are dropped (it serves all their
        lookups), then least-recently-used entries are evicted until the byte budget holds."""
        if entry.nbytes > self.max_bytes:
            return
        with self._lock:
            for eid in [eid for eid, e in self._entries.items()
                        if len(e) <= len(entry) and common_prefix_len(e.tokens, entry.tokens) == len(e)]:
                self._bytes -= self._entries.pop(eid).nbytes
            self._entries[self._next_id] = entry
            self._next_id += 1
            self._bytes += entry.nbytes
            while self._bytes > self.max_bytes and len(self._entries) > 1:
                _, old = self._entries.popitem(last=False)
                self._bytes -= old.nbytes
                self.stats.evictions += 1

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0
