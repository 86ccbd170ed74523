"""Options packed as a token tree: a prefix that several options share is computed once.

After a shared context, a score request's options often begin alike: EAI's ~250 admissible actions a step
are a few verbs times many objects ("[GRAB] <cup>", "[GRAB] <plate>", ...), the kitchen's skills start "pick
up the" or "go to the". Packed flat, each option computes its own copy of those tokens. Packed as a tree (a
trie over the options' token segments: the layout of SpecInfer's tree-based parallel decoding, Miao et
al., ASPLOS 2024), every distinct prefix is one row; a row attends to the cached context and to its own
ancestors, at the position its depth gives, so each option's tokens are computed as in a lone
``context + option`` forward (the same function, not bit-identically: float reduction order), and a row's
logits predict the next token of every option below it. On six EAI held-out first steps the tree holds 2.77
times fewer rows than the flat segments, the kitchen step 1.84 times (SmolLM2's tokenizer;
``benchmarks/bench_option_tree.py``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np


@dataclass(frozen=True)
class TreePack:
    """One forward's option rows.

    ``ids``/``depth``: each row's token and its depth below the context (0 = the first token after it);
    ``visible[q, k]``: row q attends to row k (k is q or one of its ancestors); ``keep``: the distinct rows
    whose logits are read, ascending; for every scored token in the chunk's option order, ``pick`` (its
    predicting row, as an index into ``keep``), ``targets`` (the token) and ``owners`` (the option);
    ``ends``: with ``ends`` asked, the row of each option's last token, in the chunk's order."""

    ids: np.ndarray
    depth: np.ndarray
    visible: np.ndarray
    keep: list[int]
    pick: list[int]
    targets: list[int]
    owners: list[int]
    ends: list[int]

    @property
    def rows(self) -> int:
        return len(self.ids)


def _root(i: int, share: bool) -> int:
    """The parent key of option ``i``'s first row: the context (-1), or, unshared, a root of its own."""
    return -1 if share else -2 - i


class _Trie:
    """Rows keyed by (parent row, token): each row's token, parent (negative: under the context) and depth.
    Parents precede their children."""

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.parent: list[int] = []
        self.depth: list[int] = []
        self.index: dict[tuple[int, int], int] = {}

    def __len__(self) -> int:
        return len(self.ids)

    def shared(self, root: int, tokens: Sequence[int]) -> int:
        """How many of ``tokens``' leading tokens, below ``root``, are rows already."""
        row = root
        for n, token in enumerate(tokens):
            nxt = self.index.get((row, int(token)))
            if nxt is None:
                return n
            row = nxt
        return len(tokens)

    def insert(self, root: int, tokens: Sequence[int]) -> list[int]:
        """The rows along ``tokens``' path below ``root``, adding those that are new."""
        row, path = root, []
        for token in tokens:
            key = (row, int(token))
            nxt = self.index.get(key)
            if nxt is None:
                nxt = self.index[key] = len(self.ids)
                self.ids.append(int(token))
                self.parent.append(row)
                self.depth.append(self.depth[row] + 1 if row >= 0 else 0)
            row = nxt
            path.append(row)
        return path


def _rows(segments: Sequence[np.ndarray], chunk: Sequence[int], share: bool = True) -> tuple[_Trie, list[list[int]]]:
    """The trie of ``chunk``'s segments (unshared: one branch per option, the flat layout) and each option's
    rows along its path, in ``chunk``'s order."""
    trie = _Trie()
    return trie, [trie.insert(_root(i, share), segments[i]) for i in chunk]


def tree_size(segments: Sequence[np.ndarray], share: bool = True) -> int:
    """Rows of all ``segments`` packed as one tree (their distinct prefixes; unshared, their tokens)."""
    return len(_rows(segments, range(len(segments)), share)[0])


def tree_pack(segments: Sequence[np.ndarray], scored_from: Sequence[int], chunk: Sequence[int],
              ends: bool = False, share: bool = True) -> TreePack:
    """The tree of ``chunk``'s option segments (``scored_from[i]``: the index of option i's first own token
    in its segment; tokens before it are context tokens the tokenizer merged differently, scored by no one).
    The token at segment index j >= 1 is predicted by the row of the prefix ``segment[:j]``; a first own
    token at index 0 is predicted by the context's last logits, which the caller holds. ``share=False``
    packs every option on a branch of its own (the flat layout, as a baseline)."""
    trie, paths = _rows(segments, chunk, share)
    q = len(trie)
    visible = np.zeros((q, q), dtype=bool)
    for row, parent in enumerate(trie.parent):  # parents precede their children
        if parent >= 0:
            visible[row] = visible[parent]
        visible[row, row] = True
    scored: list[tuple[int, int, int]] = []  # (predicting row, target, owner)
    for i, path in zip(chunk, paths):
        seg = segments[i]
        for j in range(max(int(scored_from[i]), 1), len(seg)):
            scored.append((path[j - 1], int(seg[j]), i))
    keep = sorted({row for row, _, _ in scored})
    at = {row: k for k, row in enumerate(keep)}
    return TreePack(
        ids=np.asarray(trie.ids, dtype=np.int64),
        depth=np.asarray(trie.depth, dtype=np.int64),
        visible=visible,
        keep=keep,
        pick=[at[row] for row, _, _ in scored],
        targets=[t for _, t, _ in scored],
        owners=[o for _, _, o in scored],
        ends=[path[-1] for path in paths] if ends else [],
    )


def tree_chunks(segments: Sequence[np.ndarray], max_rows: int, share: bool = True,
                max_options: int | None = None) -> list[list[int]]:
    """Option indices grouped into trees of at most ``max_rows`` rows (an option longer than that is a tree
    of its own) and ``max_options`` options. Options are taken in the order of their token sequences, so
    those that share a prefix fall into one tree; each chunk lists its options in that order."""
    tokens = [np.asarray(s).tolist() for s in segments]
    chunks: list[list[int]] = []
    cur: list[int] = []
    trie = _Trie()
    for i in sorted(range(len(tokens)), key=lambda k: tokens[k]):
        root = _root(i, share)
        full = max_options is not None and len(cur) == max_options
        if cur and (full or len(trie) + len(tokens[i]) - trie.shared(root, tokens[i]) > max_rows):
            chunks.append(cur)
            cur, trie = [], _Trie()
        trie.insert(root, tokens[i])
        cur.append(i)
    if cur:
        chunks.append(cur)
    return chunks
