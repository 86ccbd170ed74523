"""Tokenisation at the option boundary (``groundplan.llm.hf_tokens``), on the embedded SmolLM2 tokenizer alone
(no model): an option's tokens are those it gets inside ``prompt + option``."""
from __future__ import annotations

import numpy as np
import pytest

from groundplan.core.errors import InvalidInputError
from groundplan.llm.hf_stats import EngineStats
from groundplan.llm.hf_tokens import BoundaryTokenizer, _tokens_before


@pytest.fixture(scope="module")
def tokens() -> BoundaryTokenizer:
    from transformers import AutoTokenizer

    from groundplan.llm.loading import resolve_model_path

    return BoundaryTokenizer(AutoTokenizer.from_pretrained(resolve_model_path("smollm2-135m-instruct")), EngineStats())


def _texts(bt: BoundaryTokenizer, ids) -> list[str]:
    return [bt.token_text(int(i)) for i in ids]


def test_a_merge_across_the_boundary_moves_the_prompts_last_token_into_the_option(tokens):
    """'pine' + 'apple' is one token ' pineapple' that starts inside the prompt: the shared context stops
    before it, the option 'apple' is scored as that one token, and ' pear' (no merge) as ' pear' after
    ' pine', which is context tail, not scored."""
    ctx, plans, fulls = tokens.split("I would like a pine", ["apple", " pear"])
    assert _texts(tokens, ctx) == ["I", " would", " like", " a"]
    assert _texts(tokens, plans[0].segment) == [" pineapple"] and plans[0].scored_from == 0
    assert _texts(tokens, plans[1].segment) == [" pine", " pear"] and plans[1].scored_from == 1
    for full, plan in zip(fulls, plans):  # context + segment is the joint encoding, token for token
        assert np.concatenate([ctx, plan.segment]).tolist() == full.tolist()


def test_a_leading_space_belongs_to_the_option(tokens):
    ctx, plans, _ = tokens.split("Robot: 1.", [" go", " pick up"])
    assert _texts(tokens, ctx) == ["Rob", "ot", ":", " ", "1", "."]
    assert [(_texts(tokens, p.segment), p.scored_from) for p in plans] == [([" go"], 0), ([" pick", " up"], 0)]


def test_spliced_last_line_equals_the_joint_encoding_and_a_failed_check_falls_back(tokens, monkeypatch):
    prompt = "Human: bring me a coke\nRobot: 1. find a coke can, 2"
    options = [". pick up", ", 3. go", "3. done"]
    assert tokens.line_splice  # SmolLM2's pre-tokenizer is ByteLevel with its regex
    spliced = tokens.joint_encodings(prompt, options)
    joint = tokens.joint_encodings(prompt, options, splice=False)
    assert [(a.tolist(), b.tolist()) for a, b in spliced] == [(a.tolist(), b.tolist()) for a, b in joint]
    assert joint[0][1][-1] == len(prompt + options[0])  # character ends, last token ends at the text's end
    before = tokens.stats.splice_fallbacks
    import groundplan.llm.hf_tokens as hf_tokens

    monkeypatch.setattr(hf_tokens, "_tokens_before", lambda offsets, cut: _tokens_before(offsets, cut) - 1)
    again = tokens.joint_encodings(prompt, options)
    assert tokens.stats.splice_fallbacks == before + 1
    assert [a.tolist() for a, _ in again] == [a.tolist() for a, _ in joint]


def test_tokens_before_finds_only_a_real_boundary():
    offsets = [(0, 0), (0, 3), (3, 5), (5, 9)]  # a prepended BOS, then three tokens
    assert _tokens_before(offsets, 5) == 3
    assert _tokens_before(offsets, 3) == 2
    assert _tokens_before(offsets, 4) is None  # inside the token (3, 5)
    assert _tokens_before(offsets, 9) is None  # no token after the cut


def test_prompt_tokens_of_text_and_of_ids(tokens):
    text, ids, offs = tokens.prompt_tokens("Hello world")
    assert (text, _texts(tokens, ids), offs) == ("Hello world", ["Hello", " world"], [0, 5])
    assert tokens.prompt_tokens(ids.tolist())[2] == [0, 5]
    # ids the tokenizer would not produce for their text: offsets from each token's own text
    odd = tokens.tokenizer("h").input_ids + tokens.tokenizer("ello").input_ids
    assert tokens.tokenizer("hello").input_ids != odd  # 'hello' is one token of its own
    text, ids, offs = tokens.prompt_tokens(odd)
    assert (text, ids.tolist(), offs) == ("hello", odd, [0, 1])
    with pytest.raises(InvalidInputError, match="vocabulary"):
        tokens.prompt_tokens([len(tokens.tokenizer) + 5])
    with pytest.raises(InvalidInputError):
        tokens.prompt_tokens("")


def test_appended_special_tokens_are_dropped(tokens):
    eos = next(iter(tokens.eos))
    ids, offs = tokens.strip_appended([5, 6, eos], [(0, 1), (1, 2), (0, 0)])
    assert ids == [5, 6] and offs == [(0, 1), (1, 2)]
    text = tokens.token_text(5)
    ids, ends = tokens.encoded([5, eos], [(0, len(text)), (0, 0)], text, shift=10)
    assert ids.tolist() == [5] and ends.tolist() == [10 + len(text)]


def test_spans_come_from_the_tokens_bytes_not_the_reported_offsets(tokens):
    """After a character outside the Basic Multilingual Plane the tokenizer reports '-' with the span of the
    character before it; counted from the tokens' bytes, '-' is the option's own token (the fuzz's request
    that got a 400 for a valid body), and a token inside a character spans all of it."""
    prompt = "e\U00099e0b"
    _, plans, fulls = tokens.split(prompt, ["-", "O"])
    assert [_texts(tokens, f[-1:]) for f in fulls] == [["-"], ["O"]]
    assert [len(p.segment) - p.scored_from for p in plans] == [1, 1]
    text, ids, starts = tokens.prompt_tokens(prompt + "-")
    assert starts[0] == 0 and starts[-1] == 2 and all(s == 1 for s in starts[1:-1])


def test_without_a_context_token_options_are_conditioned_on_the_prefix_token(tokens):
    """SmolLM2 adds no BOS. When an option merges into a one-token prompt ('env' + 'e' is one token) or the
    prompt encodes to nothing ('\x04': no token has that byte), nothing is left to condition the option on:
    every encoding of the request then starts with the prefix token (BOS), and a request that has a context
    keeps its encodings as they were."""
    assert tokens.tokenizer("env", add_special_tokens=True).input_ids[0] != tokens.prefix_id
    for prompt, options in [("env", ["e", " x"]), ("\x04", ["a", "b"])]:
        ctx, plans, fulls = tokens.split(prompt, options)
        assert ctx.tolist() == [tokens.prefix_id] and all(f[0] == tokens.prefix_id for f in fulls)
        assert [tokens.tokenizer.decode(p.segment) for p in plans] == [prompt.strip("\x04") + o for o in options]
    assert _texts(tokens, plans[0].segment[plans[0].scored_from:]) == ["a"]
    ctx, _, fulls = tokens.split("I would like a pine", ["apple", " pear"])
    assert ctx[0] != tokens.prefix_id and fulls[0][0] != tokens.prefix_id


def test_options_that_add_nothing_are_refused(tokens):
    with pytest.raises(InvalidInputError, match="at least one option"):
        tokens.split("prompt", [])
    with pytest.raises(InvalidInputError, match="adds no tokens"):
        tokens.split("prompt", [" a", ""])
    with pytest.raises(InvalidInputError, match="adds no tokens"):  # SmolLM2's vocabulary has no token for 0x04
        tokens.split("prompt", [" a", "\x04"])
