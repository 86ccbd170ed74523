"""The scorer's score memo, since a sweep asks for the same (prompt, option) scores again across seeds and
planners: exact (same scores as without it), computes each missing (prompt, option) once per batch,
LRU-bounded, and its hit rate reaches the sweep's stats and MLflow."""
from __future__ import annotations

import asyncio
import functools
import time

import pytest

from groundplan.actors.scorer import DynamicBatcher, LLMScorer
from groundplan.core.errors import InvalidInputError
from groundplan.llm.memo import MemoizedLM, ScoreMemo, memoized_score_batch
from tests.fakes import FakeLM, hashed_logprob, small_kitchen_config, with_runtime

HASHED = functools.partial(FakeLM, hashed_logprob)


def test_memo_returns_exactly_the_models_scores_and_computes_only_misses():
    lm, ref = FakeLM(hashed_logprob), FakeLM(hashed_logprob)
    memo = ScoreMemo()
    reqs = [("p1", [" a", " b"]), ("p2", [" a"]), ("p1", [" b", " c"])]  # " b" after p1 asked twice
    got, computed = memoized_score_batch(lm, memo, reqs)
    assert got == ref.score_batch(reqs) and computed == 4
    assert sorted((p, sorted(o)) for p, o in lm.score_calls) == [("p1", [" a", " b", " c"]), ("p2", [" a"])]
    again, computed = memoized_score_batch(lm, memo, [("p1", [" c", " a"]), ("p3", [" a"])])
    assert again == ref.score_batch([("p1", [" c", " a"]), ("p3", [" a"])]) and computed == 1
    assert lm.score_calls[-1] == ("p3", [" a"])
    stats = memo.stats()
    # hits: the second p1 " b" of batch 1, p1 " c" and " a" in batch 2; entries: the 5 distinct pairs
    assert stats["memo_hits"] == 3 and stats["memo_lookups"] == 8 and stats["memo_entries"] == 5
    assert len(memo) == 5


def test_memo_keys_include_the_model_and_evict_least_recently_used():
    memo = ScoreMemo(max_entries=2)
    a, b = FakeLM(hashed_logprob, name="a"), FakeLM(lambda p, o: -1.0, name="b")
    memoized_score_batch(a, memo, [("p", [" x"])])
    out, computed = memoized_score_batch(b, memo, [("p", [" x"])])  # another model: not a hit
    assert computed == 1 and out[0][0].logprob_sum == -1.0
    memoized_score_batch(a, memo, [("p", [" y"])])
    assert len(memo) == 2 and memo.evictions == 1
    assert memoized_score_batch(a, memo, [("p", [" x"])])[1] == 1  # ("a", p, x) was the oldest: evicted
    with pytest.raises(InvalidInputError):
        ScoreMemo(-1)


def test_memoized_lm_is_a_language_model_with_the_same_scores():
    m = MemoizedLM(FakeLM(hashed_logprob))
    assert m.score("p", [" a", " b"]) == FakeLM(hashed_logprob).score("p", [" a", " b"])
    assert m.score("p", [" b"]) == FakeLM(hashed_logprob).score("p", [" b"]) and m.memo.hits == 1
    with pytest.raises(InvalidInputError):
        m.score("p", [])


def test_scorer_stats_report_the_memo_and_unmemoizable_models_opt_out():
    scorer = LLMScorer(lm_factory=HASHED, batch_window_ms=5, max_batch=8)

    async def main():
        first = await asyncio.gather(*(scorer.score(f"p{i % 3}", [" a", " b"]) for i in range(9)))
        return first, await scorer.stats()

    results, stats = asyncio.run(main())
    assert results == [FakeLM(hashed_logprob).score(f"p{i % 3}", [" a", " b"]) for i in range(9)]
    assert stats["options"] == 18 and stats["options_computed"] == 6 and stats["memo_hit_rate"] == pytest.approx(12 / 18)

    class Volatile(FakeLM):
        memoizable = False

    assert LLMScorer(lm_factory=lambda: Volatile(hashed_logprob)).memo.max_entries == 0


def test_adaptive_batch_closes_without_waiting_the_window_for_a_lone_caller():
    """After a full batch the batcher expects 4 and waits the (short) window once for a lone caller; it then
    expects 1, so the next lone callers are answered at once even under an hour-long window, where a
    fixed-window batcher would hold each for the hour (the 60 s guard fails it)."""
    sizes = []
    b = DynamicBatcher(lambda items: sizes.append(len(items)) or items, window_ms=50, max_batch=4)

    async def main():
        first = await asyncio.gather(*(b.submit(i) for i in range(4)))  # a full batch: closes at max_batch
        learn = await b.submit(0)  # one caller where 4 were expected: waits the 50 ms window, then expects 1
        b.window_s = 3600.0
        lone = [await asyncio.wait_for(b.submit(i), timeout=60) for i in range(1, 3)]
        return first, [learn, *lone]

    first, lone = asyncio.run(main())
    assert first == [0, 1, 2, 3] and lone == [0, 1, 2]
    assert sizes == [4, 1, 1, 1]


def test_callers_split_over_two_batches_are_batched_together_again():
    """Four callers are in a batch when four more arrive during its run; each caller sends again as soon as
    it is answered. The batcher counts the eight requests outstanding at once and waits for all eight
    (within the window) from the third batch on; expecting only the last batch plus the queue, it would
    keep two batches of four forever, a pass over the weights each."""
    sizes = []

    def run(items):
        time.sleep(0.2)  # the model's forward
        sizes.append(len(items))
        return items

    b = DynamicBatcher(run, window_ms=50, max_batch=8)

    async def caller(i, delay):
        await asyncio.sleep(delay)
        for _ in range(4):
            await b.submit(i)

    async def main():
        await asyncio.gather(*(caller(i, 0.0 if i < 4 else 0.1) for i in range(8)))

    asyncio.run(main())
    assert sizes[:2] == [4, 4] and sizes[2:] == [8, 8, 8], sizes


def test_a_fixed_window_batch_waits_its_window_for_a_lone_caller():
    """The control of the test above: without ``adaptive`` a lone caller is held for the whole window."""
    b = DynamicBatcher(lambda items: items, window_ms=3_600_000, max_batch=4, adaptive=False)

    async def main():
        await asyncio.gather(*(b.submit(i) for i in range(4)))
        await asyncio.wait_for(b.submit(0), timeout=0.5)

    with pytest.raises(asyncio.TimeoutError):
        asyncio.run(main())


def test_sweep_reports_memo_hit_rate_to_stats_and_mlflow(tmp_path, ray_local, monkeypatch):
    import mlflow

    from groundplan.pipelines.evaluate.sweep import run_sweep

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    cfg = with_runtime(small_kitchen_config(tmp_path / "ray", name="memo", tasks={"families": ["nl_nouns"], "per_family": 2}),
                       executor="ray", workers=2, mlflow=True)
    result = run_sweep(cfg, lm_factory=HASHED, progress=False)
    seq = run_sweep(small_kitchen_config(tmp_path / "seq", name="memo", tasks={"families": ["nl_nouns"], "per_family": 2}),
                    lm=HASHED(), progress=False)
    key = lambda t: t.episode_id  # noqa: E731
    assert [[s.chosen for s in t.steps] for t in sorted(result.traces, key=key)] == \
        [[s.chosen for s in t.steps] for t in sorted(seq.traces, key=key)]  # exact
    sc = result.stats["scorer"]
    assert 0 < sc["memo_hit_rate"] < 1 and sc["options_computed"] < sc["options"]  # seeds and No-VF share scores
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{(tmp_path / 'ray' / 'mlruns' / 'mlflow.db').resolve()}")
    metrics = client.get_run(result.stats["mlflow_run_id"]).data.metrics
    assert metrics["sweep.scorer.memo_hit_rate"] == pytest.approx(sc["memo_hit_rate"])
