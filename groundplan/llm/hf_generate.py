"""Generation for the Hugging Face engine: packed sampling over the cached prompt, and the beam-search memo.

Sampling decodes ``n`` samples side by side in one sequence after the prompt's cached key/values
(:mod:`groundplan.llm.hf_kv`), each attending to the prompt and its own tokens, so the prompt is never
copied per sample. Beams are :mod:`groundplan.llm.beam_search`'s diverse beam search on the same cache;
here only its memo (a deterministic search repeated after the same prompt is answered from memory).
"""
from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from typing import Any, Sequence

import numpy as np
import torch

from groundplan.core.errors import InvalidInputError
from groundplan.llm.base import Generation, GenerationParams
from groundplan.llm.hf_kv import EnginePart
from groundplan.llm.hf_stats import EngineStats


class Sampler(EnginePart):
    """``generate`` on the engine's key/value context.

    Built with the engine's parts (:class:`~groundplan.llm.hf_kv.EnginePart`).
    """

    @torch.inference_mode()
    def generate(self, prompt: str, params: GenerationParams) -> list[Generation]:
        """``n`` samples decoded together over the cached prompt: the samples are packed side by side
        in one sequence (each attends to the prompt and its own tokens), so the prompt's key/values
        are never copied per sample. ``temperature == 0`` is greedy. Log-probs are the model's own
        (temperature 1, no penalty), as Zero-Shot Planners' P(â) requires.

        ``repetition_penalty`` is Hugging Face's (CTRL, Keskar et al. 2019): before sampling, the logit
        of every token already in the prompt or in the sample is divided by it when positive and
        multiplied by it when negative; Zero-Shot Planners search it over {1.0, 1.2, 1.5, 1.8} for
        Hugging Face models (Appendix A.1)."""
        kvc, tokenizer, eos = self.kv, self.tokens.tokenizer, self.tokens.eos
        n, temperature, top_p, max_new_tokens = params.n, params.temperature, params.top_p, params.max_new_tokens
        stop, seed, repetition_penalty = list(params.stop), params.seed, params.repetition_penalty
        ctx = self.tokens.encode(prompt)
        if len(ctx) == 0:
            raise InvalidInputError("the prompt is empty and the model has no BOS token to condition on")
        gen = torch.Generator(device="cpu")
        gen.manual_seed(int(seed) if seed is not None else int(torch.seed() % (2**63)))
        with self.lock:
            kv, last = kvc.context(ctx)
            past_len = len(ctx)
            cache = kvc.new_cache(kv, past_len)
            next_logits = last.unsqueeze(0).expand(n, -1)
            next_lp = torch.log_softmax(next_logits, dim=-1)
            seen = None
            if repetition_penalty != 1.0:
                seen = torch.zeros(next_logits.shape, dtype=torch.bool, device=next_logits.device)
                seen[:, torch.as_tensor(np.unique(ctx), device=seen.device)] = True
            tokens: list[list[int]] = [[] for _ in range(n)]
            lps: list[list[float]] = [[] for _ in range(n)]
            finished: list[str | None] = [None] * n
            for t in range(max_new_tokens):
                if seen is None:
                    chosen = _sample(next_lp, temperature, top_p, gen)
                else:
                    penalised = _repetition_penalty(next_logits, seen, repetition_penalty)
                    chosen = _sample(torch.log_softmax(penalised, dim=-1), temperature, top_p, gen)
                    seen[torch.arange(n, device=seen.device), torch.as_tensor(chosen, device=seen.device)] = True
                for j in range(n):
                    if finished[j] is None:
                        tokens[j].append(chosen[j])
                        lps[j].append(float(next_lp[j, chosen[j]]))
                        if chosen[j] in eos or _find_stop(tokenizer.decode(tokens[j], skip_special_tokens=True), stop) >= 0:
                            finished[j] = "stop"
                if all(f is not None for f in finished) or t == max_new_tokens - 1:
                    break
                ids = torch.as_tensor(chosen, device=kvc.device).unsqueeze(0)
                positions = torch.full((1, n), past_len + t, device=kvc.device)
                # cached generated columns are step-major (step t', sample j'); sample j sees j' == j
                seg = np.tile(np.arange(n), t + 1)
                q_seg = np.arange(n)
                allowed = np.concatenate([np.ones((n, past_len), dtype=bool), q_seg[:, None] == seg[None, :]], axis=1)
                out = kvc.model(input_ids=ids, position_ids=positions, attention_mask=kvc.mask_tensor(allowed),
                                past_key_values=cache, use_cache=True)
                cache = out.past_key_values
                next_logits = out.logits[0].float()
                next_lp = torch.log_softmax(next_logits, dim=-1)
                self.stats.forward_tokens += n
        return [self.finish(tokens[j], lps[j], finished[j] or "length", stop) for j in range(n)]

    def finish(self, tokens: list[int], lps: list[float], reason: str, stop: list[str]) -> Generation:
        """A sample's text cut at its first stop string, its token count (the tokens wholly before the
        stop, EOS not counted) and the mean log-prob of those tokens."""
        tokenizer, eos = self.tokens.tokenizer, self.tokens.eos
        text = tokenizer.decode(tokens, skip_special_tokens=True)
        cut = _find_stop(text, stop)
        keep = len(tokens)
        if tokens and tokens[-1] in eos:
            keep -= 1
        if cut >= 0:
            text = text[:cut]
            # count the tokens that lie wholly before the stop string (as OpenAI-style APIs do)
            keep = 0
            while keep < len(tokens) and len(tokenizer.decode(tokens[: keep + 1], skip_special_tokens=True)) <= cut:
                keep += 1
        used = lps[:keep] if keep else lps[:1]
        return Generation(text=text, logprob_mean=float(np.mean(used)) if used else 0.0, num_tokens=keep, finish_reason=reason)


class BeamMemo:
    """Diverse beam searches remembered by (prompt, parameters), LRU, at most ``size`` (0: none).

    The search has no randomness, and in a sweep SayCanPay's Greedy-Action rows propose after the same
    histories (the first step always), as Beam-Action's beams do after shared prefixes, so a repeat
    returns the candidates the search gave the first time."""

    def __init__(self, size: int, stats: EngineStats, lock: threading.RLock) -> None:
        if size < 0:
            raise InvalidInputError("beam_memo_size must be >= 0 (0 disables the memo)")
        self.size = int(size)
        self.stats = stats
        self.lock = lock
        self.entries: OrderedDict[bytes, list] = OrderedDict()

    def candidates(self, lm: Any, prompt: str, params: Any) -> list:
        """Token-level diverse beam search on engine ``lm`` (:func:`~groundplan.llm.beam_search.diverse_beam_search`),
        from the memo when this (prompt, parameters) was searched before."""
        from groundplan.llm.beam_search import diverse_beam_search

        self.stats.beam_searches += 1
        if not self.size:
            return diverse_beam_search(lm, prompt, params)
        key = hashlib.blake2b(f"{params!r}\x00{prompt}".encode(), digest_size=20).digest()
        with self.lock:
            hit = self.entries.get(key)
            if hit is not None:
                self.entries.move_to_end(key)
                self.stats.beam_memo_hits += 1
                return list(hit)
        out = diverse_beam_search(lm, prompt, params)
        with self.lock:
            self.entries[key] = list(out)
            while len(self.entries) > self.size:
                self.entries.popitem(last=False)
        return out


def _find_stop(text: str, stop: Sequence[str]) -> int:
    hits = [i for i in (text.find(s) for s in stop) if i >= 0]
    return min(hits) if hits else -1


def _repetition_penalty(logits: torch.Tensor, seen: torch.Tensor, penalty: float) -> torch.Tensor:
    """Hugging Face's ``RepetitionPenaltyLogitsProcessor`` on [n, V] logits with a [n, V] seen mask."""
    penalised = torch.where(logits > 0, logits / penalty, logits * penalty)
    return torch.where(seen, penalised, logits)


def _sample(logprobs: torch.Tensor, temperature: float, top_p: float, gen: torch.Generator) -> list[int]:
    """Greedy (T=0) or temperature + nucleus (top-p) sampling from [n, V] log-probs."""
    if temperature == 0:
        return logprobs.argmax(dim=-1).tolist()
    probs = torch.softmax(logprobs / temperature, dim=-1).cpu()
    if top_p < 1.0:
        sorted_p, order = probs.sort(dim=-1, descending=True)
        cum = sorted_p.cumsum(dim=-1)
        drop = (cum - sorted_p) >= top_p  # keep the smallest set whose mass reaches top_p
        sorted_p = sorted_p.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter(1, order, sorted_p)
    return torch.multinomial(probs, 1, generator=gen).squeeze(1).tolist()
