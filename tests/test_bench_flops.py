"""benchmarks/flops.py: the FLOPs a forward does, counted on a tiny random Llama (no weights fetched)."""
from __future__ import annotations

import pytest
import torch


@pytest.fixture
def flops(load_benchmark):
    return load_benchmark("flops")


def tiny_llama(tie: bool) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=tie)
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg).eval()


@pytest.mark.parametrize("tie", [True, False])
def test_the_clock_counts_body_rows_logit_rows_and_attention(flops, tie):
    model = tiny_llama(tie)
    clock = flops.ForwardClock(model)
    embed = 97 * 32
    total = sum(p.numel() for p in model.parameters())
    body = clock.shape["body"]
    assert clock.shape["hidden"] * clock.shape["vocab"] == embed and body == total - embed - (0 if tie else embed)
    with torch.inference_mode():
        out = model(input_ids=torch.arange(5).unsqueeze(0), use_cache=True, logits_to_keep=1)
        model(input_ids=torch.tensor([[5, 6, 7]]), past_key_values=out.past_key_values, use_cache=True,
              logits_to_keep=torch.tensor([0, 2]))
    assert (clock.forwards, clock.tokens, clock.logit_rows) == (2, 8, 3)
    assert clock.attention == 5 * 5 + 3 * (5 + 3)  # query rows x key columns, dense
    assert clock.linear_flops == 2 * (body * 8 + embed * 3)
    assert clock.attention_flops == 4 * clock.attention * 8 * 4 * 2  # head_dim 8, 4 heads, 2 layers
    assert clock.flops == clock.linear_flops + clock.attention_flops and clock.seconds > 0
    clock.reset()
    assert (clock.forwards, clock.tokens, clock.flops) == (0, 0, 0.0)


def test_a_batch_counts_every_sequence(flops):
    model = tiny_llama(True)
    clock = flops.ForwardClock(model)
    with torch.inference_mode():
        model(input_ids=torch.zeros(3, 4, dtype=torch.long))
    assert (clock.tokens, clock.logit_rows, clock.attention) == (12, 12, 3 * 4 * 4)


def test_logits_to_keep_forms(flops):
    assert flops.logit_rows(0, 7) == 7 and flops.logit_rows(2, 7) == 2 and flops.logit_rows(9, 7) == 7
    assert flops.logit_rows(torch.tensor([1, 4, 6]), 7) == 3
