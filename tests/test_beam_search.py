"""Diverse beam search (SayCanPay's Say step): the cached tree-attention search equals an uncached
reference, plain beam search (one group) equals transformers' own, diversity changes the groups."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from groundplan.core.errors import InvalidInputError
from groundplan.llm.beam_search import (
    BeamSearchParams,
    _search,
    diverse_beam_search,
    propose,
    reference_beam_search,
)
from tests.conftest import tiny_llama_lm

PROMPT = "[Goal] bring me a coke can.\n[Initial State] The robot is at the user.\n[Step 1]"


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory):
    """An HFLanguageModel over a 2-layer random Llama with SmolLM2's tokenizer (fast, deterministic)."""
    return tiny_llama_lm(tmp_path_factory.mktemp("tiny-llama"), seed=0)


def _key(cands):
    return [(c.group, c.text, c.num_tokens, round(c.score, 3), round(c.logprob_sum, 3)) for c in cands]


@pytest.mark.parametrize("params", [
    BeamSearchParams(num_beams=6, num_groups=3, diversity_penalty=2.0, max_new_tokens=6, stop=()),
    BeamSearchParams(num_beams=4, num_groups=2, diversity_penalty=0.5, max_new_tokens=5, stop=(" ",)),
])
def test_cached_search_equals_uncached_reference(tiny_lm, params):
    tiny_lm.cache.clear()
    fast = diverse_beam_search(tiny_lm, PROMPT, params)
    slow = reference_beam_search(tiny_lm, PROMPT, params)
    assert len(fast) == params.num_beams
    assert _key(fast) == _key(slow)
    again = diverse_beam_search(tiny_lm, PROMPT, params)  # warm prefix cache: same answer
    assert _key(again) == _key(fast)


def test_beam_memo_returns_the_first_search_and_is_bounded(tiny_lm):
    params = BeamSearchParams(num_beams=6, num_groups=3, diversity_penalty=2.0, max_new_tokens=5, stop=())
    other = BeamSearchParams(num_beams=4, num_groups=2, diversity_penalty=2.0, max_new_tokens=5, stop=())
    tiny_lm._beam_memo.clear()
    before = (tiny_lm.stats.beam_searches, tiny_lm.stats.beam_memo_hits)
    first = tiny_lm.beam_candidates(PROMPT, params)
    assert _key(first) == _key(diverse_beam_search(tiny_lm, PROMPT, params))
    assert _key(tiny_lm.beam_candidates(PROMPT, params)) == _key(first)  # a hit
    assert len(tiny_lm.beam_candidates(PROMPT, other)) == 4  # other parameters: a miss
    assert len(tiny_lm.beam_candidates(PROMPT + " go", params)) == 6  # another prompt: a miss
    assert (tiny_lm.stats.beam_searches - before[0], tiny_lm.stats.beam_memo_hits - before[1]) == (4, 1)
    size = tiny_lm.beam_memo_size
    try:
        tiny_lm.beam_memo_size = 2
        tiny_lm.beam_candidates(PROMPT + " now", params)
        assert len(tiny_lm._beam_memo) == 2  # the oldest went
        tiny_lm.beam_memo_size = 0
        hits = tiny_lm.stats.beam_memo_hits
        tiny_lm.beam_candidates(PROMPT, params)
        assert tiny_lm.stats.beam_memo_hits == hits  # disabled
    finally:
        tiny_lm.beam_memo_size = size


def test_a_seeded_sampling_repeated_is_answered_from_the_sample_memo(tiny_lm):
    from groundplan.llm.base import GenerationParams

    params = GenerationParams(n=4, temperature=0.8, max_new_tokens=6, seed=7)
    hits = tiny_lm.stats.sample_memo_hits
    first = tiny_lm.generate(PROMPT, params)
    size = tiny_lm.sample_memo_size
    try:
        tiny_lm.sample_memo_size = 0  # disabled: the seed alone draws the same samples again
        assert tiny_lm.generate(PROMPT, params) == first and tiny_lm.stats.sample_memo_hits == hits
    finally:
        tiny_lm.sample_memo_size = size
    assert tiny_lm.generate(PROMPT, params) == first and tiny_lm.stats.sample_memo_hits == hits + 1
    tiny_lm.generate(PROMPT, GenerationParams(n=4, temperature=0.8, max_new_tokens=6, seed=8))
    tiny_lm.generate(PROMPT, GenerationParams(n=4, temperature=0.8, max_new_tokens=6))  # unseeded: never kept
    tiny_lm.generate(PROMPT, GenerationParams(n=4, temperature=0.8, max_new_tokens=6))
    assert tiny_lm.stats.sample_memo_hits == hits + 1


def test_one_group_equals_transformers_beam_search(tiny_lm):
    params = BeamSearchParams(num_beams=4, num_groups=1, diversity_penalty=0.0, max_new_tokens=4, stop=())
    ours = sorted(diverse_beam_search(tiny_lm, PROMPT, params), key=lambda c: -c.score)
    ids = torch.as_tensor(tiny_lm._encode(PROMPT)).unsqueeze(0)
    out = tiny_lm.model.generate(ids, attention_mask=torch.ones_like(ids), num_beams=4, num_return_sequences=4,
                                 max_new_tokens=4, do_sample=False, length_penalty=1.0, early_stopping=True,
                                 output_scores=True, return_dict_in_generate=True, pad_token_id=0)
    theirs = [tiny_lm.tokenizer.decode(s[ids.shape[1]:], skip_special_tokens=True) for s in out.sequences]
    assert [c.text for c in ours] == theirs
    np.testing.assert_allclose([c.score for c in ours], out.sequences_scores.numpy(), atol=1e-3)
    # with one group there is no penalty: the ranking score is the model's own mean log-prob
    for c in ours:
        assert c.score == pytest.approx(c.logprob_mean, abs=1e-6)


def test_diversity_penalty_pushes_groups_apart():
    """A 3-token toy: without a penalty every group takes token 0 first; with one, later groups avoid it."""
    lp = np.log(np.array([0.6, 0.3, 0.1]))

    def step(paths, parents, tokens):
        return np.repeat(lp[None], len(tokens), axis=0)

    decode = lambda ids: "".join("abc"[i] for i in ids)  # noqa: E731
    same = _search(lp, step, BeamSearchParams(num_beams=3, num_groups=3, diversity_penalty=0.0, max_new_tokens=1, stop=()), set(), decode)
    apart = _search(lp, step, BeamSearchParams(num_beams=3, num_groups=3, diversity_penalty=2.0, max_new_tokens=1, stop=()), set(), decode)
    assert [c.text for c in same] == ["a", "a", "a"]
    assert [c.text for c in apart] == ["a", "b", "c"]
    # group 1 saw 'a' penalised by 2.0 (log .6 - 2 < log .3); group 2 saw 'a' and 'b' penalised
    assert apart[2].score == pytest.approx(np.log(0.1))
    more = _search(lp, step, BeamSearchParams(num_beams=3, num_groups=3, diversity_penalty=0.5, max_new_tokens=1, stop=()), set(), decode)
    assert [c.text for c in more] == ["a", "a", "b"]  # a penalty of 0.5 does not outweigh log .6 - log .3
    assert more[1].logprob_sum == pytest.approx(np.log(0.6))  # p_say is the model's own, unpenalised
    assert more[1].score == pytest.approx(np.log(0.6) - 0.5)


def test_stop_string_ends_a_candidate_and_its_token_counts():
    lp = np.log(np.array([0.5, 0.4, 0.1]))  # tokens: a, b, newline

    def step(paths, parents, tokens):
        return np.repeat(np.log(np.array([0.1, 0.1, 0.8]))[None], len(tokens), axis=0)

    cands = _search(lp, step, BeamSearchParams(num_beams=2, num_groups=1, diversity_penalty=0.0, max_new_tokens=5, stop=("\n",)),
                    set(), lambda ids: "".join("ab\n"[i] for i in ids))
    assert sorted(c.text for c in cands) == ["a", "b"]
    a = next(c for c in cands if c.text == "a")
    assert a.num_tokens == 2 and a.finish_reason == "stop"
    assert a.logprob_sum == pytest.approx(np.log(0.5) + np.log(0.8))


def test_bad_params_and_backends_are_refused():
    with pytest.raises(InvalidInputError):
        BeamSearchParams(num_beams=5, num_groups=3)
    with pytest.raises(InvalidInputError, match="beam_candidates"):
        propose(object(), "x", BeamSearchParams())


def test_the_scorer_host_proposes_by_beam_search_for_remote_planners(tiny_lm):
    """Episode workers reach the model through the scorer host (eval's Ray actor, Serve, --local): its beam
    search is the model's own, and a host whose model has none says so."""
    import asyncio

    from groundplan.actors.scorer import LLMScorer
    from tests.fakes import FakeLM

    params = BeamSearchParams(num_beams=4, num_groups=2, max_new_tokens=4)
    host = LLMScorer(lm_factory=lambda: tiny_lm, num_threads=0)
    remote = asyncio.run(host.beam_candidates(PROMPT, params))
    assert _key(remote) == _key(propose(tiny_lm, PROMPT, params))
    plain = LLMScorer(lm_factory=lambda: FakeLM.following(["a"]), num_threads=0)
    with pytest.raises(InvalidInputError, match="cannot propose candidates by beam search"):
        asyncio.run(plain.beam_candidates(PROMPT, params))
