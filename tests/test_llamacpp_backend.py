"""The in-process ``llamacpp`` backend (``groundplan.llm.llamacpp_backend``) on the embedded SmolLM2 GGUF:
options scored as forked llama.cpp sequences over the prompt's KV equal llama.cpp's own evaluation of each
``prompt + option``, agree with the float32 hf backend within the quantisation, survive prefix reuse, and
sampling follows ``GenerationParams``.

llama.cpp's CPU kernels are not batch-invariant: a token's logits depend a little on how many tokens the
``llama_decode`` batch that computed it (and its prefix) held. Measured here (llama-cpp-python 0.3.36,
AVX-512 CPU, 1 thread): the same (prompt, option) split at the same token gives identical log-probs (0.0);
split differently (one whole evaluation, or a prompt extended by a few tokens after reuse) it moves the
option's log-prob sum by up to 0.29 (whole evaluation) and 0.46 (prefix reuse) nats. The tolerances below
are those measurements with a margin."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("llama_cpp")

from groundplan.core.errors import InvalidInputError  # noqa: E402
from groundplan.llm import backend_capabilities, load_llm  # noqa: E402
from groundplan.llm.base import GenerationParams  # noqa: E402
from groundplan.llm.llamacpp_scoring import score_plans  # noqa: E402

SHORT = ("Robot: Hi there, I'm a robot operating in a kitchen.\nHuman: How would you bring me a coke can?\n"
         "Robot: 1. find a coke can, 2.")
FEW_SHOT = ("Robot: Hi there, I'm a robot operating in a kitchen. You can ask me to do various tasks and I'll tell "
            "you the sequence of actions I would do to accomplish your task.\n"
            "Human: How would you hold the snickers?\nRobot: 1. pick up the snickers, 2. done.\n"
            "Human: How would you put the trailmix here?\nRobot: 1. put down the trailmix, 2. done.\n"
            "Human: How would you throw away the apple?\nRobot: 1. find an apple, 2. pick up the apple, 3. go to "
            "the trash can, 4. put down the apple, 5. done.\n"
            "Human: How would you bring me an apple?\nRobot: 1.")
OPTIONS = [" pick up the coke can", " go to the table", " find an apple", " put down the sponge", " done",
           " pick up the apple", " go to the counter", " bring it to you", " find a sponge", "pickup"]
#: the same split of the same tokens: measured 0.0
SAME_SPLIT_TOL = 1e-4
#: one whole evaluation of prompt + option against the packed batch: measured 0.0 (SHORT), 0.29 (FEW_SHOT)
WHOLE_TOL = 0.5
#: prompt extended after reuse against a cold model: measured up to 0.46 (a 1-33-token extension)
REUSE_TOL = 0.6
#: against the float32 hf backend (Q4_1 weights, 8-bit activations): measured 0.34 (SHORT), 0.16 (FEW_SHOT)
HF_TOL = 0.6


def _sums(scores) -> np.ndarray:
    return np.array([s.logprob_sum for s in scores])


@pytest.fixture(scope="module")
def cpp():
    return load_llm("llamacpp", model="smollm2-135m-instruct", n_ctx=512, n_threads=1)


def test_options_class_declares_what_it_can_do():
    caps = backend_capabilities("llamacpp")
    assert (caps.score, caps.generate, caps.beam_search, caps.prompt_logprobs) == (True, True, False, False)


@pytest.mark.parametrize("prompt, subset", [(SHORT, slice(None)), (FEW_SHOT, slice(2, 6))], ids=["short", "few_shot"])
def test_forked_sequences_score_as_llamacpp_evaluates_each_option(cpp, prompt, subset):
    cpp.reset()
    cpp.score(prompt, OPTIONS[:1])  # the context in sequence 0: below, each call evaluates its last token again
    packed = cpp.score(prompt, OPTIONS)
    assert [s.option for s in packed] == OPTIONS and all(s.num_tokens >= 1 for s in packed)
    assert all(s.logprob_mean == pytest.approx(s.logprob_sum / s.num_tokens) for s in packed)
    # the same split (context, then one option alone in its own batch): the KV sharing changes nothing
    ctx, plans, _ = cpp._tokens.split(prompt, OPTIONS)
    alone = [sum(score_plans(cpp._kv, ctx, [plan])[0]) for plan in plans]
    assert np.abs(_sums(packed) - np.array(alone)).max() < SAME_SPLIT_TOL
    # the naive reference: each prompt + option evaluated whole (FEW_SHOT: 4 options, to save time)
    ours = _sums(packed)[subset]
    whole = _sums(cpp.score_reference(prompt, OPTIONS[subset]))
    assert np.abs(ours - whole).max() < WHOLE_TOL and np.argmax(ours) == np.argmax(whole)


def test_the_token_tree_evaluates_each_shared_prefix_once_and_scores_as_the_flat_batch(cpp):
    cpp.reset()
    cpp.score(FEW_SHOT, OPTIONS[:1])
    ctx, plans, _ = cpp._tokens.split(FEW_SHOT, OPTIONS)
    counted = {}
    for share in (False, True):
        before = cpp.stats.option_tokens_evaluated
        counted[share] = (score_plans(cpp._kv, ctx, plans, share), cpp.stats.option_tokens_evaluated - before)
    (flat, flat_rows), (tree, tree_rows) = counted[False], counted[True]
    assert flat_rows == sum(len(p.segment) - 1 for p in plans)  # the flat batch: every option's own tokens
    prefixes = {tuple(p.segment[:j]) for p in plans for j in range(1, len(p.segment))}
    assert tree_rows == len(prefixes) < flat_rows  # " pick up the" and " go to the" once each
    assert np.abs(np.array([sum(x) for x in flat]) - np.array([sum(x) for x in tree])).max() < SAME_SPLIT_TOL
    # more options than sequence ids: several trees, the same scores
    small = load_llm("llamacpp", model="smollm2-135m-instruct", n_ctx=512, n_threads=1, n_seq_max=3)
    assert np.abs(_sums(small.score(FEW_SHOT, OPTIONS)) - _sums(cpp.score(FEW_SHOT, OPTIONS))).max() < REUSE_TOL


def test_agrees_with_the_hf_backend(cpp, lm):
    for prompt, top in ((SHORT, " bring it to you"), (FEW_SHOT, " pick up the apple")):
        cpp.reset()
        got, ref = cpp.score(prompt, OPTIONS), lm.score(prompt, OPTIONS)
        ours, theirs = _sums(got), _sums(ref)
        assert OPTIONS[int(np.argmax(ours))] == OPTIONS[int(np.argmax(theirs))] == top
        assert np.abs(ours - theirs).max() < HF_TOL
        assert [s.num_tokens for s in got] == [s.num_tokens for s in ref]  # the same token boundary


def test_a_prompt_that_extends_the_last_reuses_it(cpp):
    cold = load_llm("llamacpp", model="smollm2-135m-instruct", n_ctx=512, n_threads=1)
    fresh = _sums(cold.score(FEW_SHOT, OPTIONS))
    cpp.reset()
    cpp.score(FEW_SHOT[:-60], OPTIONS)
    before = cpp.stats.prompt_tokens_reused
    warm = _sums(cpp.score(FEW_SHOT, OPTIONS))
    assert cpp.stats.prompt_tokens_reused - before > 100  # the few-shot part was not evaluated again
    assert np.abs(warm - fresh).max() < REUSE_TOL and np.argmax(warm) == np.argmax(fresh)
    # the same prompt again reuses all but its last token and gives the same scores exactly
    assert np.abs(_sums(cpp.score(FEW_SHOT, OPTIONS)) - warm).max() < SAME_SPLIT_TOL


def test_score_refuses_an_empty_option_list_and_batches(cpp):
    with pytest.raises(InvalidInputError):
        cpp.score(SHORT, [])
    got = cpp.score_batch([(SHORT, OPTIONS[:2]), (FEW_SHOT, OPTIONS[2:4])])
    assert [[s.option for s in r] for r in got] == [OPTIONS[:2], OPTIONS[2:4]]


def test_generate_greedy_stops_and_samples(cpp):
    greedy = GenerationParams(n=2, temperature=0, max_new_tokens=8)
    a, b = cpp.generate(SHORT, greedy), cpp.generate(SHORT, greedy)
    assert a == b and a[0] == a[1] and a[0].num_tokens == 8 and a[0].finish_reason == "length"
    assert a[0].logprob_mean < 0 and "," in a[0].text  # SmolLM2 goes on: " find a coke can, 3"
    cut = cpp.generate(SHORT, GenerationParams(n=1, temperature=0, max_new_tokens=8, stop=(",",)))[0]
    assert cut.finish_reason == "stop" and cut.text == a[0].text.split(",")[0] and cut.num_tokens < 8
    samples = cpp.generate(SHORT, GenerationParams(n=3, temperature=1.0, top_p=0.9, max_new_tokens=5, seed=3,
                                                   repetition_penalty=1.2))
    assert len(samples) == 3 and all(1 <= s.num_tokens <= 5 for s in samples)
    again = cpp.generate(SHORT, GenerationParams(n=3, temperature=1.0, top_p=0.9, max_new_tokens=5, seed=3,
                                                 repetition_penalty=1.2))
    assert samples == again  # the seed makes sampling reproducible


def test_load_llm_builds_it_and_unknown_options_are_refused(cpp):
    from groundplan.config import LLMSpec
    from groundplan.llm.llamacpp_backend import LlamaCppLanguageModel, LlamaCppOptions

    assert isinstance(cpp, LlamaCppLanguageModel) and cpp.name == "smollm2-135m-instruct"
    with pytest.raises(ValueError, match="n_ctxx"):
        LLMSpec(backend="llamacpp", options={"n_ctxx": 1024})
    with pytest.raises(ValueError):
        LlamaCppOptions(n_seq_max=0)
    with pytest.raises(TypeError):
        load_llm("llamacpp", model="smollm2-135m-instruct", n_ctxx=1024)
    with pytest.raises(InvalidInputError, match="GGUF"):
        load_llm("llamacpp", model="/nonexistent/model.gguf")


def test_without_llama_cpp_building_says_how_to_install(monkeypatch):
    import builtins

    from groundplan.llm.llamacpp_backend import LlamaCppLanguageModel

    real = builtins.__import__

    def no_llama(name, *args, **kwargs):
        if name == "llama_cpp" or name.startswith("llama_cpp."):
            raise ImportError("No module named 'llama_cpp'")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_llama)
    with pytest.raises(InvalidInputError, match=r"pip install 'groundplan\[llamacpp\]'"):
        LlamaCppLanguageModel()
