"""Hugging Face transformers backend: shared-prefix option scoring, prefix-cached generation.

:class:`HFLanguageModel` is the default :class:`~groundplan.llm.base.LanguageModel`. It loads a model and
composes the parts that each do one job, all sharing one key/value context, one set of counters
(:class:`~groundplan.llm.hf_stats.EngineStats`) and one lock:

- :mod:`groundplan.llm.hf_tokens`: tokenisation at the boundary between a prompt and an option (an
  option's tokens are those it gets inside ``prompt + option``);
- :mod:`groundplan.llm.hf_kv`: the prefix cache's key/values, in-place cache buffers and 4-D masks;
- :mod:`groundplan.llm.hf_scoring`: one request's options packed after its cached prompt, and the naive
  one-forward-per-option reference;
- :mod:`groundplan.llm.hf_batch`: several requests as one padded forward or a loop of packed ones,
  timed per device;
- :mod:`groundplan.llm.hf_echo`: every token of a text with its log-prob (an OpenAI-style ``echo``);
- :mod:`groundplan.llm.hf_generate`: packed sampling over the cached prompt and the beam-search memo
  (the search itself is :mod:`groundplan.llm.beam_search`, which drives this engine's cache).
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Sequence

import numpy as np
import torch

from groundplan.core.errors import InvalidInputError
from groundplan.llm.base import Generation, GenerationParams, OptionScore, PromptLogprobs, ScoreRequest
from groundplan.llm.embeddings import SentenceEmbedder
from groundplan.llm.hf_batch import BATCHED_MODES, BatchScorer, check_batch_options
from groundplan.llm.hf_echo import TOP_LOGPROBS, EchoScorer, NextLogits
from groundplan.llm.hf_generate import DecodeMemo, Sampler
from groundplan.llm.hf_kv import KV, KVContext, add_sliding_window
from groundplan.llm.hf_scoring import PackedScorer, Prepared, Top
from groundplan.llm.hf_stats import EngineStats
from groundplan.llm.hf_tokens import BoundaryTokenizer, OptionPlan, _pretokenizes_by_regex
from groundplan.llm.loading import DEFAULT_EMBEDDER, DEFAULT_LLM, load_causal_lm
from groundplan.llm.prefix_cache import PrefixCache

__all__ = ["BATCHED_MODES", "TOP_LOGPROBS", "EngineStats", "HFLanguageModel", "_pretokenizes_by_regex"]


def _AS_IS(value: Any) -> Any:
    return value


class _Forward:
    """An engine attribute that lives on one of its parts (``part``, e.g. the key/value context): read
    there, and written there when ``convert`` is given (the value passes through it first); without
    ``convert`` it is read-only. The engine's settings stay where the part that uses them reads them."""

    def __init__(self, part: str, attr: str, convert: Callable[[Any], Any] | None = None) -> None:
        self.part, self.attr, self.convert = part, attr, convert

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        return self if obj is None else getattr(getattr(obj, self.part), self.attr)

    def __set__(self, obj: Any, value: Any) -> None:
        if self.convert is None:
            raise AttributeError(f"{self.name} is read-only")
        setattr(getattr(obj, self.part), self.attr, self.convert(value))


class HFLanguageModel:
    """The default :class:`~groundplan.llm.base.LanguageModel`, backed by transformers.

    Args:
        model: an embedded model name (``smollm2-135m-instruct``), a Hugging Face id, a local path, or the
            MLflow URI of a fine-tuned Say model (``models:/say-babyai/1``, resolved in ``tracking_uri``).
        dtype: ``auto`` (bf16 on GPU, fp32 on CPU), ``float32``, ``bfloat16`` or ``float16``.
        device_map: passed to ``from_pretrained`` when a GPU is present (accelerate placement).
        embedder: sentence encoder for :meth:`embed`.
        prefix_cache_mb: byte budget of the cross-call prefix cache (LRU); the prompt log-probs' cache of
            scored entries has a budget of its own of the same size.
        max_pack_tokens: option tokens packed into one forward pass (bounds memory); also the longest
            row of a padded multi-request batch (longer requests are scored alone).
        batched_forward: ``score_batch`` of several requests as one padded forward: ``"on"``, ``"off"``
            (a loop of packed ``score`` calls), or ``"auto"``: time both on the first multi-request
            batches and keep the faster on this device.
        max_batch_rows: most requests in one padded forward (bounds the key/value copy's memory).
        beam_memo_size: diverse beam searches remembered by (prompt, parameters), LRU (0: none).
        sample_memo_size: seeded samplings remembered by (prompt, parameters), LRU (0: none).
    """

    def __init__(
        self,
        model: str = DEFAULT_LLM,
        dtype: str = "auto",
        device_map: str | None = "auto",
        embedder: str = DEFAULT_EMBEDDER,
        prefix_cache_mb: int = 1024,
        max_pack_tokens: int = 512,
        batched_forward: str = "auto",
        max_batch_rows: int = 16,
        beam_memo_size: int = 20000,
        sample_memo_size: int = 20000,
        tracking_uri: str | None = None,
    ) -> None:
        # options are checked before the model loads, so a bad one costs no load
        if max_pack_tokens < 1:
            raise InvalidInputError("max_pack_tokens must be at least 1")
        check_batch_options(batched_forward, max_batch_rows)
        if beam_memo_size < 0 or sample_memo_size < 0:
            raise InvalidInputError("beam_memo_size and sample_memo_size must be >= 0 (0 disables the memo)")
        loaded = load_causal_lm(model, dtype=dtype, device_map=device_map, tracking_uri=tracking_uri)
        self.name = model
        self.model = loaded.model
        self.tokenizer = loaded.tokenizer
        self.stats = EngineStats()
        self._lock = threading.RLock()
        scored = PrefixCache(int(prefix_cache_mb) << 20)  # the echo scorer's entries, which generation may borrow
        self._kv = KVContext(self.model, PrefixCache(int(prefix_cache_mb) << 20), self.stats, max_pack_tokens, [scored])
        self.device = self._kv.device
        self._embedder = SentenceEmbedder(embedder)
        add_sliding_window(self.model, self._kv.head())
        self._tokens = BoundaryTokenizer(self.tokenizer, self.stats)
        self._scorer = PackedScorer(self._tokens, self._kv, self.stats, self._lock)
        self._batch = BatchScorer(self._scorer, batched_forward, max_batch_rows)
        nexts = NextLogits(int(prefix_cache_mb) << 20)  # the echo scorer's next-token logits, for a 1-token generate
        self._echo = EchoScorer(self._scorer, scored, nexts)
        self._sampler = Sampler(self._tokens, self._kv, self.stats, self._lock, nexts)
        self._beams = DecodeMemo(beam_memo_size, self.stats, self._lock, "beam_memo_hits")
        self._samples = DecodeMemo(sample_memo_size, self.stats, self._lock, "sample_memo_hits")

    @property
    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    # ------------------------------------------------------------------ the LanguageModel protocol
    @torch.inference_mode()
    def score(self, prompt: str, options: Sequence[str]) -> list[OptionScore]:
        """Log-prob of each option as the continuation of ``prompt`` (shared-prefix, packed;
        :mod:`groundplan.llm.hf_scoring`)."""
        return self._scorer.score(prompt, options)

    @torch.inference_mode()
    def score_batch(self, requests: Sequence[ScoreRequest], layout: str | None = None) -> list[list[OptionScore]]:
        """Several requests: a loop of packed :meth:`score` calls or one padded forward per
        ``max_batch_rows`` requests, as ``batched_forward`` chose for this device; ``layout`` ("loop" /
        "padded") forces one (:mod:`groundplan.llm.hf_batch`)."""
        return self._batch.score_batch(requests, layout)

    @torch.inference_mode()
    def score_reference(self, prompt: str, options: Sequence[str]) -> list[OptionScore]:
        """The naive baseline: one full forward pass per ``prompt + option``, all logits computed.
        Used by tests (equivalence) and the scoring benchmark (speed-up)."""
        return self._scorer.score_reference(prompt, options)

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """How many tokens each text encodes to (special tokens the tokenizer adds included)."""
        return [len(self._tokens.encode(t)) for t in texts]

    @torch.inference_mode()
    def prompt_logprobs(self, prompts: Sequence[str | Sequence[int]], top_k: int = 0,
                        keep_next: bool = False) -> list[PromptLogprobs]:
        """Every token of each prompt (a text, or token ids) with its log-prob given the tokens before it
        (None for the first) and the ``top_k`` most likely tokens at each position: the OpenAI API's
        ``echo`` with ``logprobs`` (:mod:`groundplan.llm.hf_echo`). ``keep_next``: also keep each prompt's
        next-token logits, computed in the same forward, for a one-token ``generate`` after it."""
        return self._echo.prompt_logprobs(prompts, top_k, keep_next)

    @torch.inference_mode()
    def generate(self, prompt: str, params: GenerationParams) -> list[Generation]:
        """``n`` samples decoded together over the cached prompt; ``temperature == 0`` is greedy; log-probs
        are the model's own (:meth:`groundplan.llm.hf_generate.Sampler.generate`). A seeded call repeated with
        the same prompt and parameters is answered from the sample memo (:class:`~groundplan.llm.hf_generate.DecodeMemo`)."""
        if params.seed is None:
            return self._sampler.generate(prompt, params)
        return self._samples.recall(prompt, params, lambda: self._sampler.generate(prompt, params))

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self._embedder.embed(texts)

    def chat_prompt(self, text: str) -> str:
        """``text`` as one user turn of the tokenizer's chat template (its system turn, if the template
        writes one, included), the assistant's turn opened: what a chat user of the model sends."""
        if not getattr(self.tokenizer, "chat_template", None):
            raise InvalidInputError(f"model {self.name} has no chat template (a base model): send it bare text")
        return self.tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                                  add_generation_prompt=True)

    def beam_candidates(self, prompt: str, params: Any) -> list:
        """Token-level diverse beam search over this engine's cache (:mod:`groundplan.llm.beam_search`),
        remembered by (prompt, parameters) (:class:`groundplan.llm.hf_generate.DecodeMemo`)."""
        return self._beams.candidates(self, prompt, params)

    # ------------------------------------------------------------------ settings, read where they are used
    #: the prefix cache of plain key/value entries (option scoring, sampling, beams)
    cache = _Forward("_kv", "cache")
    #: the prefix cache of entries with per-position log-probs (:meth:`prompt_logprobs` only)
    scored_cache = _Forward("_echo", "scored_cache")
    max_pack_tokens = _Forward("_kv", "max_pack_tokens", int)
    #: pack a request's options as a token tree (a shared prefix once); False: the flat layout, a baseline
    share_prefixes = _Forward("_scorer", "share_prefixes", bool)
    batched_forward = _Forward("_batch", "batched_forward")
    max_batch_rows = _Forward("_batch", "max_batch_rows", int)
    #: ``"padded"`` or ``"loop"`` once chosen (``"on"``/``"off"`` choose at once; ``"auto"`` after timing both)
    batched_forward_chosen = _Forward("_batch", "chosen", _AS_IS)
    _trial_s = _Forward("_batch", "trial_s", _AS_IS)
    beam_memo_size = _Forward("_beams", "size", int)
    sample_memo_size = _Forward("_samples", "size", int)
    _beam_memo = _Forward("_beams", "entries")
    _line_splice = _Forward("_tokens", "line_splice", bool)

    # ------------------------------------------------------------------ what beam_search.py, tests and profiles drive
    _eos = _Forward("_tokens", "eos")

    def _encode(self, text: str) -> np.ndarray:
        return self._tokens.encode(text)

    def _context(self, ctx: np.ndarray) -> tuple[KV, torch.Tensor]:
        return self._kv.context(ctx)

    def _new_cache(self, kv: KV, length: int):
        return self._kv.new_cache(kv, length)

    def _mask_tensor(self, allowed: np.ndarray) -> torch.Tensor:
        return self._kv.mask_tensor(allowed)

    def _joint_encodings(self, prompt: str, options: Sequence[str], splice: bool = True) -> list[tuple[np.ndarray, np.ndarray]]:
        return self._tokens.joint_encodings(prompt, options, splice=splice)

    def _split(self, prompt: str, options: Sequence[str], splice: bool = True) -> tuple[np.ndarray, list[OptionPlan], list[np.ndarray]]:
        return self._tokens.split(prompt, options, splice=splice)

    def _prepare(self, prompt: str, options: Sequence[str]) -> Prepared:
        return self._scorer.prepare(prompt, options)

    def _packed(self, pr: Prepared, top_k: int = 0) -> tuple[list[list[float]], list[list[Top]]]:
        return self._scorer.packed(pr, top_k)[:2]
