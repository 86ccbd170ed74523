"""Why an HTTP client that sends one echo request per option loses the scorer's lead: the engine's
``prompt_logprobs`` (what ``/v1/completions`` with ``echo`` and ``logprobs`` runs) on the recorded SayCan
kitchen steps of ``bench_peers.py``, with each step's ``prompt + option`` texts sent three ways, in this
process (no HTTP, no JSON):

- ``lone``: one text per call, as lm-evaluation-harness's ``local-completions`` sends them at batch size 1;
- ``list8``: eight texts per call (a client's batch of 8, or 8 concurrent requests that land in one batch);
- ``list_all``: every option's text in one call (a list of prompts in one request);
- baseline ``score``: the engine's own ``score(prompt, options)``, one call per step.

With ``--max-tokens 1`` (the default) each echo side also does what ``/v1/completions`` runs for the request
lm-evaluation-harness's ``local-completions`` sends for a log-likelihood (``echo``, ``logprobs: 1``,
``max_tokens: 1``, ``temperature: 0``): the texts' next-token logits are kept from the same forward
(``keep_next``) and one token is generated after each text. ``--max-tokens 0`` is SayCan's own echo request,
which asks for no token. So ``list8`` and ``list_all`` are the engine's share of the benchmark
``bench_http_peers.py``'s ``c8`` and ``b51`` settings: what a step costs over HTTP with nothing of HTTP, JSON or
the client in it, the floor under those settings' ratios to the in-process step (``*_vs_score``).

Every side runs after the step's prompt is in the engine's prefix cache (an earlier step's option text
left it there), so each measures the steady state, not the first forward over the prompt. The sides
run in alternating rounds. Last line: ``result: lone_s=<s per step> list8_s=<s> list_all_s=<s> score_s=<s>
lone_per_request_ms=<ms> list8_vs_score=<x> list_all_vs_score=<x> max_tokens=<0|1> steps=<n>`` (medians over
steps and rounds; a ratio is the median over rounds of that round's two medians).

    python benchmarks/bench_echo_requests.py [--steps 6] [--rounds 2] [--max-tokens 1]
"""
from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks.*, when run as a script
from benchmarks.bench_peers import STEPS_FILE, load_steps  # noqa: E402
from benchmarks.harness import alternating, report, setup_logging  # noqa: E402
from groundplan.llm.base import GenerationParams  # noqa: E402

log = logging.getLogger("benchmarks.echo_requests")
#: the sampling parameters ``/v1/completions`` passes the engine for lm-eval's request (temperature 0, its seed)
ONE_TOKEN = GenerationParams(max_new_tokens=1, temperature=0.0, seed=1234, logprobs=1)


def echo_step(lm: Any, step: Any, per_call: int, max_tokens: int = 1) -> float:
    """Seconds the engine takes for a step's ``prompt + option`` texts sent as echo requests of ``per_call``
    texts each, with ``max_tokens`` (0 or 1) generated after each text as ``/v1/completions`` runs it: the
    texts' log-probs in one ``prompt_logprobs`` call per request (their next-token logits kept when a token
    follows), then the one-token generates, which take those logits instead of a forward."""
    texts = [step.prompt + o for o in step.options]
    t0 = time.perf_counter()
    for i in range(0, len(texts), per_call):
        call = texts[i:i + per_call]
        lm.prompt_logprobs(call, 1, keep_next=max_tokens == 1)
        for text in call[:len(call) * max_tokens]:
            lm.generate(text, ONE_TOKEN)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=6, help="recorded kitchen steps per side per round")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps-file", default=str(STEPS_FILE), help="bench_peers.py's recorded steps")
    ap.add_argument("--max-tokens", type=int, default=1, choices=[0, 1],
                    help="tokens generated after each text: 1 as lm-eval's local-completions asks, 0 as SayCan's echo")
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
            return statistics.median(echo_step(lm, s, per_call, args.max_tokens) for s in steps)
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
    ratio = {k: statistics.median(a / b for a, b in zip(got[k], got["score"])) for k in ("list8", "list_all")}
    log.info("against score, per round: list8 %s, list_all %s", [f"{a / b:.2f}" for a, b in zip(got["list8"], got["score"])],
             [f"{a / b:.2f}" for a, b in zip(got["list_all"], got["score"])])
    report({"lone_s": f"{med['lone']:.2f}", "list8_s": f"{med['list8']:.2f}", "list_all_s": f"{med['list_all']:.2f}",
            "score_s": f"{med['score']:.2f}", "lone_per_request_ms": f"{1000 * med['lone'] / options:.0f}",
            "list8_vs_score": f"{ratio['list8']:.2f}", "list_all_vs_score": f"{ratio['list_all']:.2f}",
            "max_tokens": args.max_tokens, "steps": len(steps)})


if __name__ == "__main__":
    main()
