"""How well a learned Can ranks EAI's skills: the measurement behind SayCan's learned-Can row on EAI.

SayCan multiplies the LLM score of every skill by its affordance (Ahn et al. 2022, Algorithm 1), so a Can
helps only if it ranks the feasible, useful next step above the ~245 others of an EAI task. For the test
tasks of ``configs/eai_virtualhome.yaml`` (EAI's 20-task sample), this walks each gold program's first
``--steps`` steps and asks the Can for p_can of every skill after the gold history. It reports the gold
step's rank among the skills (1 = best) beside a random ranking's expected rank ((n + 1) / 2), the share
of gold steps in the Can's top 10, and the spread of p_can over a step's skills (a flat Can cannot
prune). Each task's gold program is played in the env, so the history is the gold one.

    python benchmarks/probe_eai_can.py --model models:/can-eai/1 --steps 3

The last line is ``result: key=value ...``.
"""
from __future__ import annotations

import argparse
import logging
import statistics

import numpy as np

log = logging.getLogger("probe_eai_can")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="models:/can-eai/1")
    ap.add_argument("--tracking-uri", default="sqlite:///outputs/train/mlruns/mlflow.db")
    ap.add_argument("--steps", type=int, default=3, help="gold steps probed per task")
    ap.add_argument("--limit", type=int, default=20)
    ap.add_argument("--sample-seed", type=int, default=0)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    from groundplan.envs.virtualhome.eai.env import task_skills
    from groundplan.envs.virtualhome.eai.tasks import load_task, sample_ids
    from groundplan.grounding.saycanpay import LearnedCanPay

    source = LearnedCanPay(can_model=args.model, tracking_uri=args.tracking_uri, device="cpu")
    ranks, random_ranks, top10, spreads = [], [], [], []
    for task_id in sample_ids("official", args.limit, args.sample_seed):
        task = load_task(task_id)
        skills = list(task_skills(task_id))
        gold = list(task.reference_skills)
        for t in range(min(args.steps, len(gold))):
            if gold[t] not in skills:
                continue
            can = source.score_sequences(task.prompt, "", [(gold[:t], s) for s in skills]).can
            rank = 1 + int(np.sum(can > can[skills.index(gold[t])]))
            ranks.append(rank)
            random_ranks.append((len(skills) + 1) / 2)
            top10.append(rank <= 10)
            spreads.append(float(np.percentile(can, 90) - np.percentile(can, 10)))
            log.info("%s step %d %s: rank %d of %d, p_can %.3f (skills: min %.3f median %.3f max %.3f)", task_id,
                     t + 1, gold[t], rank, len(skills), can[skills.index(gold[t])], can.min(), np.median(can), can.max())
    print(f"result: gold_steps={len(ranks)} median_rank={statistics.median(ranks):.0f} "
          f"random_median_rank={statistics.median(random_ranks):.0f} mean_rank={statistics.mean(ranks):.1f} "
          f"random_mean_rank={statistics.mean(random_ranks):.1f} top10={sum(top10)}/{len(top10)} "
          f"p_can_p90_minus_p10_median={statistics.median(spreads):.3f}")


if __name__ == "__main__":
    main()
