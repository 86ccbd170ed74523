"""Several score requests at once (``groundplan.llm.hf_batch``) on the embedded SmolLM2: the padded forward
scores each request as the packed one does, and ``auto`` keeps the layout it timed faster."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from groundplan.core.errors import InvalidInputError
from groundplan.llm.hf_batch import BatchScorer, check_batch_options
from groundplan.llm.hf_kv import KVContext
from groundplan.llm.hf_scoring import PackedScorer
from groundplan.llm.hf_stats import EngineStats
from groundplan.llm.hf_tokens import BoundaryTokenizer
from groundplan.llm.hf_tree import tree_size
from groundplan.llm.prefix_cache import PrefixCache

PROMPT = "Human: How would you bring me a coke can?\nRobot: 1. find a coke can, 2."
REQUESTS = [
    (PROMPT, [" pick up the coke can", " go to the table", " done"]),
    (PROMPT + " pick up the coke can, 3.", [" bring it to you", " go to the counter", " put down the coke can",
                                            " find an apple", " done"]),
    ("Human: say hi\nRobot:", [" hi", " hello there"]),
]
#: padding and the copied prefixes reorder float32 sums (module doc of hf_scoring): about 1e-5 in log p
TOL = 1e-4


def _batch(lm, batched_forward: str = "auto", max_pack_tokens: int = 512, max_batch_rows: int = 16) -> BatchScorer:
    stats = EngineStats()
    kv = KVContext(lm.model, PrefixCache(1 << 28), stats, max_pack_tokens)
    return BatchScorer(PackedScorer(BoundaryTokenizer(lm.tokenizer, stats), kv, stats, threading.RLock()),
                       batched_forward, max_batch_rows)


def _sums(rows) -> list[list[float]]:
    return [[s.logprob_sum for s in row] for row in rows]


def test_padded_equals_the_loop_of_packed_requests(lm):
    batch = _batch(lm)
    loop = batch.score_batch(REQUESTS, layout="loop")
    padded = batch.score_batch(REQUESTS, layout="padded")
    assert [[s.option for s in row] for row in padded] == [opts for _, opts in REQUESTS]
    for a, b in zip(_sums(padded), _sums(loop)):
        assert np.allclose(a, b, atol=TOL, rtol=0)
    assert batch.scorer.stats.padded_batches == 1
    assert batch.scorer.stats.score_calls == 2 * len(REQUESTS)


def test_padded_rows_hold_each_request_as_a_token_tree(lm):
    """Options that share a prefix: each padded row runs the request's tree (its distinct prefixes)."""
    shared = [(PROMPT, [" pick up the coke can", " pick up the apple", " go to the table", " go to the counter"]),
              ("Human: say hi\nRobot:", [" hi there", " hi", " hello there"])]
    batch = _batch(lm)
    loop = _sums(batch.score_batch(shared, layout="loop"))
    before = batch.scorer.stats.forward_tokens
    padded = _sums(batch.score_batch(shared, layout="padded"))
    rows = [tree_size([p.segment for p in batch.scorer.tokens.split(p_, o)[1]]) for p_, o in shared]
    assert batch.scorer.stats.forward_tokens - before == sum(rows)  # the prompts were cached by the loop
    assert rows[0] < sum(len(p.segment) for p in batch.scorer.tokens.split(*shared[0])[1])
    for a, b in zip(padded, loop):
        assert np.allclose(a, b, atol=TOL, rtol=0)


def test_rows_bound_and_oversized_requests_keep_the_scores(lm):
    """Two rows per forward, and a pack bound the second request exceeds (so it is scored alone)."""
    want = _sums(_batch(lm).score_batch(REQUESTS, layout="loop"))
    batch = _batch(lm, max_pack_tokens=15, max_batch_rows=1)
    oversized = [r for r, (_, opts) in enumerate(REQUESTS)
                 if tree_size([p.segment for p in batch.scorer.tokens.split(REQUESTS[r][0], opts)[1]]) > 15]
    assert oversized == [1]
    got = _sums(batch.score_batch(REQUESTS, layout="padded"))
    for a, b in zip(got, want):
        assert np.allclose(a, b, atol=TOL, rtol=0)
    assert batch.scorer.stats.padded_batches == 2  # rows 0 and 2, one per forward


def test_auto_times_both_layouts_then_keeps_the_faster(lm):
    batch = _batch(lm)
    assert batch.chosen is None
    for _ in range(6):
        batch.score_batch(REQUESTS[:2])
    assert len(batch.trial_s["padded"]) == len(batch.trial_s["loop"]) == 3
    medians = {k: float(np.median(v)) for k, v in batch.trial_s.items()}
    assert batch.chosen == min(medians, key=medians.get)


def test_record_trial_picks_the_lower_median(lm):
    batch = _batch(lm)
    for s in (3.0, 1.0, 2.0):
        batch.record_trial("padded", s)
    for s in (0.5, 9.0, 1.5):
        batch.record_trial("loop", s)
    assert batch.chosen == "loop"  # median 1.5 < 2.0
    assert _batch(lm, "on").chosen == "padded" and _batch(lm, "off").chosen == "loop"


def test_bad_options_are_refused(lm):
    with pytest.raises(InvalidInputError, match="batched_forward"):
        check_batch_options("sometimes", 4)
    with pytest.raises(InvalidInputError, match="max_batch_rows"):
        check_batch_options("auto", 0)
    with pytest.raises(InvalidInputError, match="layout"):
        _batch(lm).score_batch(REQUESTS, layout="sideways")
