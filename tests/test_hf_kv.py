"""The engine's key/value context (``groundplan.llm.hf_kv``) on the embedded SmolLM2: a prefix-cache hit gives
the logits of a cold run, in-place buffers grow without losing what they hold, and the 4-D masks say who
sees whom."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from groundplan.llm.hf_kv import KVContext, _BufferLayer
from groundplan.llm.hf_stats import EngineStats
from groundplan.llm.prefix_cache import PrefixCache

PROMPT = "Human: How would you bring me a coke can?\nRobot: 1. find a coke can, 2."
#: key/values computed in a longer or shorter forward differ in float32's last digits (prefix_cache's doc)
TOL = 1e-4


def _fresh(lm, max_pack_tokens: int = 64) -> KVContext:
    return KVContext(lm.model, PrefixCache(1 << 28), EngineStats(), max_pack_tokens)


def _ids(lm, text: str) -> np.ndarray:
    return np.asarray(lm.tokenizer(text).input_ids, dtype=np.int64)


@torch.inference_mode()
def test_cold_context_equals_a_plain_forward(lm):
    kv = _fresh(lm)
    ctx = _ids(lm, PROMPT)
    _, last = kv.context(ctx)
    plain = lm.model(input_ids=torch.as_tensor(ctx).unsqueeze(0)).logits[0, -1].float()
    assert torch.allclose(last, plain, atol=TOL, rtol=0)
    assert (kv.stats.forward_tokens, kv.stats.logit_positions, len(kv.cache)) == (len(ctx), 1, 1)


@torch.inference_mode()
def test_an_exact_hit_runs_nothing_and_returns_the_same_logits(lm):
    kv = _fresh(lm)
    ctx = _ids(lm, PROMPT)
    buffers, last = kv.context(ctx)
    before = kv.stats.forward_tokens
    buffers2, last2 = kv.context(ctx)
    assert kv.stats.forward_tokens == before
    assert last2 is last and buffers2 is buffers


@torch.inference_mode()
def test_a_partial_hit_runs_only_the_new_tokens_and_matches_a_cold_run(lm):
    warm = _fresh(lm)
    short, long = _ids(lm, PROMPT), _ids(lm, PROMPT + " pick up the coke can, 3.")
    assert long[:len(short)].tolist() == short.tolist()
    warm.context(short)
    before = warm.stats.forward_tokens
    _, last_warm = warm.context(long)
    assert warm.stats.forward_tokens - before == len(long) - len(short)
    _, last_cold = _fresh(lm).context(long)
    assert float((last_warm - last_cold).abs().max()) < TOL
    assert len(warm.cache) == 1  # the longer entry replaced the prefix it extends


@torch.inference_mode()
def test_buffers_append_in_place_and_grow_past_their_capacity():
    k = torch.arange(2 * 3 * 2, dtype=torch.float32).reshape(1, 2, 3, 2)
    kbuf, vbuf = torch.zeros(1, 2, 4, 2), torch.zeros(1, 2, 4, 2)
    kbuf[:, :, :3], vbuf[:, :, :3] = k, -k
    layer = _BufferLayer(kbuf, vbuf, 3)
    new = torch.full((1, 2, 3, 2), 7.0)
    keys, values = layer.update(new, -new)
    assert layer.get_seq_length() == 6 and layer.kbuf.shape[2] == 8  # grown to twice the capacity
    assert torch.equal(keys[:, :, :3], k) and torch.equal(keys[:, :, 3:], new) and torch.equal(values[:, :, 3:], -new)
    assert layer.get_mask_sizes(2) == (8, 0)


def test_packed_mask_sees_the_prefix_and_the_rows_the_tree_allows(lm):
    kv = _fresh(lm)
    # two options after a 2-token prefix: rows 0-1 one branch, rows 2-4 another (a tree_pack's visible)
    visible = np.zeros((5, 5), dtype=bool)
    for row, ancestors in enumerate([[0], [0, 1], [2], [2, 3], [2, 3, 4]]):
        visible[row, ancestors] = True
    mask = kv.packed_mask(visible, past_len=2)
    assert mask.shape == (1, 1, 5, 7)
    want = np.array([
        [1, 1, 1, 0, 0, 0, 0],
        [1, 1, 1, 1, 0, 0, 0],
        [1, 1, 0, 0, 1, 0, 0],
        [1, 1, 0, 0, 1, 1, 0],
        [1, 1, 0, 0, 1, 1, 1],
    ], dtype=bool)
    got = mask[0, 0].cpu().numpy()
    if kv.bool_mask:
        assert got.dtype == bool and (got == want).all()
    else:  # eager attention: additive, 0 where allowed
        assert ((got == 0) == want).all()
    tail = kv.packed_mask(visible[:2, :2], past_len=1, tail=2)[0, 0].cpu().numpy()  # 2 context rows first
    want_tail = np.array([[1, 1, 0, 0, 0], [1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], dtype=bool)
    assert ((tail if kv.bool_mask else tail == 0) == want_tail).all()


def test_headroom_and_the_decoder_split(lm):
    kv = _fresh(lm, max_pack_tokens=16)
    buffers = kv.empty_buffers(10)
    cfg = lm.model.config
    assert len(buffers) == cfg.num_hidden_layers
    assert buffers[0][0].shape == (1, cfg.num_key_value_heads, 10, cfg.hidden_size // cfg.num_attention_heads)
    body, head = kv.head()
    assert head is lm.model.get_output_embeddings() and body is lm.model.model
    assert not getattr(body, "_groundplan_sliding_window", False)  # Llama: no sliding-window layers, no hook


@pytest.mark.parametrize("cap", [None, 2.0])
@torch.inference_mode()
def test_head_logits_soft_caps_as_the_model_does(lm, cap, monkeypatch):
    kv = _fresh(lm)
    monkeypatch.setattr(lm.model.config, "final_logit_softcapping", cap, raising=False)
    hidden = torch.randn(3, lm.model.config.hidden_size, generator=torch.Generator().manual_seed(0))
    raw = lm.model.get_output_embeddings()(hidden).float()
    want = raw if cap is None else torch.tanh(raw / cap) * cap
    assert torch.equal(kv.head_logits(lm.model.get_output_embeddings(), hidden), want)
