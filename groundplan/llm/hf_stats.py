"""The Hugging Face engine's counters, one object shared by its parts (tokeniser, key/value context, scorers,
sampler, beam memo), so the scorer actor's metrics and the benchmarks read one place."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class EngineStats:
    """Counters for benchmarks and the scorer actor's metrics."""

    score_calls: int = 0
    options_scored: int = 0
    forward_tokens: int = 0  # tokens run through the transformer (prompt remainder + options)
    logit_positions: int = 0  # positions at which vocabulary logits were computed
    padded_batches: int = 0  # score_batch calls served by one padded multi-request forward
    beam_searches: int = 0  # beam_candidates calls
    prompt_logprob_texts: int = 0  # texts given per-token log-probs (prompt_logprobs)
    beam_memo_hits: int = 0  # of which answered from the beam memo
    sample_memo_hits: int = 0  # seeded generate calls answered from the sample memo
    kept_next_tokens: int = 0  # one-token generate calls answered from an echo's kept next-token logits
    borrowed_contexts: int = 0  # generate calls that ran after a cached entry in its headroom (no copy)
    splice_fallbacks: int = 0  # score calls whose spliced encoding differed from the joint one (encoded jointly)
