"""groundplan against the way the published code runs SayCan (issue 14, item 2): time per step on the
same kitchen steps, in one run.

- **groundplan's way**: the SayCan / No-VF kitchen sweep (configs/saycan_kitchen.yaml, ``--per-family``
  tasks of each of the 7 families, ``--seeds``) with the engine's shared-prefix packed scoring and
  prefix cache, SayCan's exact affordance-bound pruning (on in eval) and the scorer's score memo
  (``MemoizedLM``: the scorer actor's ``ScoreMemo`` in process, so that Ray's start-up on this 2-core
  machine is not in the figure). Step time = the sweep's wall time (planning, env execution and trace
  writing) / its number of decisions.
- **the peer way**: SayCan's public colab pattern: one episode at a time, and at every step one full
  forward pass of ``prompt + option`` per option, no key/value cache, no pruning, no memo
  (``HFLanguageModel.score_reference``: all logits of the full sequence, as an API call with
  ``echo=True`` returns them). A peer step costs seconds to minutes on a CPU, so it is sampled: ``--peer-steps``
  steps drawn at random from groundplan's own decisions (their exact prompts and option lists), and in
  each ``--peer-options`` of its options timed; the step's time is the mean per-option forward time times
  its number of options (the options' full forwards differ only by a few option tokens in length).

Output: both step times with n and a 95% interval (t over sampled steps for the peer side), their
ratio, and the last line ``result: ratio=<x> peer_step_s=<x> groundplan_step_s=<x>``.

    python benchmarks/bench_vs_peer.py [--per-family 1] [--seeds 0 1] [--peer-steps 8] [--peer-options 3]
"""
from __future__ import annotations

import argparse
import logging
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the benchmarks.* helpers, when run as `python benchmarks/<name>.py`
log = logging.getLogger("bench_vs_peer")

#: two-sided 95% Student t quantiles by degrees of freedom (for small samples of peer steps)
T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26, 10: 2.23, 12: 2.18,
       15: 2.13, 20: 2.09, 30: 2.04}


def t95(df: int) -> float:
    return T95.get(df) or T95[max(k for k in T95 if k <= df)] if df >= 1 else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-family", type=int, default=1)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--peer-steps", type=int, default=8, help="groundplan decisions re-scored the peer way")
    ap.add_argument("--peer-options", type=int, default=3, help="options timed per sampled step")
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--seed", type=int, default=0, help="seed of the step sample")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("groundplan").setLevel(logging.WARNING)  # no per-episode lines

    import torch

    from benchmarks.kitchen_sweep import saycan_kitchen_sweep
    from groundplan.actors.scorer import MemoizedLM
    from groundplan.llm.hf import HFLanguageModel
    from groundplan.pipelines.sweep import run_sweep
    from groundplan.planners.saycan import build_prompt, load_prompt

    cfg = saycan_kitchen_sweep(args.per_family, args.seeds, output_dir=tempfile.mkdtemp(prefix="bench_vs_peer_"))
    lm = HFLanguageModel(args.model)
    log.info("model %s on %s, %d torch threads", args.model, lm.device.type, torch.get_num_threads())

    # --- groundplan's way: the whole sweep
    t0 = time.perf_counter()
    result = run_sweep(cfg, lm=MemoizedLM(lm), progress=False, resume=False)
    wall = time.perf_counter() - t0
    steps = [(t, k) for t in result.traces for k in range(len(t.steps))]
    gp_step = wall / len(steps)
    plan_s = [t.steps[k].timings.get("plan_s", 0.0) for t, k in steps]
    log.info("groundplan: %d episodes, %d decisions in %.1f s = %.3f s/step (planning alone: mean %.3f s, "
             "median %.3f s)", len(result.traces), len(steps), wall, gp_step, statistics.fmean(plan_s), statistics.median(plan_s))

    # --- the peer way on a sample of the same decisions
    few = {p.display: load_prompt(p.options.get("prompt", "saycan_kitchen")) for p in cfg.planners}
    rng = random.Random(args.seed)
    sample = rng.sample(steps, min(args.peer_steps, len(steps)))
    per_step, forwards = [], 0
    lm.score_reference(build_prompt(few["SayCan"], "warm up"), [" done"])
    for t, k in sample:
        prompt = build_prompt(few[t.planner], t.instruction) + "".join(s.prompt_delta for s in t.steps[:k])
        options = [" " + c.skill for c in t.steps[k].candidates]
        timed = rng.sample(options, min(args.peer_options, len(options)))
        t1 = time.perf_counter()
        lm.score_reference(prompt, timed)
        per_option = (time.perf_counter() - t1) / len(timed)
        forwards += len(timed)
        per_step.append(per_option * len(options))
        log.info("  peer step (%s, %s, step %d): %d options, %d timed, %.2f s/option -> %.1f s/step", t.planner,
                 t.task_id, k + 1, len(options), len(timed), per_option, per_step[-1])
    peer = statistics.fmean(per_step)
    half = t95(len(per_step) - 1) * statistics.stdev(per_step) / len(per_step) ** 0.5 if len(per_step) > 1 else float("nan")
    log.info("peer: %.1f s/step (95%% CI %.1f-%.1f; n=%d steps sampled from groundplan's %d, %d full forwards timed)",
             peer, peer - half, peer + half, len(per_step), len(steps), forwards)
    ratio = peer / gp_step
    log.info("ratio: %.0fx (peer CI bounds give %.0fx-%.0fx); timings on a shared 2-core machine: noisy",
             ratio, (peer - half) / gp_step, (peer + half) / gp_step)
    print(f"result: ratio={ratio:.1f} peer_step_s={peer:.2f} groundplan_step_s={gp_step:.4f}")


if __name__ == "__main__":
    main()
