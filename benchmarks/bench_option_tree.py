"""Options packed as a token tree against the flat packing, on the same warm steps in one run.

Two workloads, each a list of warm score requests (the prompt cached, so a request's cost is its options'
rows): the SayCan kitchen step (the few-shot prompt, an instruction, one executed step; the 51 skills), and
the first SayCan step of ``--eai-tasks`` EAI held-out tasks (EAI's own prompt, ~2,300 tokens; every listed
action, 125 to 1,038 a task). Each side scores every request of a workload (median of ``--repeats`` calls
a request) in alternating rounds; the flat side is the same engine with ``share_prefixes`` off, each option
on a branch of its own (the layout before the tree). Prints the rows each side runs, the per-round speedup
and its 95% interval, and the agreement: the largest |delta log p| of an option and whether every request's
top option (by sum and by mean) is the same on both sides. ``--backend llamacpp`` runs groundplan's llama.cpp
backend instead (the same GGUF on llama.cpp's kernels: the tree's rows are batch tokens tagged with every
sequence id below them, the flat side one forked sequence per option), with ``--threads`` threads.

    python benchmarks/bench_option_tree.py [--backend hf|llamacpp] [--eai-tasks 6] [--rounds 5] [--repeats 3]
        [--dtype auto] [--max-options N]

``--eai-tasks 0`` leaves the EAI workload out; ``--max-options`` keeps each request's first N options (a smoke run).

Last line: ``result: kitchen_speedup=... kitchen_ci=... kitchen_rows=... eai_speedup=... eai_ci=... eai_rows=...
max_abs_dlogp=... top_unchanged=...`` (``<workload>_rows``: flat/tree).
"""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from groundplan.envs.kitchen.skills import SKILLS
from groundplan.factory import build_env, build_llm, make_planner
from groundplan.config import PlannerSpec
from groundplan.planners.saycan import load_prompt

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks.harness, when run as a script
from benchmarks.harness import alternating, load_average, log_interval, report, setup_logging, timed  # noqa: E402

log = logging.getLogger("bench_option_tree")

Request = tuple[str, list[str]]


def kitchen_requests() -> list[Request]:
    """The kitchen step of ``bench_scoring.py``: its prompt after one executed step, every skill."""
    prompt = load_prompt("saycan_kitchen") + "Human: How would you bring me a coke can?\nRobot: 1. find a coke can, 2."
    return [(prompt, [" " + s for s in SKILLS])]


def eai_requests(lm, n_tasks: int) -> list[Request]:
    """The first SayCan step of ``n_tasks`` EAI held-out tasks spread over the split: the planner's own
    prompt (``saycan_eai``) and every action the env lists."""
    env = build_env("virtualhome_eai", {"task_set": "official", "limit": 20, "sample_seed": 0, "split": "held_out"})
    tasks = env.tasks()
    spec = PlannerSpec(name="saycan_novf", options={"prompt": "saycan_eai", "max_instruction_chars": 20000})
    planner = make_planner(spec, lm, max_steps=16)
    out = []
    for task in tasks[:: max(1, len(tasks) // n_tasks)][:n_tasks]:
        obs = env.reset(task, 0)
        planner.reset(task, obs)
        skills = [s for s, ok in zip(obs.skills, obs.admissible or [True] * len(obs.skills)) if ok]
        out.append((planner.prompt, [" " + s for s in skills]))
    env.close()
    return out


def run_side(lm, requests: list[Request], share: bool, repeats: int) -> float:
    """Seconds to score every request warm (its prompt cached), the median of ``repeats`` calls each."""
    lm.share_prefixes = share
    total = 0.0
    for prompt, options in requests:
        lm.score(prompt, options)  # caches the prompt (and, after the first side, finds it cached)
        total += timed(lambda: lm.score(prompt, options), repeats)
    return total


#: each backend's counter of the option rows its forwards ran
ROWS_STAT = {"hf": "forward_tokens", "llamacpp": "option_tokens_evaluated"}


def rows_and_scores(lm, requests: list[Request], share: bool,
                    counter: str = "forward_tokens") -> tuple[int, list[np.ndarray], list[np.ndarray]]:
    """Rows one warm pass runs (the backend's ``counter``), and each request's option log-prob sums and means."""
    lm.share_prefixes = share
    for prompt, options in requests:
        lm.score(prompt, options)
    before = getattr(lm.stats, counter)
    sums, means = [], []
    for prompt, options in requests:
        got = lm.score(prompt, options)
        sums.append(np.array([s.logprob_sum for s in got]))
        means.append(np.array([s.logprob_mean for s in got]))
    return getattr(lm.stats, counter) - before, sums, means


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--backend", choices=list(ROWS_STAT), default="hf")
    ap.add_argument("--dtype", default="auto", help="the hf backend's dtype")
    ap.add_argument("--threads", type=int, default=2, help="the llamacpp backend's n_threads")
    ap.add_argument("--eai-tasks", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-options", type=int, default=None, help="keep each request's first N options")
    args = ap.parse_args(argv)
    setup_logging()

    if args.backend == "hf":
        lm = build_llm("hf", args.model, {"dtype": args.dtype, "prefix_cache_mb": 4096})
        precision = str(lm.model.dtype)
    else:
        lm = build_llm("llamacpp", args.model, {"n_threads": args.threads})
        precision = "GGUF weights"
    workloads: dict[str, list[Request]] = {"kitchen": kitchen_requests()}
    if args.eai_tasks > 0:
        workloads["eai"] = eai_requests(lm, args.eai_tasks)
    workloads = {name: [(p, o[:args.max_options]) for p, o in reqs] for name, reqs in workloads.items()}
    log.info("%s backend, model %s, %s, %d torch threads, load average %.2f", args.backend, args.model, precision,
             torch.get_num_threads(), load_average()[0])
    fields: dict[str, str] = {}
    worst, same_top = 0.0, True
    for name, requests in workloads.items():
        flat_rows, flat_sum, flat_mean = rows_and_scores(lm, requests, False, ROWS_STAT[args.backend])
        tree_rows, tree_sum, tree_mean = rows_and_scores(lm, requests, True, ROWS_STAT[args.backend])
        for a, b, am, bm in zip(flat_sum, tree_sum, flat_mean, tree_mean):
            worst = max(worst, float(np.max(np.abs(a - b))))
            same_top &= int(np.argmax(a)) == int(np.argmax(b)) and int(np.argmax(am)) == int(np.argmax(bm))
        n_options = sum(len(o) for _, o in requests)
        log.info("%s: %d requests, %d options; rows flat %d, tree %d (%.2fx fewer)", name, len(requests), n_options,
                 flat_rows, tree_rows, flat_rows / tree_rows)
        sides: dict[str, Callable[[], float]] = {
            "flat": lambda r=requests: run_side(lm, r, False, args.repeats),
            "tree": lambda r=requests: run_side(lm, r, True, args.repeats),
        }
        got = alternating(sides, args.rounds, on_round=lambda r, order, g: log.info(
            "%s round %d (%s): flat %.3f s, tree %.3f s", name, r + 1, ",".join(order), g["flat"], g["tree"]))
        speedup, lo, hi = log_interval([f / t for f, t in zip(got["flat"], got["tree"])])
        log.info("%s: tree %.2fx the flat packing [%.2f, %.2f] over %d rounds (flat median %.3f s, tree %.3f s)",
                 name, speedup, lo, hi, args.rounds, float(np.median(got["flat"])), float(np.median(got["tree"])))
        fields[f"{name}_speedup"] = f"{speedup:.2f}"
        fields[f"{name}_ci"] = f"{lo:.2f}-{hi:.2f}"
        fields[f"{name}_rows"] = f"{flat_rows}/{tree_rows}"
    lm.share_prefixes = True
    fields["max_abs_dlogp"] = f"{worst:.2g}"
    fields["top_unchanged"] = str(same_top).lower()
    fields["backend"] = args.backend
    report(fields)


if __name__ == "__main__":
    main()
