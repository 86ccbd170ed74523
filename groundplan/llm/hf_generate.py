"""Generation for the Hugging Face engine: packed sampling over the cached prompt, and the memo of decodes.

Sampling decodes ``n`` samples side by side in one sequence after the prompt's cached key/values
(:mod:`groundplan.llm.hf_kv`), each attending to the prompt and its own tokens, so the prompt is never
copied per sample, nor at all where a cached entry leaves only a few of its tokens to run
(:meth:`~groundplan.llm.hf_kv.KVContext.borrow`). Beams are :mod:`groundplan.llm.beam_search`'s diverse beam
search on the same cache.
A deterministic decode (a beam search; sampling with a seed) repeated after the same prompt with the same
parameters is answered from memory (:class:`DecodeMemo`).
"""
from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from typing import Any

import numpy as np
import torch

from groundplan.core.errors import InvalidInputError
from groundplan.llm.base import Generation, GenerationParams
from groundplan.llm.hf_echo import NextLogits
from groundplan.llm.hf_kv import EnginePart
from groundplan.llm.hf_stats import EngineStats
from groundplan.llm.sampling import decode_samples, generator


class Sampler(EnginePart):
    """``generate`` on the engine's key/value context.

    Built with the engine's parts (:class:`~groundplan.llm.hf_kv.EnginePart`) and the next-token logits the
    echo scorer keeps (``nexts``), which a one-token generate after a scored text takes instead of a forward.
    """

    def __init__(self, tokens: Any, kv: Any, stats: EngineStats, lock: threading.RLock, nexts: NextLogits) -> None:
        super().__init__(tokens, kv, stats, lock)
        self.nexts = nexts

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
        kvc, tokenizer = self.kv, self.tokens.tokenizer
        n = params.n
        # after an echo request that kept this text's next-token logits, its ids are known (no encoding)
        kept_ids = self.nexts.ids_of(prompt) if params.max_new_tokens == 1 else None
        ctx = kept_ids if kept_ids is not None else self.tokens.encode(prompt)
        if len(ctx) == 0:
            raise InvalidInputError("the prompt is empty and the model has no BOS token to condition on")
        gen = generator(params.seed)
        with self.lock:
            if params.max_new_tokens == 1 and (kept := self.nexts.take(ctx)) is not None:
                self.stats.kept_next_tokens += 1

                def never(*_: Any) -> torch.Tensor:
                    raise AssertionError("a one-token decode takes no second step")

                return decode_samples(kept, ctx, params, gen, never,
                                      lambda ids: tokenizer.decode(ids, skip_special_tokens=True), self.tokens.eos,
                                      self.tokens.token_text)
            kv, last, _ = kvc.borrow(ctx, n * params.max_new_tokens)
            past_len = len(ctx)
            cache = kvc.new_cache(kv, past_len)

            def advance(chosen: list[int], t: int, live: list[int]) -> torch.Tensor:
                nonlocal cache
                ids = torch.as_tensor(chosen, device=kvc.device).unsqueeze(0)
                positions = torch.full((1, n), past_len + t, device=kvc.device)
                # cached generated columns are step-major (step t', sample j'); sample j sees j' == j
                seg = np.tile(np.arange(n), t + 1)
                q_seg = np.arange(n)
                allowed = np.concatenate([np.ones((n, past_len), dtype=bool), q_seg[:, None] == seg[None, :]], axis=1)
                out = kvc.model(input_ids=ids, position_ids=positions, attention_mask=kvc.mask_tensor(allowed),
                                past_key_values=cache, use_cache=True)
                cache = out.past_key_values
                self.stats.forward_tokens += n
                return out.logits[0].float()

            return decode_samples(last, ctx, params, gen, advance,
                                  lambda ids: tokenizer.decode(ids, skip_special_tokens=True), self.tokens.eos,
                                  self.tokens.token_text)


class DecodeMemo:
    """Deterministic decodes remembered by (prompt, parameters), LRU, at most ``size`` (0: none).

    A beam search has no randomness and a seeded sample draws the same numbers, so a repeat returns what the
    decode gave the first time. Repeats are common: in a sweep SayCanPay's Greedy-Action rows propose after the
    same histories (the first step always), as Beam-Action's beams do after shared prefixes; Zero-Shot's
    planners read only the instruction, so every program of one task name samples the same steps with the
    same seeds. ``hits`` names the :class:`~groundplan.llm.hf_stats.EngineStats` counter a hit adds to."""

    def __init__(self, size: int, stats: EngineStats, lock: threading.RLock, hits: str) -> None:
        if size < 0:
            raise InvalidInputError("a memo size must be >= 0 (0 disables the memo)")
        self.size = int(size)
        self.stats = stats
        self.lock = lock
        self.hits = hits
        self.entries: OrderedDict[bytes, list] = OrderedDict()

    def recall(self, prompt: str, params: Any, decode: Any) -> list:
        """``decode()``'s result for (``prompt``, ``params``), from the memo when it ran before."""
        if not self.size:
            return decode()
        key = hashlib.blake2b(f"{params!r}\x00{prompt}".encode(), digest_size=20).digest()
        with self.lock:
            hit = self.entries.get(key)
            if hit is not None:
                self.entries.move_to_end(key)
                setattr(self.stats, self.hits, getattr(self.stats, self.hits) + 1)
                return list(hit)
        out = decode()
        with self.lock:
            self.entries[key] = list(out)
            while len(self.entries) > self.size:
                self.entries.popitem(last=False)
        return out

    def candidates(self, lm: Any, prompt: str, params: Any) -> list:
        """Token-level diverse beam search on engine ``lm`` (:func:`~groundplan.llm.beam_search.diverse_beam_search`),
        from the memo when this (prompt, parameters) was searched before."""
        from groundplan.llm.beam_search import diverse_beam_search

        self.stats.beam_searches += 1
        return self.recall(prompt, params, lambda: diverse_beam_search(lm, prompt, params))
