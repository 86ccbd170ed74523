"""How scoring cost grows with the work: options 51 -> 250 -> 1,000 and prompts 500 -> 4,000 tokens.

Two curves, each beside the model's own cost (the FLOPs its tokens need) and llama.cpp's (llama-cpp-python over
the same model's GGUF, when it is installed: ``pip install -e '.[peers]'``):

- **options**: a 1,000-token prompt, then 51, 250 (EAI's mean admissible actions) and 1,000 options, drawn
  (seed 0, nested) from VirtualHome's action vocabulary; timed with the prompt already cached (warm), so only
  the options' cost is in it.
- **prompt**: 51 options after prompts of 500, 1,000, 2,000 and 4,000 tokens (the SayCan kitchen dialog,
  repeated), timed from an empty cache (cold: the prompt's forward is in it).

The model's FLOPs per token at context position ``c`` are ``2 P + 4 L d c`` (``P`` the decoder's weights, ``L``
layers, ``d`` the attention width: the matmuls and the attention scores and sums), plus ``2 d V`` for each
position whose vocabulary logits are needed (one per option token and the prompt's last). A side whose
seconds grow faster than these FLOPs has an overhead that grows with the work; the table shows each point's
achieved GFLOP/s so that such growth is visible as a falling column.

Sides alternate within each point over ``--repeats`` (median seconds each). The data file is what
``docs/performance.md``'s cost-growth block renders, and the plot is drawn from it:

    python benchmarks/bench_cost_growth.py [--repeats 3] [--out FILE.json] [--plot FILE.png]
    python benchmarks/bench_cost_growth.py --render-only   # plot and docs/performance.md from the data file

Result line keys: ``options_growth`` and ``prompt_growth`` (groundplan's seconds at the largest point over the
smallest, divided by the FLOPs' ratio: 1.0 grows as the FLOPs do), ``llamacpp_*`` the same for llama.cpp,
``gflops_min`` and ``gflops_max`` (groundplan's achieved GFLOP/s over all points).
"""
from __future__ import annotations

import argparse
import json
import logging
import random
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks.*, when run as a script
from benchmarks.flops import attention_flops, linear_flops, model_shape  # noqa: E402
from benchmarks.harness import data_file_args, load_average, report, setup_logging  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "docs" / "results" / "data" / "performance" / "cost_growth.json"
PLOT = ROOT / "docs" / "results" / "figures" / "cost-growth.png"
PAGE = ROOT / "docs" / "performance.md"
OPTION_POINTS = (51, 250, 1000)
PROMPT_POINTS = (500, 1000, 2000, 4000)
FIXED_PROMPT, FIXED_OPTIONS = 1000, 51
MARK = re.compile(r"(?P<open><!-- cost-growth: (?P<path>\S+) -->\n)(?P<body>.*?)(?P<close><!-- /cost-growth -->)", re.S)
log = logging.getLogger("bench_cost_growth")


# ------------------------------------------------------------------ the work
def option_pool(n: int, seed: int = 0) -> list[str]:
    """``n`` VirtualHome actions (the env's whole vocabulary shuffled with ``seed``; nested in ``n``), as
    options (a leading space)."""
    from groundplan.factory import build_env

    env = build_env("virtualhome")
    skills = list(env.reset(env.tasks()[0], seed=0).skills)
    random.Random(seed).shuffle(skills)
    return [" " + s for s in skills[:n]]


def prompt_of(tokenizer: Any, n_tokens: int) -> str:
    """A prompt of about ``n_tokens`` tokens: the SayCan kitchen dialog repeated and cut on a token boundary,
    closed by one more instruction and ``Robot: 1.`` as the planner's prompt ends."""
    from groundplan.planners.prompt_files import load_prompt

    tail = "\nHuman: How would you bring me a coke can?\nRobot: 1."
    base = load_prompt("saycan_kitchen")
    ids: list[int] = []
    while len(ids) < n_tokens:
        ids += tokenizer(base, add_special_tokens=False)["input_ids"]
    body = tokenizer.decode(ids[:n_tokens - len(tokenizer(tail, add_special_tokens=False)["input_ids"])])
    return body + tail


def flops(shape: dict[str, int], context: int, segments: Sequence[int], cold: bool) -> float:
    """The model's own FLOPs to score options of ``segments`` tokens each after a ``context``-token prompt;
    ``cold`` adds the prompt's forward (causal) and its last logit."""
    rows = logits = sum(segments)  # every option token is read
    pairs = sum(n * context + n * (n - 1) / 2 for n in segments)  # at positions context .. context + n - 1, causal
    if cold:
        rows, logits, pairs = rows + context, logits + 1, pairs + context * (context - 1) / 2
    return linear_flops(shape, rows, logits) + attention_flops(shape, pairs)


# ------------------------------------------------------------------ the sides
def groundplan_side(lm: Any) -> Callable[[str, list[str], bool], float]:
    """Seconds for ``lm.score(prompt, options)``; cold empties the prefix cache first, warm scores the prompt
    with one option before the clock starts."""
    def run(prompt: str, options: list[str], cold: bool) -> float:
        lm.cache.clear()
        if not cold:
            lm.score(prompt, options[:1])
        t0 = time.perf_counter()
        lm.score(prompt, options)
        return time.perf_counter() - t0
    return run


def llamacpp_side(lm: Any, n_ctx: int) -> Callable[[str, list[str], bool], float] | None:
    """The same on llama-cpp-python (bench_peers' scorer: logits only where read, the KV cache rolled back
    between options) at groundplan's token boundary; None when llama-cpp-python is missing."""
    import importlib.util

    import torch

    if importlib.util.find_spec("llama_cpp") is None:
        log.warning("llama.cpp curve skipped: llama-cpp-python is not installed; pip install -e '.[peers]'")
        return None

    from benchmarks.bench_peers import LlamaCppScorer, Step, llamacpp_tokens
    from groundplan.llm.loading import embedded_gguf

    scorer = LlamaCppScorer(str(embedded_gguf(lm.name)), torch.get_num_threads(), n_ctx)

    def run(prompt: str, options: list[str], cold: bool) -> float:
        ctx, segs, firsts = llamacpp_tokens(lm, [Step("", 0, prompt, options)])[0]
        scorer.reset()
        if not cold:
            scorer.score(ctx, segs[:1], firsts[:1])
        t0 = time.perf_counter()
        scorer.score(ctx, segs, firsts)
        return time.perf_counter() - t0
    return run


def measure(sides: dict[str, Callable[[str, list[str], bool], float]], lm: Any, shape: dict[str, int],
            curve: str, prompt: str, options: list[str], cold: bool, repeats: int) -> dict[str, Any]:
    """One point: each side's median seconds over ``repeats``, the sides' order flipping each repeat."""
    ctx, plans, _ = lm._split(prompt, options)
    work = flops(shape, len(ctx), [len(p.segment) for p in plans], cold)
    got: dict[str, list[float]] = {k: [] for k in sides}
    for r in range(repeats):
        for name in (list(sides) if r % 2 == 0 else list(sides)[::-1]):
            got[name].append(sides[name](prompt, options, cold))
    point = {"curve": curve, "prompt_tokens": len(ctx), "options": len(options),
             "option_tokens": sum(len(p.segment) for p in plans), "cold": cold, "gflop": round(work / 1e9, 3),
             "seconds": {k: round(statistics.median(v), 4) for k, v in got.items()}}
    log.info("%s: prompt %d tokens, %d options (%s): %s", curve, len(ctx), len(options), "cold" if cold else "warm",
             ", ".join(f"{k} {v:.3f} s" for k, v in point["seconds"].items()))
    return point


# ------------------------------------------------------------------ the figures
def growth(points: list[dict[str, Any]], side: str) -> float:
    """Seconds at the curve's last point over its first, divided by the FLOPs' ratio (1.0: as the FLOPs)."""
    first, last = points[0], points[-1]
    return (last["seconds"][side] / first["seconds"][side]) / (last["gflop"] / first["gflop"])


def render_markdown(data: dict[str, Any]) -> str:
    """The table of both curves: each point's FLOPs, each side's seconds and achieved GFLOP/s, and each curve's
    growth against the FLOPs."""
    sides = data["sides"]
    head = "| curve | prompt tokens | options (tokens) | model GFLOP | " + " | ".join(
        f"{s} s | {s} GFLOP/s" for s in sides) + " |"
    lines = [head, "|" + "---|" * (4 + 2 * len(sides))]
    for p in data["points"]:
        cells = " | ".join(f"{p['seconds'][s]:.3f} | {p['gflop'] / p['seconds'][s]:.1f}" for s in sides)
        lines.append(f"| {p['curve']} ({'cold' if p['cold'] else 'warm'}) | {p['prompt_tokens']} | {p['options']} "
                     f"({p['option_tokens']}) | {p['gflop']:.1f} | {cells} |")
    lines.append("")
    for curve in ("options", "prompt"):
        pts = [p for p in data["points"] if p["curve"] == curve]
        lines.append(f"- **{curve}**: from the first point to the last the FLOPs grow {pts[-1]['gflop'] / pts[0]['gflop']:.1f}×; "
                     + "; ".join(f"{s}'s seconds {pts[-1]['seconds'][s] / pts[0]['seconds'][s]:.1f}× "
                                 f"({growth(pts, s):.2f} of the FLOPs' growth)" for s in sides) + ".")
    lines += ["", f"{data['machine']}; {data['threads']} threads; load average at the start {data['load_start']}.", ""]
    return "\n".join(lines)


def plot(data: dict[str, Any], path: Path) -> Path:
    """Seconds against the model's FLOPs for each curve and side, with the FLOPs' own line through each side's
    first point (a side on that line grows as the FLOPs do)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, curve, x_key, label in ((axes[0], "options", "options", "options (1,000-token prompt cached)"),
                                    (axes[1], "prompt", "prompt_tokens", "prompt tokens (51 options, cold)")):
        pts = [p for p in data["points"] if p["curve"] == curve]
        xs = [p[x_key] for p in pts]
        for side in data["sides"]:
            ys = [p["seconds"][side] for p in pts]
            line, = ax.plot(xs, ys, "o-", label=side)
            ax.plot(xs, [ys[0] * p["gflop"] / pts[0]["gflop"] for p in pts], ":", color=line.get_color(),
                    label=f"{side}: FLOPs' growth")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel("seconds")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"Scoring cost against the work ({data['model']}, {data['threads']} threads)")
    from groundplan.core.figures import save_figure

    return save_figure(fig, path, dpi=110)


def render_page(page: Path = PAGE, write: bool = True) -> str:
    """Rewrite docs/performance.md's cost-growth block from its data file."""
    from groundplan.evaluation.page_blocks import render_blocks

    return render_blocks(page, MARK, lambda p, m: render_markdown(json.loads(p.read_text(encoding="utf-8"))), write=write)


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--dtype", default="float32", help="groundplan's precision (float32: the default on CPU)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-llamacpp", action="store_true")
    data_file_args(ap, DATA, PLOT)
    args = ap.parse_args(argv)
    setup_logging()
    out = Path(args.out)
    if not args.render_only:
        import torch

        from benchmarks.bench_peers import cpu_info
        from groundplan.llm.hf import HFLanguageModel

        lm = HFLanguageModel(args.model, dtype=args.dtype)
        shape = model_shape(lm.model)
        pool = option_pool(max(OPTION_POINTS))
        sides = {"groundplan": groundplan_side(lm)}
        if not args.no_llamacpp:
            cpp = llamacpp_side(lm, n_ctx=max(PROMPT_POINTS) + 512)
            if cpp is not None:
                sides["llama.cpp"] = cpp
        load_start = load_average()[0]
        points = [measure(sides, lm, shape, "options", prompt_of(lm.tokenizer, FIXED_PROMPT), pool[:n], False, args.repeats)
                  for n in OPTION_POINTS]
        points += [measure(sides, lm, shape, "prompt", prompt_of(lm.tokenizer, n), pool[:FIXED_OPTIONS], True, args.repeats)
                   for n in PROMPT_POINTS]
        model_name, flags = cpu_info()
        data = {"model": args.model, "dtype": args.dtype, "threads": torch.get_num_threads(), "repeats": args.repeats,
                "machine": f"{model_name} ({', '.join(f for f in flags if f.startswith(('avx512_bf16', 'amx')))})",
                "load_start": round(load_start, 2), "sides": list(sides), "shape": shape, "points": points}
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    data = json.loads(out.read_text(encoding="utf-8"))
    plot(data, Path(args.plot))
    if PAGE.exists() and MARK.search(PAGE.read_text(encoding="utf-8")):
        render_page()
    fields: dict[str, Any] = {}
    for side in data["sides"]:
        key = "" if side == "groundplan" else "llamacpp_"
        for curve in ("options", "prompt"):
            fields[f"{key}{curve}_growth"] = round(growth([p for p in data["points"] if p["curve"] == curve], side), 2)
    rates = [p["gflop"] / p["seconds"]["groundplan"] for p in data["points"]]
    fields.update(gflops_min=round(min(rates), 1), gflops_max=round(max(rates), 1))
    report(fields)


if __name__ == "__main__":
    main()
