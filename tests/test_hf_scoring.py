"""Packed option scoring (``groundplan.llm.hf_scoring``) on the embedded SmolLM2: options packed after one
cached prompt score as a plain transformers forward of each ``prompt + option`` does, whatever the packing."""
from __future__ import annotations

import math
import threading

import numpy as np
import pytest
import torch

from groundplan.llm.hf_kv import KVContext
from groundplan.llm.hf_scoring import PackedScorer, option_score
from groundplan.llm.hf_stats import EngineStats
from groundplan.llm.hf_tokens import BoundaryTokenizer
from groundplan.llm.hf_tree import tree_size
from groundplan.llm.prefix_cache import PrefixCache

PROMPT = ("Robot: Hi there, I'm a robot operating in a kitchen.\nHuman: How would you bring me a coke can?\n"
          "Robot: 1. find a coke can, 2.")
OPTIONS = [" pick up the coke can", " go to the table", " find an apple", " put down the sponge", " done",
           " pick up the apple", " go to the counter", " bring it to you", " find a sponge", "pickup"]
#: packing reorders float32 sums (module doc of hf_scoring): about 1e-5 in log p
TOL = 1e-4


def _scorer(lm, max_pack_tokens: int = 512) -> PackedScorer:
    stats = EngineStats()
    kv = KVContext(lm.model, PrefixCache(1 << 28), stats, max_pack_tokens)
    return PackedScorer(BoundaryTokenizer(lm.tokenizer, stats), kv, stats, threading.RLock())


@torch.inference_mode()
def _plain(lm, prompt: str, option: str) -> float:
    """log p(option | prompt) from one plain forward of the joint text: the tokens whose span ends past the prompt."""
    enc = lm.tokenizer(prompt + option, return_offsets_mapping=True)
    ids = enc.input_ids
    first = next(i for i, (_, end) in enumerate(enc.offset_mapping) if end > len(prompt))
    lp = torch.log_softmax(lm.model(input_ids=torch.tensor([ids])).logits[0].float(), dim=-1)
    return float(sum(lp[j - 1, ids[j]] for j in range(first, len(ids))))


def _rows(plans) -> int:
    """Rows of the options packed as one token tree (each distinct prefix once)."""
    return tree_size([p.segment for p in plans])


def test_packed_scores_equal_a_plain_forward_per_option(lm):
    scorer = _scorer(lm)
    got = scorer.score(PROMPT, OPTIONS)
    assert [s.option for s in got] == OPTIONS
    for s in got:
        assert s.logprob_sum == pytest.approx(_plain(lm, PROMPT, s.option), abs=TOL)
        assert s.logprob_mean == pytest.approx(s.logprob_sum / s.num_tokens)
    assert scorer.stats.score_calls == 1 and scorer.stats.options_scored == len(OPTIONS)
    # the prompt once, then each distinct option prefix once; logits only where an option token is predicted
    ctx, plans, _ = scorer.tokens.split(PROMPT, OPTIONS)
    assert scorer.stats.forward_tokens == len(ctx) + _rows(plans)


def test_a_warm_prompt_gives_the_cold_scores(lm):
    scorer = _scorer(lm)
    cold = scorer.score(PROMPT, OPTIONS)
    tokens_before = scorer.stats.forward_tokens
    warm = scorer.score(PROMPT, OPTIONS)
    assert [a.logprob_sum for a in warm] == [a.logprob_sum for a in cold]  # same buffers, same pack: bit-equal
    assert scorer.stats.forward_tokens - tokens_before == _rows(scorer.tokens.split(PROMPT, OPTIONS)[1])  # no prompt again


@pytest.mark.parametrize("pack", [1, 7])
def test_small_packs_score_as_one_pack(lm, pack):
    whole = _scorer(lm).score(PROMPT, OPTIONS)
    scorer = _scorer(lm, max_pack_tokens=pack)
    chunks = scorer.chunks(scorer.tokens.split(PROMPT, OPTIONS)[1])
    assert len(chunks) > 1 and sorted(i for c in chunks for i in c) == list(range(len(OPTIONS)))
    small = scorer.score(PROMPT, OPTIONS)
    assert np.allclose([s.logprob_sum for s in small], [s.logprob_sum for s in whole], atol=TOL, rtol=0)


def test_the_tree_runs_each_shared_prefix_once_and_scores_as_the_flat_packing(lm):
    tree, flat = _scorer(lm), _scorer(lm)
    flat.share_prefixes = False
    shared, alone = tree.score(PROMPT, OPTIONS), flat.score(PROMPT, OPTIONS)
    plans = tree.tokens.split(PROMPT, OPTIONS)[1]
    assert flat.stats.forward_tokens - tree.stats.forward_tokens == sum(len(p.segment) for p in plans) - _rows(plans) > 0
    assert tree.stats.logit_positions < flat.stats.logit_positions  # a shared row's logits once
    assert np.allclose([s.logprob_sum for s in shared], [s.logprob_sum for s in alone], atol=TOL, rtol=0)


def test_reference_path_agrees_and_ranks_the_sensible_option_first(lm):
    scorer = _scorer(lm)
    fast = {s.option: s.logprob_sum for s in scorer.score(PROMPT, OPTIONS)}
    slow = {s.option: s.logprob_sum for s in scorer.score_reference(PROMPT, OPTIONS)}
    assert max(abs(fast[o] - slow[o]) for o in OPTIONS) < TOL
    assert fast[" pick up the coke can"] > fast[" put down the sponge"]


@torch.inference_mode()
def test_packed_top_k_are_the_most_likely_tokens(lm):
    scorer = _scorer(lm)
    pr = scorer.prepare(PROMPT, OPTIONS[:3])
    lps, tops, _ = scorer.packed(pr, top_k=3)
    for plan, lp, top in zip(pr.plans, lps, tops):
        assert len(lp) == len(top) == len(plan.segment) - plan.scored_from
        for value, (ids, values) in zip(lp, top):
            assert list(values) == sorted(values, reverse=True) and value <= values[0] + 1e-6


def test_option_score_sums_and_normalises():
    s = option_score("x", [-1.0, -2.0, -0.5])
    assert (s.logprob_sum, s.logprob_mean, s.num_tokens) == (-3.5, pytest.approx(-3.5 / 3), 3)
    assert math.isfinite(s.logprob_mean)


class _Forwards:
    """Counts the model's forwards."""

    def __init__(self, model):
        self.n = 0
        self.handle = model.register_forward_pre_hook(lambda *_: setattr(self, "n", self.n + 1))


@pytest.mark.parametrize("pack", [512, 7])
def test_a_warm_step_runs_its_prompt_tail_in_the_options_forward(lm, pack):
    step1, step2 = PROMPT[: PROMPT.index(" 1.")] + " 1.", PROMPT  # the next step's prompt extends the last
    fused, alone = _scorer(lm, pack), _scorer(lm, pack)
    alone.fuse_tail = False
    for s in (fused, alone):
        s.score(step1, OPTIONS)
    counter = _Forwards(lm.model)
    try:
        got = fused.score(step2, OPTIONS)
        n_fused = counter.n
        counter.n = 0
        want = alone.score(step2, OPTIONS)
        n_alone = counter.n
        counter.n = 0
        again = fused.score(step2, OPTIONS)  # the fused forward cached the whole context
        n_again = counter.n
    finally:
        counter.handle.remove()
    n_chunks = len(fused.chunks(fused.tokens.split(step2, OPTIONS)[1]))
    assert (n_fused, n_alone, n_again) == (n_chunks, n_chunks + 1, n_chunks)
    for a, b, c in zip(got, want, again):
        assert a.logprob_sum == pytest.approx(b.logprob_sum, abs=TOL) and c.logprob_sum == pytest.approx(b.logprob_sum, abs=TOL)
        assert a.logprob_sum == pytest.approx(_plain(lm, step2, a.option), abs=TOL)
    packed_tokens = _rows(fused.tokens.split(step2, OPTIONS)[1])
    assert fused.stats.forward_tokens - packed_tokens == alone.stats.forward_tokens  # the same tokens, fewer forwards
