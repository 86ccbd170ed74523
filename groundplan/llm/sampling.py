"""The sampling loop every in-process backend shares: ``n`` samples decoded side by side after one prompt.

A backend supplies only how to run one step (``advance``: the chosen tokens in, the next logits out) and how
to turn tokens into text; the rules are written once here: greedy or temperature + nucleus sampling, Hugging
Face's repetition penalty (CTRL, Keskar et al. 2019; Zero-Shot Planners search it, Appendix A.1), stop strings
and EOS, and each sample's mean log-prob under the model at temperature 1 without the penalty (the P(â) of
Zero-Shot Planners' translation score, Sec. 3.2).
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import torch

from groundplan.llm.base import Generation, GenerationParams, SampledToken

#: one decoding step: (each sample's chosen token, step index, the samples still running) -> [n, V] logits;
#: rows of finished samples may be anything
Advance = Callable[[list[int], int, list[int]], torch.Tensor]
#: token ids -> text, special tokens (EOS) dropped
Decode = Callable[[Sequence[int]], str]


def find_stop(text: str, stop: Sequence[str]) -> int:
    """Where the first stop string starts in ``text`` (-1: none)."""
    hits = [i for i in (text.find(s) for s in stop) if i >= 0]
    return min(hits) if hits else -1


def repetition_penalty(logits: torch.Tensor, seen: torch.Tensor, penalty: float) -> torch.Tensor:
    """Hugging Face's ``RepetitionPenaltyLogitsProcessor`` on [n, V] logits with a [n, V] seen mask. Kept
    finite: a penalty near 0 (any positive one is valid) divides a positive logit past the float range, and
    an infinite logit makes the softmax NaN; clamped, the largest logit still wins as the penalty says."""
    penalised = torch.where(logits > 0, logits / penalty, logits * penalty)
    big = torch.finfo(logits.dtype).max
    return torch.where(seen, penalised.clamp(-big, big), logits)


MIN_TEMPERATURE = 1e-30  #: the lowest temperature :func:`sample` divides by


def sample(logprobs: torch.Tensor, temperature: float, top_p: float, gen: torch.Generator) -> list[int]:
    """Greedy (T=0) or temperature + nucleus (top-p) sampling from [n, V] log-probs.

    A temperature below :data:`MIN_TEMPERATURE` samples at that one: any positive temperature is valid, but
    5e-324 is 0 in float32 and made every log-prob -inf and the softmax NaN. The largest log-prob is at least
    -log V (above -20 for any vocabulary), so divided by 1e-30 it stays finite in float32 and bfloat16, while
    the smallest gap float32 resolves near it (1e-6) becomes 1e24: greedy's limit. Temperatures above it
    are divided as before, bit for bit. Top-p keeps at least the most likely token, as Hugging Face's
    ``TopPLogitsWarper`` does (``min_tokens_to_keep=1``)."""
    if temperature == 0:
        return logprobs.argmax(dim=-1).tolist()
    probs = torch.softmax(logprobs / max(temperature, MIN_TEMPERATURE), dim=-1).cpu()
    if top_p < 1.0:
        sorted_p, order = probs.sort(dim=-1, descending=True)
        cum = sorted_p.cumsum(dim=-1)
        drop = (cum - sorted_p) >= top_p  # keep the smallest set whose mass reaches top_p
        drop[:, 0] = False  # and the top token always (a top_p of 5e-324 is 0 in float32: it dropped them all)
        sorted_p = sorted_p.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter(1, order, sorted_p)
    return torch.multinomial(probs, 1, generator=gen).squeeze(1).tolist()


def generator(seed: int | None) -> torch.Generator:
    """The CPU generator a sampling call draws from (``seed`` None: a fresh seed)."""
    gen = torch.Generator(device="cpu")
    gen.manual_seed(int(seed) if seed is not None else int(torch.seed() % (2**63)))
    return gen


def decode_samples(first: torch.Tensor, prompt_ids: np.ndarray, params: GenerationParams, gen: torch.Generator,
                   advance: Advance, decode: Decode, eos: set[int] | frozenset[int],
                   token_text: Callable[[int], str] | None = None) -> list[Generation]:
    """``params.n`` samples from the prompt's next-token logits ``first`` ([V]), ``advance`` running each later
    step; stops when every sample has met EOS or a stop string, or after ``max_new_tokens``. With
    ``params.logprobs``, each sample's tokens carry their log-probs and the ``logprobs`` most likely tokens at
    each step (named by ``token_text``, default ``decode`` of the one token)."""
    n = params.n
    next_logits = first.unsqueeze(0).expand(n, -1)
    next_lp = torch.log_softmax(next_logits, dim=-1)
    seen = None
    if params.repetition_penalty != 1.0:
        seen = torch.zeros(next_logits.shape, dtype=torch.bool, device=next_logits.device)
        seen[:, torch.as_tensor(np.unique(prompt_ids), device=seen.device)] = True
    tokens: list[list[int]] = [[] for _ in range(n)]
    lps: list[list[float]] = [[] for _ in range(n)]
    tops: list[list[tuple[tuple[str, float], ...]]] | None = None if params.logprobs is None else [[] for _ in range(n)]
    name = token_text or (lambda i: decode([i]))
    finished: list[str | None] = [None] * n
    for t in range(params.max_new_tokens):
        if seen is None:
            chosen = sample(next_lp, params.temperature, params.top_p, gen)
        else:
            penalised = repetition_penalty(next_logits, seen, params.repetition_penalty)
            chosen = sample(torch.log_softmax(penalised, dim=-1), params.temperature, params.top_p, gen)
            seen[torch.arange(n, device=seen.device), torch.as_tensor(chosen, device=seen.device)] = True
        if tops is not None and params.logprobs:
            tv, ti = next_lp.topk(params.logprobs, dim=-1)
            tv, ti = tv.tolist(), ti.tolist()
        for j in range(n):
            if finished[j] is None:
                tokens[j].append(chosen[j])
                lps[j].append(float(next_lp[j, chosen[j]]))
                if tops is not None:
                    tops[j].append(tuple((name(i), v) for i, v in zip(ti[j], tv[j])) if params.logprobs else ())
                if chosen[j] in eos or find_stop(decode(tokens[j]), params.stop) >= 0:
                    finished[j] = "stop"
        live = [j for j in range(n) if finished[j] is None]
        if not live or t == params.max_new_tokens - 1:
            break
        next_logits = advance(chosen, t, live)
        next_lp = torch.log_softmax(next_logits, dim=-1)
    return [finish(tokens[j], lps[j], finished[j] or "length", params.stop, decode, eos,
                   None if tops is None else tops[j]) for j in range(n)]


def finish(tokens: list[int], lps: list[float], reason: str, stop: Sequence[str], decode: Decode,
           eos: set[int] | frozenset[int], tops: list[tuple[tuple[str, float], ...]] | None = None) -> Generation:
    """A sample's text cut at its first stop string, its token count (the tokens wholly before the stop, as
    OpenAI-style APIs count them; EOS not counted) and the mean log-prob of those tokens. With ``tops`` (the
    alternatives at each step), also every token that covers the text, each with its piece of the text (the
    last one cut where the text is), its offset, its log-prob and those alternatives, so the pieces join into
    the text as the OpenAI API's ``logprobs.tokens`` do."""
    text = decode(tokens)
    cut = find_stop(text, stop)
    keep = len(tokens)
    if tokens and tokens[-1] in eos:
        keep -= 1
    if cut >= 0:
        text = text[:cut]
        keep = 0
        while keep < len(tokens) and len(decode(tokens[: keep + 1])) <= cut:
            keep += 1
    used = lps[:keep] if keep else lps[:1]
    sampled = None
    if tops is not None:
        sampled, start = [], 0
        for j in range(len(tokens) - (1 if tokens and tokens[-1] in eos else 0)):
            if start >= len(text):
                break
            end = min(len(decode(tokens[: j + 1])), len(text))
            sampled.append(SampledToken(text[start:end], start, lps[j], tops[j]))
            start = end
        sampled = tuple(sampled)
    return Generation(text=text, logprob_mean=float(np.mean(used)) if used else 0.0, num_tokens=keep,
                      finish_reason=reason, tokens=sampled)
