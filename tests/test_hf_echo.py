"""Per-token prompt log-probs (``groundplan.llm.hf_echo``) on the embedded SmolLM2: every token's log-prob and
top tokens are a plain forward's, and a text sharing a cached prefix runs only its new tokens."""
from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from groundplan.core.errors import InvalidInputError
from groundplan.llm.hf_echo import TOP_LOGPROBS, EchoScorer, NextLogits, ScoredEntry
from groundplan.llm.hf_kv import KVContext
from groundplan.llm.hf_scoring import PackedScorer
from groundplan.llm.hf_stats import EngineStats
from groundplan.llm.hf_tokens import BoundaryTokenizer
from groundplan.llm.prefix_cache import PrefixCache

PROMPT = "Human: How would you bring me a coke can?\nRobot: 1. find a coke can, 2."
OPTIONS = [" pick up the coke can", " go to the table", " done"]
TOL = 1e-4  # float32 rounding of a packed or cached forward against a plain one (about 1e-5)


def _echo(lm) -> EchoScorer:
    stats = EngineStats()
    kv = KVContext(lm.model, PrefixCache(1 << 28), stats, 512)
    return EchoScorer(PackedScorer(BoundaryTokenizer(lm.tokenizer, stats), kv, stats, threading.RLock()), PrefixCache(1 << 28),
                      NextLogits(1 << 26))


@torch.inference_mode()
def _plain(lm, text: str) -> tuple[list[int], torch.Tensor]:
    ids = lm.tokenizer(text).input_ids
    return ids, torch.log_softmax(lm.model(input_ids=torch.tensor([ids])).logits[0].float(), dim=-1)


def test_each_tokens_log_prob_and_top_tokens_are_a_plain_forwards(lm):
    echo = _echo(lm)
    texts = [PROMPT + o for o in OPTIONS]
    got = echo.prompt_logprobs(texts, top_k=2)
    for text, p in zip(texts, got):
        ids, lp = _plain(lm, text)
        assert list(p.token_ids) == ids and p.text == text and p.logprobs[0] is None and p.top[0] == ()
        want = [float(lp[j - 1, ids[j]]) for j in range(1, len(ids))]
        assert np.allclose(p.logprobs[1:], want, atol=TOL, rtol=0)
        assert "".join(p.tokens) == text and p.offsets[0] == 0
        for j in range(1, len(ids)):
            best = lp[j - 1].topk(2)
            assert len(p.top[j]) == 2
            assert p.top[j][0][0] == echo.top(best.indices.numpy(), best.values.numpy(), 1)[0][0]
            assert p.top[j][0][1] == pytest.approx(float(best.values[0]), abs=TOL)
    assert echo.scorer.stats.prompt_logprob_texts == len(texts)


def test_a_text_sharing_a_cached_prefix_runs_only_its_new_tokens(lm):
    echo = _echo(lm)
    first = echo.prompt_logprobs([PROMPT + OPTIONS[0]])[0]
    assert len(echo.scored_cache) == 1 and isinstance(next(iter(echo.scored_cache._entries.values())), ScoredEntry)
    before = echo.scorer.stats.forward_tokens
    second = echo.prompt_logprobs([PROMPT + OPTIONS[1]])[0]
    shared = next(j for j, (a, b) in enumerate(zip(first.token_ids, second.token_ids)) if a != b)
    assert echo.scorer.stats.forward_tokens - before <= len(second.token_ids) - shared + 1
    _, lp = _plain(lm, PROMPT + OPTIONS[1])
    ids = second.token_ids
    assert np.allclose(second.logprobs[1:], [float(lp[j - 1, ids[j]]) for j in range(1, len(ids))], atol=TOL, rtol=0)
    assert second.logprobs[1:shared] == first.logprobs[1:shared]  # the cached positions, as they were


def test_token_ids_and_one_token_texts(lm):
    echo = _echo(lm)
    ids = lm.tokenizer(PROMPT).input_ids
    from_ids, from_text = echo.prompt_logprobs([ids, PROMPT])
    assert from_ids.token_ids == from_text.token_ids and from_ids.offsets == from_text.offsets
    assert np.allclose(from_ids.logprobs[1:], from_text.logprobs[1:], atol=TOL, rtol=0)
    lone = echo.prompt_logprobs(["Hi"])[0]
    assert lone.logprobs == (None,) * len(lone.token_ids)  # nothing to condition the first token on


def test_scored_entry_counts_its_arrays_and_top_k_is_bounded(lm):
    kv = [(torch.zeros(1, 1, 4, 2), torch.zeros(1, 1, 4, 2))]
    plain = ScoredEntry(tokens=np.arange(4), kv=kv, last_logits=torch.zeros(3))
    full = ScoredEntry(tokens=np.arange(4), kv=kv, last_logits=torch.zeros(3), token_lp=np.zeros(4, dtype=np.float32),
                       top_ids=np.zeros((4, TOP_LOGPROBS), dtype=np.int64), top_lp=np.zeros((4, TOP_LOGPROBS), dtype=np.float32))
    assert full.nbytes - plain.nbytes == 4 * 4 + 4 * TOP_LOGPROBS * 8 + 4 * TOP_LOGPROBS * 4
    with pytest.raises(InvalidInputError, match="top_k"):
        _echo(lm).prompt_logprobs([PROMPT], top_k=TOP_LOGPROBS + 1)


def test_a_groups_new_context_tail_runs_in_the_options_forward(lm):
    """A step's texts whose shared prompt extends a cached one by a few tokens (the next SayCan step, sent
    as ``prompt + option`` texts): the prompt's new positions run as the first rows of the options' one
    forward, with every position's log-prob and top tokens a plain forward's, and the prompt is cached."""
    echo = _echo(lm)
    echo.prompt_logprobs([PROMPT + o for o in OPTIONS], top_k=1)
    # long enough that packing it with every text costs more than the group's context (group_context's slack),
    # short enough to run in the options' forward (FUSE_TAIL_MAX)
    step = PROMPT + " pick up the coke can, 3. go to the kitchen counter, 4. put down the coke can, 5."
    texts = [step + o for o in OPTIONS]
    calls = []
    # the decoder body: every forward runs it (a context's own forward calls it without the LM head)
    hook = lm.model.base_model.register_forward_pre_hook(lambda module, args: calls.append(1))
    try:
        got = echo.prompt_logprobs(texts, top_k=1)
    finally:
        hook.remove()
    assert len(calls) == 1  # the new context tail and the three options in one forward
    for text, p in zip(texts, got):
        ids, lp = _plain(lm, text)
        assert list(p.token_ids) == ids and "".join(p.tokens) == text
        assert np.allclose(p.logprobs[1:], [float(lp[j - 1, ids[j]]) for j in range(1, len(ids))], atol=TOL, rtol=0)
        for j in range(1, len(ids)):
            assert p.top[j][0][1] == pytest.approx(float(lp[j - 1].max()), abs=TOL)
    before, ran = echo.scorer.stats.forward_tokens, sum(len(p.token_ids) for p in got)
    again = echo.prompt_logprobs(texts, top_k=1)  # the prompt is cached now: only option tokens (and a few) run
    assert echo.scorer.stats.forward_tokens - before < ran - 2 * len(echo.scorer.tokens.prompt_tokens(step)[1])
    for a, g in zip(again, got):
        assert np.allclose(a.logprobs[1:], g.logprobs[1:], atol=TOL, rtol=0)
