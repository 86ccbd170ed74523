"""groundplan against SayCan's public colab (the peer): time per decision on the same kitchen episodes,
both sides timed in alternating rounds of one run.

**The peer** is the colab's planning loop, reproduced against groundplan's kitchen env and model:

- each step scores every option in **one** LLM call, the colab's ``gpt3_scoring``: the request carries
  every ``prompt + option`` string (GPT-3 Completions with ``echo=True, logprobs=1, max_tokens=0,
  temperature=0``), and the server computes each string's full forward pass, all logits, with no key/value
  cache (``HFLanguageModel.score_reference``: what an echo request makes the server compute);
- every call goes through the colab's ``LLM_CACHE`` (:class:`ColabLM`): a dict keyed on ``(engine,
  "".join(prompts), max_tokens, temperature, logprobs, echo)``, the colab's ``gpt3_call`` key, so a query
  asked again (SayCan and No-VF share their first step; No-VF's queries do not depend on the seed) costs
  a dict lookup, as in the colab;
- the option's score is the sum of its own tokens' log-probs (the colab sums back to the line start,
  which adds the same constant to every option, so the argmax is the same), combined with the same
  value-function affordances and argmax'ed by SayCan's planner with pruning off (the colab scores every
  option); one episode at a time.

**groundplan** runs the same sweep its own way: packed shared-prefix scoring with its prefix cache, exact
affordance-bound pruning (on in eval) and the scorer's score memo (``MemoizedLM``, in process, so that
Ray's start-up on a small machine is not in the figure).

Both sides run the same episodes (``configs/saycan_kitchen.yaml``: ``--families`` x ``--per-family``
tasks x ``--seeds`` x ``--planners``) through the same local episode runner, env and trace writing, and
each round starts both sides with empty caches (LLM_CACHE; score memo and prefix cache), so every round
times the same cold sweep and the caches only pay off inside it. Rounds alternate the order (peer then
groundplan, then groundplan then peer, ...) so that a load change lands on both sides, not on one.

``ratio`` = the peer's time per decision / groundplan's time per decision (wall time of the whole sweep,
planning, env and traces, over its decisions), per round; reported as the geometric mean over rounds
with a 95% t-interval on the log of the per-round ratios. A peer decision over 51 kitchen skills is about
51 full forwards of a ~1,000-token prompt, minutes on a 2-core CPU: ``--max-options`` (SayCan's own
``max_options``, the same for both sides) and ``--max-steps`` shrink a run.

    python benchmarks/bench_vs_peer.py [--families nl_single_primitive] [--per-family 1] [--seeds 0 1]
        [--rounds 3] [--max-options N] [--max-steps N]

Last line: ``result: ratio=<x> ratio_lo=<x> ratio_hi=<x> peer_cache=on``.
"""
from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the benchmarks.* helpers, when run as `python benchmarks/<name>.py`
from benchmarks.harness import alternating, log_interval, report, setup_logging  # noqa: E402

log = logging.getLogger("bench_vs_peer")

class ColabLM:
    """The colab's ``gpt3_scoring`` over ``gpt3_call`` and its ``LLM_CACHE``, as a language model.

    ``score(prompt, options)`` makes one call carrying every ``prompt + option`` string, memoised on the
    colab's own key ``(engine, "".join(strings), max_tokens, temperature, logprobs, echo)``; a miss goes
    to the server, which computes every string's full forward (``score_reference``), or ``score`` for a
    model without that path (the test doubles). Nothing but whole identical calls is reused.
    """

    def __init__(self, lm: Any) -> None:
        self.lm = lm
        self.name = lm.name
        self.cache: dict[tuple, Any] = {}  # the colab's LLM_CACHE
        self.calls = 0
        self.hits = 0

    def gpt3_call(self, query: str, options: Sequence[str], max_tokens: int = 128, temperature: float = 0,
                  logprobs: int = 1, echo: bool = False) -> Any:
        prompt = [query + option for option in options]
        key = (self.name, "".join(prompt), max_tokens, temperature, logprobs, echo)
        self.calls += 1
        if key in self.cache:
            self.hits += 1
            return self.cache[key]
        server = getattr(self.lm, "score_reference", None) or self.lm.score
        response = server(query, list(options))
        self.cache[key] = response
        return response

    def score(self, prompt: str, options: Sequence[str]) -> list[Any]:
        return self.gpt3_call(prompt, options, max_tokens=0, temperature=0, logprobs=1, echo=True)

    def score_batch(self, requests: Sequence[tuple[str, Sequence[str]]]) -> list[list[Any]]:
        return [self.score(p, o) for p, o in requests]  # the colab sends one query at a time

    def generate(self, prompt: str, params: Any) -> Any:
        return self.lm.generate(prompt, params)

    def embed(self, texts: Sequence[str]) -> Any:
        return self.lm.embed(texts)


def sweep_config(args: argparse.Namespace, output_dir: str) -> Any:
    """The kitchen sweep both sides run (groundplan's planner options as configured)."""
    from benchmarks.kitchen_sweep import saycan_kitchen_sweep

    cfg = saycan_kitchen_sweep(args.per_family, args.seeds, output_dir=output_dir)
    planners = [p for p in cfg.planners if p.display in args.planners]
    if args.max_options is not None:
        planners = [p.model_copy(update={"options": {**p.options, "max_options": args.max_options}}) for p in planners]
    update: dict[str, Any] = {"planners": planners}
    if args.families and args.families != ["all"]:
        update["tasks"] = cfg.tasks.model_copy(update={"families": list(args.families)})
    if args.max_steps is not None:
        update["max_steps"] = args.max_steps
    return cfg.model_copy(update=update)


def peer_config(cfg: Any) -> Any:
    """The same sweep with SayCan's pruning off: the colab scores every option."""
    return cfg.model_copy(update={"planners": [p.model_copy(update={"options": {**p.options, "prune": False}})
                                               for p in cfg.planners]})


def _clear_engine_cache(lm: Any) -> None:
    cache = getattr(lm, "cache", None)
    if cache is not None and hasattr(cache, "clear"):
        cache.clear()


def run_side(side: str, cfg: Any, lm: Any) -> dict[str, Any]:
    """One cold sweep of one side, timed from start to end of ``run_sweep``."""
    from groundplan.llm.memo import MemoizedLM
    from groundplan.pipelines.evaluate.sweep import run_sweep

    _clear_engine_cache(lm)
    wrapped = ColabLM(lm) if side == "peer" else MemoizedLM(lm)
    with tempfile.TemporaryDirectory(prefix=f"bench_vs_peer_{side}_") as out:
        run_cfg = cfg.model_copy(update={"output_dir": out})
        t0 = time.perf_counter()
        result = run_sweep(run_cfg, lm=wrapped, progress=False, resume=False)
        wall = time.perf_counter() - t0
    decisions = sum(len(t.steps) for t in result.traces)
    plans = {(t.planner, t.task_id, t.seed): [s.chosen for s in t.steps] for t in result.traces}
    if side == "peer":
        cache = f"LLM_CACHE {wrapped.hits}/{wrapped.calls} calls hit"
    else:
        cache = f"score memo {wrapped.memo.hits}/{wrapped.memo.lookups} option lookups hit"
    return {"wall_s": wall, "decisions": decisions, "step_s": wall / max(decisions, 1), "plans": plans, "cache": cache,
            "errors": sum(t.error is not None for t in result.traces)}


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--families", nargs="+", default=["nl_single_primitive"], help="task families ('all': the 7)")
    ap.add_argument("--per-family", type=int, default=1)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--planners", nargs="+", default=["SayCan", "No-VF"], choices=["SayCan", "No-VF"])
    ap.add_argument("--max-steps", type=int, default=None, help="decisions per episode (default: the config's)")
    ap.add_argument("--max-options", type=int, default=None,
                    help="SayCan's max_options for both sides (default: every one of the 51 skills)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of (peer, groundplan), order alternating")
    ap.add_argument("--backend", default="hf", help="LLM backend (a registered test double for the test)")
    ap.add_argument("--model", default="smollm2-135m-instruct")
    args = ap.parse_args(argv)
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    setup_logging(quiet=("groundplan",))

    from groundplan.actors.scorer import import_plugins
    from groundplan.llm import load_llm

    import_plugins()  # a backend registered by a module named in $GROUNDPLAN_PLUGINS
    lm = load_llm(args.backend, model=args.model)
    cfg = sweep_config(args, "outputs/bench_vs_peer")  # each side's run writes to a temporary folder instead
    peer_cfg = peer_config(cfg)
    import torch

    log.info("model %s (%s backend), %d torch threads", lm.name, args.backend, torch.get_num_threads())

    # untimed warm-up: each side's model path, the embedder and action embeddings (with --max-options)
    run_side("groundplan", cfg.model_copy(update={"max_steps": 1}), lm)
    ColabLM(lm).score("Human: warm up\nRobot: 1.", [" done"])

    def show(r: int, order: tuple[str, ...], out: dict[str, dict]) -> None:
        peer, gp = out["peer"], out["groundplan"]
        same = sum(peer["plans"].get(k) == v for k, v in gp["plans"].items())
        log.info("round %d (%s first): peer %d decisions in %.1f s = %.2f s/decision (%s); groundplan %d in %.1f s = "
                 "%.3f s/decision (%s); ratio %.1fx; same plan in %d/%d episodes", r + 1, order[0],
                 peer["decisions"], peer["wall_s"], peer["step_s"], peer["cache"],
                 gp["decisions"], gp["wall_s"], gp["step_s"], gp["cache"], peer["step_s"] / gp["step_s"], same,
                 len(gp["plans"]))
        if peer["errors"] or gp["errors"]:
            log.warning("episodes that ended in an error: peer %d, groundplan %d", peer["errors"], gp["errors"])

    sides = alternating({"peer": lambda: run_side("peer", peer_cfg, lm),
                         "groundplan": lambda: run_side("groundplan", cfg, lm)}, args.rounds, show)
    rows = [p["step_s"] / g["step_s"] for p, g in zip(sides["peer"], sides["groundplan"])]

    ratio, lo, hi = log_interval(rows)
    log.info("ratio (peer s/decision / groundplan s/decision): %.1fx, 95%% CI %.1f-%.1f over %d rounds "
             "(geometric mean, t-interval on log ratios)", ratio, lo, hi, len(rows))
    report({"ratio": f"{ratio:.3g}", "ratio_lo": f"{lo:.3g}", "ratio_hi": f"{hi:.3g}", "peer_cache": "on"})


if __name__ == "__main__":
    main()
