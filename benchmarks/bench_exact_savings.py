"""Savings on the SayCan kitchen sweep with the real model: the score memo and SayCan's
affordance-bound pruning, alone and together, against full scoring, in one run.

Neither changes the logic of a decision, but both change the path that computes a score (a memo hit is
the score as first computed; pruning scores in chunks), which moves log-probs by about 1e-5. So every
variant must choose the same skills in every episode (checked here) and scores agree within that. The sweep is
configs/saycan_kitchen.yaml restricted to SayCan and No-VF, ``--per-family`` tasks of each of the 7
families, seeds 0-2, in-process (``run_sweep`` with the local executor) with one HF model whose prefix cache is cleared and
re-warmed with the few-shot prompt before each variant. The memo is the scorer actor's
(``groundplan.llm.memo.MemoizedLM`` wraps the same ``ScoreMemo``), fresh per variant.

Step time = planner time per decision (``timings.plan_s``: scoring + affordance), all planners.

    python benchmarks/bench_exact_savings.py [--per-family 2] [--seeds 0 1 2]

Last line: ``result: prune_speedup=<x> memo_speedup=<x> both_speedup=<x> full_step_ms=<x> memo_hit_rate=<x>``
"""
from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the benchmarks.* helpers, when run as `python benchmarks/<name>.py`
from benchmarks.harness import report, setup_logging  # noqa: E402

log = logging.getLogger("bench_exact_savings")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-family", type=int, default=2)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--max-steps", type=int, default=20, help="step cap per episode (the config's is 20)")
    ap.add_argument("--no-memo-only", action="store_true", help="skip the memo-alone variant (saves a quarter of the time)")
    ap.add_argument("--model", default="smollm2-135m-instruct")
    args = ap.parse_args()
    setup_logging(quiet=("groundplan",))

    from benchmarks.kitchen_sweep import saycan_kitchen_sweep
    from groundplan.llm.hf import HFLanguageModel
    from groundplan.llm.memo import MemoizedLM, ScoreMemo
    from groundplan.pipelines.evaluate.sweep import run_sweep
    from groundplan.planners.saycan import load_prompt

    base = saycan_kitchen_sweep(args.per_family, args.seeds, max_steps=args.max_steps)
    lm = HFLanguageModel(args.model)
    out = Path(tempfile.mkdtemp(prefix="bench_savings_"))

    def variant(name: str, prune: bool, memo: bool):
        planners = [p.model_copy(update={"options": {**p.options, "prune": prune}}) if p.name == "saycan" else p
                    for p in base.planners]
        cfg = base.model_copy(update={"planners": planners, "output_dir": str(out / name), "name": name})
        lm.cache.clear()
        lm.score(load_prompt("saycan_kitchen") + "Human: hi\nRobot: 1.", [" done"])  # warm the few-shot prefix
        before = lm.stats.options_scored
        model = MemoizedLM(lm, ScoreMemo()) if memo else lm
        result = run_sweep(cfg, lm=model, progress=False, resume=False)
        steps = [s for t in result.traces for s in t.steps]
        plan_s = sum(s.timings.get("plan_s", 0.0) for s in steps)
        scored = lm.stats.options_scored - before
        hit = model.memo.stats()["memo_hit_rate"] if memo else 0.0
        # keyed by what the episode is, not its id: the id hashes the planner options, prune included
        decisions = {(t.planner, t.task_id, t.seed): [s.chosen for s in t.steps] for t in result.traces}
        step_ms = 1e3 * plan_s / len(steps)
        per = {p: statistics.fmean([s.timings["plan_s"] for t in result.traces if t.planner == p for s in t.steps]) * 1e3
               for p in ("SayCan", "No-VF")}
        log.info("%-11s %4d episodes %5d steps  %6.1f ms/step (SayCan %.1f, No-VF %.1f)  %6d options scored  memo hit %.2f",
                 name, len(result.traces), len(steps), step_ms, per["SayCan"], per["No-VF"], scored, hit)
        return step_ms, scored, hit, decisions

    full = variant("full", prune=False, memo=False)
    prune = variant("prune", prune=True, memo=False)
    memo = None if args.no_memo_only else variant("memo", prune=False, memo=True)
    both = variant("prune+memo", prune=True, memo=True)
    runs = [v for v in (prune, memo, both) if v is not None]
    same = all(v[3] == full[3] for v in runs)
    log.info("identical decisions in every episode across the %d variants: %s", len(runs) + 1, same)
    if not same:
        raise SystemExit("the exact savings changed a decision")
    log.info("options scored: full %d, prune %d (%.0f%%), memo %s, both %d", full[1], prune[1], 100 * prune[1] / full[1],
             memo[1] if memo else "-", both[1])
    memo_speedup = f"{full[0] / memo[0]:.2f}" if memo else "nan"
    report({"prune_speedup": f"{full[0] / prune[0]:.2f}", "memo_speedup": memo_speedup,
            "both_speedup": f"{full[0] / both[0]:.2f}", "full_step_ms": f"{full[0]:.1f}", "memo_hit_rate": f"{both[2]:.3f}"})


if __name__ == "__main__":
    main()
