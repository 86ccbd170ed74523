"""float32 against a reduced precision (bf16 by default) on the SayCan kitchen: speed and decisions.

1. The kitchen sweep (every instruction of ``configs/saycan_kitchen.yaml``, SayCan and No-VF, in this process)
   runs once in float32 and once in the other precision, alternating which goes first over ``--rounds``;
   each side's time is its episodes' recorded wall clocks (one process, one episode at a time), so
   ``--reuse-runs`` can read a finished sweep's folder instead of running it again. Both sides' run folders
   are kept, so the end-to-end outcomes go through ``groundplan tables`` like any other pair of runs.
2. Every float32 decision is re-decided on its own prompt (the float32 episode's history) by both engines
   scoring every option without pruning: the float32 re-decision must reproduce the trace's choice, and the
   other precision's is compared with it (:mod:`groundplan.evaluation.precision`), with the float32 top-two
   gap beside each change. A step whose every option the trace scored (No-VF: no affordance, no pruning)
   keeps the trace's own float32 log-probs. The int8 candidate re-decides ``--int8-planners``' decisions.

    python benchmarks/bench_precision.py [--precision bfloat16] [--per-family N] [--no-int8] [--out FILE.json]

The data file is what ``docs/models.md``'s precision block renders
(``groundplan tables --render docs/models.md``).
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
from copy import deepcopy as copy_module
from pathlib import Path

import torch
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks.*, when run as a script
from benchmarks.kitchen_sweep import ROOT, saycan_kitchen_sweep  # noqa: E402
from groundplan.core.hardware import cpu_flags  # noqa: E402
from groundplan.evaluation.precision import DEFAULT_GAP, check, passes, summarise, to_json  # noqa: E402
from groundplan.llm.hf import HFLanguageModel  # noqa: E402
from groundplan.pipelines.evaluate.sweep import run_sweep  # noqa: E402
from groundplan.rollout.traces import EpisodeTrace, read_traces  # noqa: E402

log = logging.getLogger("bench_precision")


def dump(data: dict) -> str:
    """The data file's JSON: indented, but one line per decision row (thousands of them)."""
    rows = data["decisions"]["rows"]
    text = json.dumps({**data, "decisions": {**data["decisions"], "rows": "@ROWS@"}}, indent=1)
    return text.replace('"@ROWS@"', "[\n" + ",\n".join(json.dumps(r) for r in rows) + "\n  ]") + "\n"


def int8_dynamic_engine(model: str) -> HFLanguageModel:
    """The float32 model with its decoder's linear layers quantised to int8 by torch's dynamic quantisation
    (per-tensor weights, activations quantised per call; fbgemm/oneDNN VNNI kernels): the int8 candidate."""
    from groundplan.llm.loading import load_causal_lm, register_model

    base = load_causal_lm(model, dtype="float32")
    copy = copy_module(base.model)
    copy.model.layers = torch.ao.quantization.quantize_dynamic(copy.model.layers, {torch.nn.Linear}, dtype=torch.qint8)
    register_model(f"{model}#int8_dynamic", copy, base.tokenizer)
    return HFLanguageModel(f"{model}#int8_dynamic")


def redecide(traces: list[EpisodeTrace], lm32: HFLanguageModel, others: dict[str, HFLanguageModel],
             planners_of: dict[str, set[str] | None]) -> tuple[list, int]:
    """Every decision of ``traces`` re-decided by float32 and by each engine of ``others`` (on the planners
    ``planners_of[name]`` names; None: all); and how many float32 re-decisions differ from the trace's own
    choice (near-ties only: pruned and unpruned scoring agree to ~1e-5). A step whose every option the trace
    scored (no affordance, so no pruning: No-VF) keeps the trace's own float32 log-probs."""
    checks, unreproduced = [], 0
    work = [(t, k, s, p) for t in traces if t.error is None for k, (s, p) in enumerate(zip(t.steps, t.step_prompts()))]
    for trace, k, step, prompt in tqdm(work, desc="re-decide", unit="step"):
        cands = [c for c in step.candidates if c.affordance is None or c.affordance > 0]
        skills = [c.skill for c in cands]
        aff = None if cands[0].affordance is None else [c.affordance for c in cands]
        options = [" " + s for s in skills]
        if all(c.llm is not None for c in cands):
            llm32 = [c.extra.get("logprob_sum", c.llm) for c in cands]
        else:
            llm32 = [s.logprob_sum for s in lm32.score(prompt, options)]
        b32 = None
        for name, lm in others.items():
            if planners_of.get(name) is not None and trace.planner not in planners_of[name]:
                continue
            llm_other = [s.logprob_sum for s in lm.score(prompt, options)]
            c = check(name, trace.planner, trace.episode_id, k, skills, llm32, llm_other, aff)
            checks.append(c)
            b32 = c.float32_choice
        if b32 is not None and b32 != step.chosen:
            unreproduced += 1
            log.warning("%s step %d: float32 re-decided %r, the trace chose %r", trace.episode_id, k, b32, step.chosen)
    return checks, unreproduced


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--precision", default="bfloat16", choices=["bfloat16", "float16"])
    ap.add_argument("--int8", action=argparse.BooleanOptionalAction, default=True,
                    help="also re-decide with torch's dynamic int8 quantisation of the linear layers")
    ap.add_argument("--per-family", type=int, default=None, help="tasks per family (default: all 84 instructions)")
    ap.add_argument("--rounds", type=int, default=1, help="sweeps per side, alternating which goes first")
    ap.add_argument("--reuse-runs", action="store_true", help="read a side's sweep from its run folder where one "
                    "exists (its episodes' recorded wall clocks are its time) instead of running it again")
    ap.add_argument("--int8-planners", default="SayCan", help="planners whose decisions the int8 engine re-decides "
                    "(comma-separated; 'all')")
    ap.add_argument("--runs", default=str(ROOT / "outputs" / "bench_precision"), help="where the sweeps' folders go")
    ap.add_argument("--out", default=str(ROOT / "docs" / "results" / "data" / "precision" / "kitchen.json"))
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    other = args.precision

    walls: dict[str, list[float]] = {"float32": [], other: []}
    traces: dict[str, list[EpisodeTrace]] = {}
    cfg = saycan_kitchen_sweep(args.per_family, [0], output_dir=args.runs)
    for r in range(args.rounds):
        for dtype in (["float32", other] if r % 2 == 0 else [other, "float32"]):
            folder = Path(args.runs) / f"saycan_kitchen_{dtype}"
            if args.reuse_runs and (folder / "traces.jsonl").is_file():
                traces[dtype] = list(read_traces(folder / "traces.jsonl"))
            else:
                run = cfg.model_copy(update={"name": folder.name, "llm": cfg.llm.model_copy(
                    update={"options": {**cfg.llm.options, "dtype": dtype}})})
                traces[dtype] = run_sweep(run, progress=True, resume=False).traces
            # the sweep's time as its episodes' wall clocks (one process, one episode at a time)
            walls[dtype].append(sum(t.wall_s for t in traces[dtype]))
            log.info("%s: %d episodes, %.1f s", dtype, len(traces[dtype]), walls[dtype][-1])

    lm32 = HFLanguageModel(cfg.llm.model, dtype="float32")
    others = {other: HFLanguageModel(cfg.llm.model, dtype=other)}
    if args.int8:
        others["int8_dynamic"] = int8_dynamic_engine(cfg.llm.model)
    int8_on = None if args.int8_planners == "all" else set(args.int8_planners.split(","))
    checks, unreproduced = redecide(traces["float32"], lm32, others, {"int8_dynamic": int8_on})
    summary = summarise(checks)
    flags = sorted(f for f in cpu_flags() if f in {"avx512_bf16", "amx_bf16", "avx512_fp16", "amx_fp16", "avx512_vnni", "amx_int8"})
    kernel = f"torch {torch.__version__}, oneDNN; CPU flags: {', '.join(flags) or 'none of bf16/fp16/int8'}"
    data = {
        "threshold": DEFAULT_GAP, "model": cfg.llm.model, "kernel": kernel, "torch_threads": torch.get_num_threads(),
        "rounds": args.rounds, "unreproduced_float32": unreproduced, "timing": "sum of the episodes' wall clocks",
        "speed": {k: {"episodes": len(traces[k]), "decisions": sum(len(t.steps) for t in traces[k]), "wall_s": round(min(v), 2)}
                  for k, v in walls.items()},
        "runs": {k: str(Path(args.runs) / f"saycan_kitchen_{k}") for k in walls},
        "decisions": to_json(checks),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(dump(data), encoding="utf-8")
    log.info("wrote %s", out)
    speedup = min(walls["float32"]) / min(walls[other])
    figures = " ".join(f"{p}_changed={summary[(p, 'all')]['changed']}/{summary[(p, 'all')]['decisions']} "
                       f"{p}_max_abs_dlogp={summary[(p, 'all')]['max_abs_dlogp']:.3f} "
                       f"{p}_default_rule={'met' if passes(summary, p) else 'not_met'}" for p in others)
    print(f"result: {other}_sweep_speedup={speedup:.2f} {figures} unreproduced_float32={unreproduced}")


if __name__ == "__main__":
    main()
