"""Options packed as a token tree (``groundplan.llm.hf_tree``): one row per distinct prefix, each row seeing
its ancestors only, and every scored token read from the row of its own prefix."""
from __future__ import annotations

import numpy as np
import pytest

from groundplan.llm.hf_tree import tree_chunks, tree_pack, tree_size

#: three options after a context: two share their first two tokens, one repeats another's whole segment
SEGMENTS = [np.array([5, 6, 7]), np.array([5, 6, 8, 9]), np.array([4, 6]), np.array([5, 6, 7])]
SCORED_FROM = [0, 0, 1, 0]


def _prefix(pack, row: int) -> list[int]:
    """The tokens of ``row``'s path from the context: its visible rows are its ancestors, in depth order."""
    path = np.flatnonzero(pack.visible[row])
    return [int(pack.ids[k]) for k in sorted(path, key=lambda k: pack.depth[k])]


def test_a_tree_holds_each_distinct_prefix_once_and_each_row_sees_its_ancestors():
    pack = tree_pack(SEGMENTS, SCORED_FROM, [0, 1, 2, 3], ends=True)
    prefixes = {tuple(s[:k].tolist()) for s in SEGMENTS for k in range(1, len(s) + 1)}
    assert pack.rows == len(prefixes) == tree_size(SEGMENTS) == 7
    assert {tuple(_prefix(pack, r)) for r in range(pack.rows)} == prefixes
    for r in range(pack.rows):
        assert pack.depth[r] == len(_prefix(pack, r)) - 1
        assert pack.visible[r].sum() == pack.depth[r] + 1  # itself and its ancestors, no sibling
    assert [_prefix(pack, r) for r in pack.ends] == [s.tolist() for s in SEGMENTS]


def test_every_scored_token_is_read_from_the_row_of_its_own_prefix():
    pack = tree_pack(SEGMENTS, SCORED_FROM, [0, 1, 2, 3])
    want = [(i, s[:j].tolist(), int(s[j])) for i, s in enumerate(SEGMENTS)
            for j in range(max(SCORED_FROM[i], 1), len(s))]
    got = [(o, _prefix(pack, pack.keep[k]), t) for o, k, t in zip(pack.owners, pack.pick, pack.targets)]
    assert got == want
    assert pack.keep == sorted(set(pack.keep))  # a row read by several options is computed and kept once
    assert len(pack.keep) < len(pack.pick)


def test_a_chunk_packs_only_its_own_options():
    pack = tree_pack(SEGMENTS, SCORED_FROM, [2])
    assert pack.rows == 2 and pack.ids.tolist() == [4, 6] and set(pack.owners) == {2}


@pytest.mark.parametrize("max_options", [None, 1, 2])
@pytest.mark.parametrize("max_rows", [1, 3, 4, 7, 100])
def test_chunks_cover_every_option_once_within_the_row_and_option_bounds(max_rows, max_options):
    chunks = tree_chunks(SEGMENTS, max_rows, max_options=max_options)
    assert sorted(i for c in chunks for i in c) == list(range(len(SEGMENTS)))
    for c in chunks:
        rows = tree_size([SEGMENTS[i] for i in c])
        assert rows <= max_rows or len(c) == 1  # an option longer than the bound is a tree of its own
        assert max_options is None or len(c) <= max_options
    if max_rows >= tree_size(SEGMENTS) and max_options is None:
        assert len(chunks) == 1


def test_options_that_share_a_prefix_fall_into_one_chunk_whatever_their_order():
    segs = [np.array([1, 2, 3]), np.array([9, 9, 9]), np.array([1, 2, 4]), np.array([9, 9, 8])]
    chunks = tree_chunks(segs, 4)
    assert sorted(map(sorted, chunks)) == [[0, 2], [1, 3]]


def test_unshared_packs_each_option_on_its_own_branch():
    pack = tree_pack(SEGMENTS, SCORED_FROM, [0, 1, 2, 3], ends=True, share=False)
    assert pack.rows == tree_size(SEGMENTS, share=False) == sum(len(s) for s in SEGMENTS)
    assert [_prefix(pack, r) for r in pack.ends] == [s.tolist() for s in SEGMENTS]
    assert len(pack.keep) == len(pack.pick)  # no row is read twice
    assert sum(len(c) for c in tree_chunks(SEGMENTS, 4, share=False)) == len(SEGMENTS)
