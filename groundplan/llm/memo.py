"""The score memo: option scores computed once per (model, scoring mode, prompt, option), shared by
everything that scores through one engine: the one scorer host (:class:`groundplan.actors.scorer.LLMScorer`:
the sweep's scorer actor, Serve's scorer replicas and ``groundplan serve --local``), and in-process
benchmarks (:class:`MemoizedLM`).

Why it pays: SayCan's prompt depends only on the instruction and the steps chosen so far, never on the
state (Ahn et al. 2022, Sec. 3: the scene enters through the affordances only), so the seeds of a task
and planners sharing the LLM part (SayCan and No-VF) ask for the same option scores again and again.
The memo is an LRU map of option scores keyed by (model, scoring mode, prompt, option); a batch
computes only the (prompt, option) pairs the memo lacks, deduplicated across the batch and grouped by
prompt, so every worker of a sweep shares it. The engine computes each option as in a lone
``prompt + option`` forward, but not bit-identically along every path: the options packed beside it and
the length of the cached prefix it starts from change the float32 arithmetic, by about 1e-5 in log p on
SmolLM2-135M. So a memo hit returns the score as first computed, which can differ from a fresh
computation by that much; decisions were identical with the memo on and off on every sweep measured
(``tests/test_memo_prune_decisions.py`` checks a small real-model sweep). Its hit rate is in
the scorer actor's stats and thereby in the sweep's stats and MLflow metrics.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Sequence

from groundplan.core.errors import InvalidInputError
from groundplan.llm.base import (
    Generation,
    GenerationParams,
    LanguageModel,
    OptionScore,
    ScoreRequest,
)

MemoKey = tuple[str, str, str, str]  # (model, scoring mode, prompt, option)


class ScoreMemo:
    """An LRU map (model, scoring mode, prompt, option) → :class:`OptionScore`, bounded by entries.

    A hit is an option served without computing it: found here, or asked for twice in one batch.

    It has no lock of its own: the scorer actor's batching thread is its only user there (one batch at
    a time), and :class:`MemoizedLM` locks around it."""

    def __init__(self, max_entries: int = 200_000) -> None:
        if max_entries < 0:
            raise InvalidInputError(f"memo_size must be >= 0 (0 disables the memo), got {max_entries}")
        self.max_entries = int(max_entries)
        self._data: OrderedDict[MemoKey, OptionScore] = OrderedDict()
        self.lookups = 0
        self.hits = 0
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._data)

    def get(self, key: MemoKey) -> OptionScore | None:
        self.lookups += 1
        value = self._data.get(key)
        if value is not None:
            self.hits += 1
            self._data.move_to_end(key)
        return value

    def put(self, key: MemoKey, value: OptionScore) -> None:
        if self.max_entries == 0:
            return
        self._data[key] = value
        self._data.move_to_end(key)
        while len(self._data) > self.max_entries:
            self._data.popitem(last=False)
            self.evictions += 1

    def stats(self) -> dict[str, float]:
        return {"memo_lookups": self.lookups, "memo_hits": self.hits,
                "memo_hit_rate": self.hits / self.lookups if self.lookups else 0.0,
                "memo_entries": len(self._data), "memo_evictions": self.evictions}


def memoized_score_batch(lm: LanguageModel, memo: ScoreMemo, requests: Sequence[ScoreRequest],
                         mode: str = "score") -> tuple[list[list[OptionScore]], int]:
    """``lm.score_batch(requests)`` through ``memo``: only the (prompt, option) pairs the memo lacks are
    computed, each once, in one ``score_batch`` call with one request per distinct prompt.
    Returns the results and the number of options computed."""
    results: list[list[OptionScore | None]] = []
    missing: dict[str, dict[str, list[tuple[int, int]]]] = {}
    for r, (prompt, options) in enumerate(requests):
        row: list[OptionScore | None] = []
        for j, option in enumerate(options):
            hit = memo.get((lm.name, mode, prompt, option)) if memo.max_entries else None
            row.append(hit)
            if hit is None:
                slots = missing.setdefault(prompt, {}).setdefault(option, [])
                if slots:  # asked for again within this batch: served by the same computation
                    memo.hits += 1
                slots.append((r, j))
        results.append(row)
    computed = 0
    if missing:
        sub = [(prompt, list(opts)) for prompt, opts in missing.items()]
        scored = lm.score_batch(sub)
        if len(scored) != len(sub):
            raise RuntimeError(f"{lm.name}.score_batch returned {len(scored)} results for {len(sub)} requests")
        for (prompt, opts), scores in zip(missing.items(), scored):
            if len(scores) != len(opts):
                raise RuntimeError(f"{lm.name} returned {len(scores)} scores for {len(opts)} options")
            for (option, slots), score in zip(opts.items(), scores):
                memo.put((lm.name, mode, prompt, option), score)
                computed += 1
                for r, j in slots:
                    results[r][j] = score
    return results, computed  # type: ignore[return-value]


class MemoizedLM:
    """A :class:`LanguageModel` that scores through a :class:`ScoreMemo`, for in-process use without a
    scorer host (benchmarks, tests). Everything but scoring passes through to ``lm``. A lock makes one
    scoring call at a time touch the memo, since callers may score from several threads."""

    def __init__(self, lm: LanguageModel, memo: ScoreMemo | None = None) -> None:
        self.lm = lm
        self.name = lm.name
        self.memo = memo if memo is not None else ScoreMemo()
        self._mode = str(getattr(lm, "score_mode", "score"))
        self._lock = threading.Lock()

    def score(self, prompt: str, options: Sequence[str]) -> list[OptionScore]:
        if not options:
            raise InvalidInputError("score needs at least one option")
        return self.score_batch([(prompt, list(options))])[0]

    def score_batch(self, requests: Sequence[ScoreRequest]) -> list[list[OptionScore]]:
        with self._lock:
            return memoized_score_batch(self.lm, self.memo, requests, self._mode)[0]

    def generate(self, prompt: str, params: GenerationParams) -> list[Generation]:
        return self.lm.generate(prompt, params)

    def chat_prompt(self, text: str) -> str:
        return self.lm.chat_prompt(text)

    def embed(self, texts: Sequence[str]):
        return self.lm.embed(texts)


def memo_for(lm: LanguageModel, max_entries: int) -> ScoreMemo:
    """A memo of ``max_entries`` option scores for ``lm``; an empty one (0 entries: off) when the model says
    its scores are not a pure function of (prompt, option) (``memoizable = False``, e.g. a latency
    simulator)."""
    return ScoreMemo(max_entries if getattr(lm, "memoizable", True) else 0)
