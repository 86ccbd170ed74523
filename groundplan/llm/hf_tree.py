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


def _rows(segments: Sequence[np.ndarray], chunk: Sequence[int],
          share: bool = True) -> tuple[list[int], list[int], list[int], list[list[int]]]:
    """The trie of ``chunk``'s segments (unshared: one branch per option, the flat layout): each row's
    token, parent row (negative under the context) and depth, and each option's rows along its path, in
    ``chunk``'s order."""
    ids: list[int] = []
    parent: list[int] = []
    depth: list[int] = []
    index: dict[tuple[int, int], int] = {}
    paths: list[list[int]] = []
    for i in chunk:
        row, path = _root(i, share), []
        for token in segments[i]:
            key = (row, int(token))
            nxt = index.get(key)
            if nxt is None:
                nxt = index[key] = len(ids)
                ids.append(int(token))
                parent.append(row)
                depth.append(depth[row] + 1 if row >= 0 else 0)
            row = nxt
            path.append(row)
        paths.append(path)
    return ids, parent, depth, paths


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
    ids, parent, depth, paths = _rows(segments, chunk, share)
    q = len(ids)
    visible = np.zeros((q, q), dtype=bool)
    for row in range(q):  # parents precede their children
        if parent[row] >= 0:
            visible[row] = visible[parent[row]]
        visible[row, row] = True
    scored: list[tuple[int, int, int]] = []  # (predicting row, target, owner)
    for i, path in zip(chunk, paths):
        seg = segments[i]
        for j in range(max(int(scored_from[i]), 1), len(seg)):
            scored.append((path[j - 1], int(seg[j]), i))
    keep = sorted({row for row, _, _ in scored})
    at = {row: k for k, row in enumerate(keep)}
    return TreePack(
        ids=np.asarray(ids, dtype=np.int64),
        depth=np.asarray(depth, dtype=np.int64),
        visible=visible,
        keep=keep,
        pick=[at[row] for row, _, _ in scored],
        targets=[t for _, t, _ in scored],
        owners=[o for _, _, o in scored],
        ends=[path[-1] for path in paths] if ends else [],
    )


def tree_chunks(segments: Sequence[np.ndarray], max_rows: int, share: bool = True) -> list[list[int]]:
    """Option indices grouped into trees of at most ``max_rows`` rows (an option longer than that is a tree
    of its own). Options are taken in the order of their token sequences, so those that share a prefix fall
    into one tree; each chunk lists its options in that order."""
    tokens = [np.asarray(s).tolist() for s in segments]
    chunks: list[list[int]] = []
    cur: list[int] = []
    index: dict[tuple[int, int], int] = {}  # (parent row, token) -> row of the current tree
    for i in sorted(range(len(tokens)), key=lambda k: tokens[k]):
        row, matched = _root(i, share), 0
        for token in tokens[i]:
            nxt = index.get((row, token))
            if nxt is None:
                break
            row, matched = nxt, matched + 1
        if cur and len(index) + len(tokens[i]) - matched > max_rows:
            chunks.append(cur)
            cur, index, row, matched = [], {}, _root(i, share), 0
        for token in tokens[i][matched:]:
            row = index.setdefault((row, token), len(index))
        cur.append(i)
    if cur:
        chunks.append(cur)
    return chunks
