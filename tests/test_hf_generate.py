"""Generation (``groundplan.llm.hf_generate``): packed sampling over the cached prompt and the beam memo, on a
2-layer random Llama with SmolLM2's tokenizer (fast, deterministic)."""
from __future__ import annotations

import math
import threading

import numpy as np
import pytest
import torch

from groundplan.llm.base import GenerationParams
from groundplan.llm.beam_search import BeamSearchParams, reference_beam_search
from groundplan.llm.hf_echo import NextLogits
from groundplan.llm.hf_generate import DecodeMemo, Sampler
from groundplan.llm.sampling import find_stop as _find_stop
from groundplan.llm.sampling import finish as _finish
from groundplan.llm.sampling import repetition_penalty as _repetition_penalty
from groundplan.llm.sampling import sample as _sample
from groundplan.llm.hf_kv import KVContext
from groundplan.llm.hf_stats import EngineStats
from tests.conftest import tiny_llama_lm
from groundplan.llm.hf_tokens import BoundaryTokenizer
from groundplan.llm.prefix_cache import PrefixCache

PROMPT = "[Goal] bring me a coke can.\n[Initial State] The robot is at the user.\n[Step 1]"
TOL = 1e-4  # a cached step's float32 rounding against another layout's


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """An HFLanguageModel over a 2-layer random Llama, its logits sharpened so greedy choices are clear."""
    return tiny_llama_lm(tmp_path_factory.mktemp("tiny-llama-generate"), seed=1)


def _sampler(lm) -> Sampler:
    stats = EngineStats()
    return Sampler(BoundaryTokenizer(lm.tokenizer, stats), KVContext(lm.model, PrefixCache(1 << 26), stats, 64), stats,
                   threading.RLock(), NextLogits(1 << 26))


@torch.inference_mode()
def _greedy_reference(lm, prompt: str, steps: int) -> tuple[list[int], list[float]]:
    """Greedy decoding with one full uncached forward per step."""
    ids = lm.tokenizer(prompt).input_ids
    out, lps = [], []
    for _ in range(steps):
        lp = torch.log_softmax(lm.model(input_ids=torch.tensor([ids + out])).logits[0, -1].float(), dim=-1)
        out.append(int(lp.argmax()))
        lps.append(float(lp[out[-1]]))
    return out, lps


def test_greedy_equals_uncached_greedy_and_packed_samples_do_not_see_each_other(tiny):
    sampler = _sampler(tiny)
    ids, lps = _greedy_reference(tiny, PROMPT, 6)
    assert not set(ids) & sampler.tokens.eos
    gens = sampler.generate(PROMPT, GenerationParams(n=3, temperature=0.0, max_new_tokens=6, stop=()))
    want = tiny.tokenizer.decode(ids, skip_special_tokens=True)
    for g in gens:  # three identical greedy samples, packed side by side: each decodes as a lone one
        assert (g.text, g.num_tokens, g.finish_reason) == (want, 6, "length")
        assert g.logprob_mean == pytest.approx(sum(lps) / 6, abs=TOL)


def test_a_seed_fixes_the_samples(tiny):
    params = GenerationParams(n=4, temperature=1.0, top_p=0.9, max_new_tokens=5, stop=(), seed=11)
    a = _sampler(tiny).generate(PROMPT, params)
    b = _sampler(tiny).generate(PROMPT, params)
    assert [(g.text, g.logprob_mean) for g in a] == [(g.text, g.logprob_mean) for g in b]


def test_finish_cuts_at_the_stop_and_counts_the_tokens_before_it(tiny):
    sampler = _sampler(tiny)
    eos_ids = sampler.tokens.eos

    def finish(tokens, lps, reason, stop):
        return _finish(tokens, lps, reason, stop, lambda ids: tiny.tokenizer.decode(ids, skip_special_tokens=True), eos_ids)

    tokens = tiny.tokenizer("go home\nnext").input_ids
    g = finish(tokens, [-1.0] * (len(tokens) - 1) + [-5.0], "stop", ["\n"])
    assert g.text == "go home"
    assert g.num_tokens == len(tiny.tokenizer("go home").input_ids)
    assert g.logprob_mean == -1.0  # the tokens after the stop are not averaged
    eos = next(iter(sampler.tokens.eos))
    g = finish(tokens[:2] + [eos], [-1.0, -3.0, -7.0], "stop", [])
    assert (g.num_tokens, g.logprob_mean) == (2, -2.0)  # EOS is not the text's
    assert g.tokens is None  # no per-token log-probs unless asked for
    decode = lambda ids: tiny.tokenizer.decode(ids, skip_special_tokens=True)  # noqa: E731
    tops = [(("x", -0.5),)] * len(tokens)
    g = _finish(tokens, [-1.0] * len(tokens), "stop", ["me\n"], decode, eos_ids, tops)  # the stop inside a token
    assert g.text == "go ho" and "".join(t.token for t in g.tokens) == g.text
    assert [t.offset for t in g.tokens] == [len(decode(tokens[:j])) for j in range(len(g.tokens))]
    assert g.tokens[0].top == (("x", -0.5),) and g.tokens[-1].token == " ho"  # " home" cut where the text is
    g = _finish(tokens[:2] + [eos], [-1.0, -3.0, -7.0], "stop", [], decode, eos_ids, tops[:3])
    assert [t.logprob for t in g.tokens] == [-1.0, -3.0]  # EOS has no piece of the text


def test_sampling_rules_on_hand_made_distributions():
    lp = torch.log(torch.tensor([[0.6, 0.3, 0.1]]))
    gen = torch.Generator().manual_seed(0)
    assert _sample(lp, 0.0, 1.0, gen) == [0]
    assert {_sample(lp, 1.0, 0.5, gen)[0] for _ in range(50)} == {0}  # the top token alone reaches 0.5
    assert {_sample(lp, 1.0, 0.7, gen)[0] for _ in range(200)} == {0, 1}
    logits = torch.tensor([[2.0, -2.0, 1.0]])
    seen = torch.tensor([[True, True, False]])
    assert _repetition_penalty(logits, seen, 2.0).tolist() == [[1.0, -4.0, 1.0]]
    assert _find_stop("a, b\nc", [",", "\n"]) == 1 and _find_stop("abc", ["\n"]) == -1


def test_one_beam_is_greedy_and_a_diverse_search_matches_the_uncached_one(tiny):
    ids, lps = _greedy_reference(tiny, PROMPT, 6)
    one = tiny.beam_candidates(PROMPT, BeamSearchParams(num_beams=1, num_groups=1, diversity_penalty=0.0,
                                                        max_new_tokens=6, stop=()))
    assert len(one) == 1
    assert (one[0].text, one[0].num_tokens, one[0].finish_reason) == (tiny.tokenizer.decode(ids, skip_special_tokens=True), 6, "length")
    assert one[0].logprob_sum == pytest.approx(sum(lps), abs=TOL)
    params = BeamSearchParams(num_beams=6, num_groups=3, diversity_penalty=2.0, max_new_tokens=5, stop=())
    fast = tiny.beam_candidates(PROMPT, params)
    slow = reference_beam_search(tiny, PROMPT, params)
    assert [(c.group, c.text, c.num_tokens) for c in fast] == [(c.group, c.text, c.num_tokens) for c in slow]
    assert all(math.isclose(a.score, b.score, abs_tol=TOL) for a, b in zip(fast, slow))
    assert [c.group for c in fast] == [0, 0, 1, 1, 2, 2]


def test_beam_memo_answers_a_repeat_and_stays_bounded(tiny):
    memo = DecodeMemo(2, EngineStats(), threading.RLock(), "beam_memo_hits")
    p = [BeamSearchParams(num_beams=2, num_groups=1, max_new_tokens=3, stop=(), diversity_penalty=0.0),
         BeamSearchParams(num_beams=2, num_groups=2, max_new_tokens=3, stop=(), diversity_penalty=1.0)]
    first = memo.candidates(tiny, PROMPT, p[0])
    assert memo.candidates(tiny, PROMPT, p[0]) == first and memo.stats.beam_memo_hits == 1
    memo.candidates(tiny, PROMPT, p[1])
    memo.candidates(tiny, PROMPT + " go", p[0])
    assert len(memo.entries) == 2 and memo.stats.beam_searches == 4
    again = memo.candidates(tiny, PROMPT, p[0])  # evicted (the oldest): searched again, the same candidates
    assert [c.text for c in again] == [c.text for c in first]
    # (within float32 rounding: the prompt's key/values now come from the longer prompt's cache entry)
    assert all(math.isclose(a.logprob_sum, b.logprob_sum, abs_tol=TOL) for a, b in zip(again, first))
    assert memo.stats.beam_memo_hits == 1


def test_generating_after_an_echo_copies_no_prompt_and_gives_the_same_tokens(tmp_path, monkeypatch):
    """A client's ``echo`` of ``prompt + option`` then a token after it (lm-evaluation-harness's
    ``max_tokens: 1``): with ``keep_next`` the token comes from the echo's own forward (no forward at all);
    a longer generate runs the option after the cached prompt in that entry's headroom (no copy, nothing
    cached). Both give what a fresh engine gives (greedy, the same tokens; log-probs within float32 rounding)."""
    lm = tiny_llama_lm(tmp_path / "m", seed=1, sample_memo_size=0)
    fresh = tiny_llama_lm(tmp_path / "f", seed=1, sample_memo_size=0)
    texts = [PROMPT + o for o in (" pick up the can", " go to the table", " done")]
    one = GenerationParams(n=2, temperature=0.0, max_new_tokens=1, stop=())
    lm.prompt_logprobs(texts, 1, keep_next=True)
    forwarded = lm.stats.forward_tokens
    encodes = []
    encode = lm._tokens.encode
    monkeypatch.setattr(lm._tokens, "encode", lambda text: encodes.append(text) or encode(text))
    for t in texts:
        got, want = lm.generate(t, one), fresh.generate(t, one)
        assert [g.text for g in got] == [g.text for g in want]
        assert got[0].logprob_mean == pytest.approx(want[0].logprob_mean, abs=TOL)
    assert lm.stats.kept_next_tokens == 3 and lm.stats.forward_tokens == forwarded  # no forward ran
    assert encodes == []  # the kept texts' ids came with their logits: nothing encoded again
    assert lm.generate(texts[0], one)[0].text == fresh.generate(texts[0], one)[0].text  # taken once: now a forward
    four = GenerationParams(n=1, temperature=0.0, max_new_tokens=4, stop=())
    lm.prompt_logprobs(texts, 0)
    entries = len(lm._kv.cache._entries)
    for t in texts:
        assert [g.text for g in lm.generate(t, four)] == [g.text for g in fresh.generate(t, four)]
    assert lm.stats.borrowed_contexts >= 3 and len(lm._kv.cache._entries) == entries  # borrowed, nothing cached


def test_a_penalty_near_zero_keeps_the_logits_finite():
    """The slow fuzz's find over the real engine: ``repetition_penalty`` 5e-324 (valid: any positive one)
    divided a positive logit to infinity, the softmax went NaN and the route answered 500."""
    from groundplan.llm.sampling import repetition_penalty

    logits = torch.tensor([[3.0, -2.0, 1.0]])
    out = repetition_penalty(logits, torch.tensor([[True, True, False]]), 5e-324)
    assert torch.isfinite(out).all() and out.argmax().item() == 0 and out[0, 2] == 1.0
    assert torch.isfinite(torch.log_softmax(out, dim=-1)).any()


def test_a_temperature_or_top_p_near_zero_samples_the_greedy_token():
    """The slow fuzz's finds over the real engine: ``temperature`` 5e-324 (valid: any positive one) divided
    every log-prob to -inf, the softmax went NaN and /v1/completions answered 500; ``top_p`` 5e-324 dropped
    every token. Both are greedy's limit."""
    from groundplan.llm.sampling import generator, sample

    logprobs = torch.log_softmax(torch.tensor([[0.5, 2.0, -1.0], [3.0, 0.0, 2.9]]), dim=-1)
    assert sample(logprobs, 5e-324, 1.0, generator(0)) == [1, 0]
    assert sample(logprobs, 5e-324, 0.5, generator(0)) == [1, 0]
    assert sample(logprobs, 1.0, 5e-324, generator(0)) == [1, 0]  # top-p near 0 keeps the top token
    flat = torch.log_softmax(torch.zeros(1, 49152), dim=-1)  # the largest log-prob as low as it gets
    assert 0 <= sample(flat, 5e-324, 1.0, generator(0))[0] < 49152


def test_kept_next_logits_know_their_text_until_taken_or_evicted():
    """A kept text's ids are found by its text while its logits are kept, and forgotten with them: taken by
    a generate, or evicted when the store is over its bytes."""
    row = torch.zeros(8)  # 32 bytes, 50 with a two-token text's ids (16) and the text (2)
    nexts = NextLogits(128)
    nexts.put(np.array([1, 2]), row, "ab")
    nexts.put(np.array([1, 3]), row, "ac")
    nexts.put(np.array([4]), row)  # token-id prompts keep no text
    assert nexts.ids_of("ab") is None and nexts.ids_of("ac").tolist() == [1, 3]  # "ab" evicted (132 bytes > 128)
    assert nexts.take(np.array([1, 3])) is row and nexts.ids_of("ac") is None and nexts.nbytes == 32
    assert nexts.take(np.array([1, 3])) is None
