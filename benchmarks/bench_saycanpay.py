"""Beam-Action per-step cost of SayCanPay (Hazra et al., Sec. 5.2) and Can/Pay batching.

One Beam-Action depth is: k LM proposals (token-level diverse beam search, m = 6 beams, 3 groups,
10 new tokens, each after its own beam's prompt) plus Can and Pay scores for all k×m (history,
candidate) pairs. This times, on kitchen tasks with the embedded SmolLM2-135M and MiniLM Can/Pay:

- ``propose_ms``: the k proposals of a depth;
- ``score_batched_ms``: Can + Pay over the k×m pairs in one forward pass per model (the planner's path);
- ``score_single_ms``: the same pairs one forward pass each (the baseline, same run);
- ``step_ms`` = propose_ms + score_batched_ms; ``batched_ratio`` = score_single_ms / score_batched_ms.

Medians over ``--reps`` depths. Can/Pay default to freshly initialised models (the cost does not depend
on the weights); ``--can/--pay`` take trained ones (``models:/can-kitchen/1`` with ``--tracking-uri``).
Run under ``flock /tmp/gp-heavy.lock``; on a shared machine the figures are noisy.

    python benchmarks/bench_saycanpay.py --reps 5
"""
from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

from tqdm.auto import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks.harness, when run as a script
from benchmarks.harness import report  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5, help="Beam-Action depths timed (medians reported)")
    ap.add_argument("--k", type=int, default=3, help="beam size over actions")
    ap.add_argument("--m", type=int, default=6, help="candidates per beam (beams of the token search)")
    ap.add_argument("--can", default=None, help="Can model URI or folder (default: an untrained MiniLM Can)")
    ap.add_argument("--pay", default=None, help="Pay model URI or folder (default: an untrained MiniLM Pay)")
    ap.add_argument("--tracking-uri", default=None)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)

    from groundplan.envs.kitchen import KitchenEnv
    from groundplan.grounding.canpay.config import CanPayModelConfig
    from groundplan.grounding.canpay.model import CanPayModel
    from groundplan.grounding.saycanpay import LearnedCanPay
    from groundplan.llm import load_llm
    from groundplan.planners.saycanpay import Expansion, SayCanPayPlanner

    tmp = tempfile.TemporaryDirectory(prefix="bench-saycanpay-")
    can, pay = args.can, args.pay
    if can is None:
        can = str(CanPayModel(CanPayModelConfig(kind="can")).save(f"{tmp.name}/can"))
    if pay is None:
        pay = str(CanPayModel(CanPayModelConfig(kind="pay")).save(f"{tmp.name}/pay"))
    source = LearnedCanPay(can_model=can, pay_model=pay, tracking_uri=args.tracking_uri, device="cpu")
    lm = load_llm("hf", model="smollm2-135m-instruct", beam_memo_size=0)  # time the search, not the memo
    planner = SayCanPayPlanner(lm, source, decoding="beam_action", score="saycanpay", num_candidates=args.m,
                               beam_size=args.k)
    env = KitchenEnv(mode="language", split="test")
    tasks = [t for t in env.tasks() if len(t.reference_plan) >= 4]

    propose, batched, single, items_per_step = [], [], [], []
    for rep in tqdm(range(args.reps + 1), desc="depths"):
        task = tasks[rep % len(tasks)]
        obs = env.reset(task, 0)
        planner.reset(task, obs, seed=0)
        actions = planner._actions(obs)
        depth = 1 + rep % 3
        # k beam prefixes at this depth: the reference prefix and two one-action variants of it
        ref = list(task.reference_plan[:depth])
        prefixes = [tuple(ref)] + [tuple(ref[:-1] + [a]) for a in actions[rep: rep + args.k - 1]]
        t0 = time.perf_counter()
        exps = [Expansion(i, p, c) for i, p in enumerate(prefixes) for c in planner.candidates(p, actions)]
        t1 = time.perf_counter()
        items = [(e.prefix, e.candidate.action) for e in exps]
        # pad to the full k×m (merged duplicates shrink it) so every rep scores the same count
        items = (items * (args.k * args.m // max(len(items), 1) + 1))[: args.k * args.m]
        t2 = time.perf_counter()
        source.score_sequences(task.instruction, obs.text, items)
        t3 = time.perf_counter()
        source.score_sequences(task.instruction, obs.text, items, one_by_one=True)
        t4 = time.perf_counter()
        if rep == 0:
            continue  # warm-up (first forward passes, prefix cache fill)
        propose.append(1e3 * (t1 - t0))
        batched.append(1e3 * (t3 - t2))
        single.append(1e3 * (t4 - t3))
        items_per_step.append(len(items))

    med = statistics.median
    step_ms = med(propose) + med(batched)
    ratio = med(single) / med(batched)
    print(f"k={args.k} m={args.m} pairs/step={med(items_per_step):.0f} reps={args.reps}")
    print(f"propose_ms (k LM proposals) median={med(propose):.1f} min={min(propose):.1f} max={max(propose):.1f}")
    print(f"score_batched_ms (Can+Pay, one pass each) median={med(batched):.1f}")
    print(f"score_single_ms (Can+Pay, one pass per pair) median={med(single):.1f}")
    report({"batched_ratio": f"{ratio:.2f}", "step_ms": f"{step_ms:.1f}"})


if __name__ == "__main__":
    main()
