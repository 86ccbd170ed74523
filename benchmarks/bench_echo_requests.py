"""Why an HTTP client that sends one echo request per option loses the scorer's lead: the engine's
``prompt_logprobs`` (what ``/v1/completions`` with ``echo`` and ``logprobs`` runs) on the recorded SayCan
kitchen steps of ``bench_peers.py``, with each step's ``prompt + option`` texts sent three ways, in this
process (no HTTP, no JSON):

- ``lone``: one text per call, as lm-evaluation-harness's ``local-completions`` sends them at batch size 1;
- ``list8``: eight texts per call (a client's batch of 8, or 8 concurrent requests that land in one batch);
- ``list_all``: every option's text in one call (a list of prompts in one request);
- baseline ``score``: the engine's own ``score(prompt, options)``, one call per step.

Every side runs after the step's prompt is in the engine's prefix cache (an earlier step's option text
left it there), so each measures the steady state, not the first forward over the prompt. The sides
run in alternating rounds. Last line: ``result: lone_s=<s per step> list8_s=<s> list_all_s=<s> score_s=<s>
lone_per_request_ms=<ms> steps=<n>`` (medians over steps and rounds).

    python benchmarks/bench_echo_requests.py [--steps 6] [--rounds 2]
"""
from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks.*, when run as a script
from benchmarks.bench_peers import STEPS_FILE, load_steps  # noqa: E402
from benchmarks.harness import alternating, report, setup_logging  # noqa: E402

log = logging.getLogger("benchmarks.echo_requests")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=6, help="recorded kitchen steps per side per round")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps-file", default=str(STEPS_FILE), help="bench_peers.py's recorded steps")
    args = ap.parse_args(argv)
    setup_logging()

    from groundplan.factory import build_llm

    lm = build_llm("hf", "smollm2-135m-instruct")
    path = Path(args.steps_file)
    if not path.exists():
        raise SystemExit(f"{path} is missing: run benchmarks/bench_peers.py once to record the steps")
    steps, _ = load_steps(path)
    steps = steps[: args.steps]
    for s in steps:  # each step's prompt into the prefix cache, and the model warm
        lm.prompt_logprobs([s.prompt + s.options[0]], 1)
        lm.score(s.prompt, s.options[:1])

    def echo(per_call: int):
        def run() -> float:
            times = []
            for s in steps:
                texts = [s.prompt + o for o in s.options]
                t0 = time.perf_counter()
                for i in range(0, len(texts), per_call):
                    lm.prompt_logprobs(texts[i:i + per_call], 1)
                times.append(time.perf_counter() - t0)
            return statistics.median(times)
        return run

    def score() -> float:
        times = []
        for s in steps:
            t0 = time.perf_counter()
            lm.score(s.prompt, s.options)
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    sides = {"lone": echo(1), "list8": echo(8), "list_all": echo(10_000), "score": score}
    got = alternating(sides, args.rounds,
                      on_round=lambda r, order, g: log.info("round %d: %s", r, ", ".join(f"{k} {v:.2f} s" for k, v in g.items())))
    med = {k: statistics.median(v) for k, v in got.items()}
    options = len(steps[0].options)
    log.info("seconds per step (%d options): %s", options, ", ".join(f"{k} {v:.2f}" for k, v in med.items()))
    report({"lone_s": f"{med['lone']:.2f}", "list8_s": f"{med['list8']:.2f}", "list_all_s": f"{med['list_all']:.2f}",
            "score_s": f"{med['score']:.2f}", "lone_per_request_ms": f"{1000 * med['lone'] / options:.0f}",
            "steps": len(steps)})


if __name__ == "__main__":
    main()
