"""GPU benchmark of groundplan's scoring engine on randomly initialised models of real architectures.

No weights can be fetched, so the models are built from ``transformers.LlamaConfig`` with the real sizes
of Llama-3.2-1B and Llama-3.1-8B (bf16, default initialisation, seeded). Speed depends on the shapes,
not on the weights' values, so the throughputs are those of the real models; the scores themselves mean
nothing, but packed and naive scoring must still agree on them. Everything measured is groundplan's own
code (``groundplan.llm.hf.HFLanguageModel``): ``score`` (shared-prefix packed), ``score_reference``
(naive: one full forward per ``prompt + option``), ``score_batch`` with ``layout="padded"`` / ``"loop"``,
and the Ray Serve scorer through ``benchmarks/bench_serve.py``; the baselines run in the same process.

Tokens come from the embedded SmolLM2 tokenizer (49,152 ids), since Llama 3's is not installed. Every
one of its ids is a valid Llama 3 id (vocabulary 128,256), so the models keep their real vocabulary:
the embedding table, the LM head and the log-softmax over 128,256 entries cost what they cost in the
real model. Ids above 49,151 are never fed; none is needed, since nothing is generated. (The CPU dry
run's tiny model takes the tokenizer's own vocabulary instead, to stay small.)

Measured, per architecture, on the SayCan kitchen (Appendix C.2 prompt + an instruction + one step,
the 51 skills as options):

- packed vs naive scoring: options/s, their ratio, and the fraction of the GPU's bf16 dense peak
  (``mfu``: FLOPs estimated as 2 x parameters x tokens run through the model, peak from a table of
  known cards; ``na`` for an unknown card);
- the warm SayCan step (the previous step's prompt cached, as in an episode; one forward runs the context's
  new tail and the options): wall ms, its tokens, its MFU, and the device time of its kernels from
  ``torch.profiler`` (``warm_busy_ms``, CUDA only: the step's time if launches cost nothing);
- padded multi-request batching vs the per-request loop (``score_batch``) at b = 1, 8, 32 different
  kitchen requests, all prefixes cached first (as in a running sweep);
- agreement of packed and naive scores in the model's dtype: max abs difference of the summed log-probs
  (against the dtype's tolerance, ``TOLERANCE``) and whether the argmax option (the decision) is the
  same; a decision that differs where the naive top two are within the tolerance is a ``tie``, not a
  failure (random weights make near-ties likelier than a trained model does);
- once, for ``--serve-arch``: ``bench_serve.main`` with this model in the Serve scorer replica
  (``batched_ratio``: concurrent / one-at-a-time requests per second through HTTP and the scorer host's batcher).

Without CUDA it says so and runs the CPU dry path: a tiny Llama in float32, a few options, b = 1, 2, 4,
no Serve unless ``--serve``; it checks that every code path runs and that the scores agree.

    python benchmarks/bench_gpu.py                       # CUDA if present, else the CPU dry path
    python benchmarks/bench_gpu.py --archs llama-3.2-1b --no-serve --repeats 3

Last line: ``result: gpu=<card|none> archs=<a,b> packed_options_s=<x,y> naive_options_s=... speedup=...
mfu=... naive_mfu=... warm_step_ms=... warm_mfu=... warm_busy_ms=... padded_ratio_b<k>=... batched_ratio=<x|na> max_abs_diff=...
decisions_identical=<yes|tie|no,...> top2_gap=...`` (per-architecture values in the order of ``archs``).
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import importlib.util
import io
import logging
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks.harness, when run as a script
from benchmarks.harness import report, setup_logging  # noqa: E402
from benchmarks.harness import timed as harness_timed  # noqa: E402

log = logging.getLogger("bench_gpu")

#: real sizes (Hugging Face config.json of meta-llama/Llama-3.2-1B and meta-llama/Llama-3.1-8B)
ARCHS: dict[str, dict[str, Any]] = {
    "llama-3.2-1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                         num_key_value_heads=8, head_dim=64, vocab_size=128256, max_position_embeddings=131072,
                         rms_norm_eps=1e-5, tie_word_embeddings=True,
                         rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
                                          "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                          "original_max_position_embeddings": 8192}),
    "llama-3.1-8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                         num_key_value_heads=8, head_dim=128, vocab_size=128256, max_position_embeddings=131072,
                         rms_norm_eps=1e-5, tie_word_embeddings=False,
                         rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                          "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                          "original_max_position_embeddings": 8192}),
    # the CPU dry run: Llama's layout at toy width; vocab_size None = the tokenizer's. At width 64 the real
    # initialisation (std 0.02) leaves logits and attention nearly flat, so every path would agree
    # trivially; std 0.125 gives unit-scale projections, as 0.02 does at the real widths.
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=16, vocab_size=None, max_position_embeddings=4096,
                 rms_norm_eps=1e-5, tie_word_embeddings=True, initializer_range=0.125,
                 rope_parameters={"rope_type": "default", "rope_theta": 500000.0}),
}

#: dense bf16 tensor-core peaks in TFLOP/s (vendor data sheets, no sparsity), matched on the CUDA device
#: name in this order; anything else is "unknown" and gets no MFU
PEAK_BF16_TFLOPS: list[tuple[str, str, float]] = [
    (r"H100.*(PCIe|PCI-E)", "H100-PCIe", 756.0),
    (r"H100.*NVL", "H100-NVL", 835.0),
    (r"H100", "H100-SXM", 989.4),
    (r"H200", "H200", 989.4),
    (r"A100", "A100", 312.0),
    (r"\bL4\b", "L4", 121.0),
]

TOKENIZER = "smollm2-135m-instruct"
#: a tokenizer folder to use instead (a GPU machine without the embedded model's package carries only its
#: tokenizer files); ``--tokenizer`` sets it
TOKENIZER_ENV = "GROUNDPLAN_BENCH_TOKENIZER"


def gpu_peak(device_name: str) -> tuple[str, float | None]:
    """(short card label, dense bf16 peak FLOP/s or None) for a CUDA device name."""
    for pattern, label, tflops in PEAK_BF16_TFLOPS:
        if re.search(pattern, device_name, flags=re.IGNORECASE):
            return label, tflops * 1e12
    return re.sub(r"[^A-Za-z0-9.-]+", "-", device_name.removeprefix("NVIDIA ")).strip("-") or "unknown", None


def load_tokenizer() -> Any:
    """The embedded SmolLM2 tokenizer (fast, from the converted model folder: no Hub access), or the
    folder named by ``$GROUNDPLAN_BENCH_TOKENIZER``."""
    from transformers import AutoTokenizer

    from groundplan.llm.loading import resolve_model_path

    return AutoTokenizer.from_pretrained(os.environ.get(TOKENIZER_ENV) or resolve_model_path(TOKENIZER))


def build_model(arch: str, dtype: torch.dtype, device: str, vocab_size: int, seed: int = 0) -> Any:
    """A randomly initialised ``LlamaForCausalLM`` of ``arch``'s sizes, built directly on ``device``."""
    from transformers import LlamaConfig, LlamaForCausalLM

    sizes = dict(ARCHS[arch])
    sizes["vocab_size"] = sizes["vocab_size"] or vocab_size
    if sizes["vocab_size"] < vocab_size:
        raise ValueError(f"{arch}: vocabulary {sizes['vocab_size']} is smaller than the tokenizer's {vocab_size}")
    config = LlamaConfig(**sizes, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    torch.manual_seed(seed)
    with torch.device(device):
        model = LlamaForCausalLM._from_config(config, dtype=dtype, attn_implementation="sdpa")
    return model.eval()


def make_engine(arch: str, dtype: torch.dtype, device: str, seed: int = 0, **engine_kwargs: Any) -> Any:
    """An :class:`~groundplan.llm.hf.HFLanguageModel` over a fresh random ``arch`` model: the model is
    registered under ``random-<arch>`` and loaded by that name, so the engine is the one a config builds."""
    from groundplan.llm.hf import HFLanguageModel
    from groundplan.llm.loading import register_model

    tokenizer = load_tokenizer()
    name = f"random-{arch}"
    register_model(name, build_model(arch, dtype, device, len(tokenizer), seed), tokenizer)
    return HFLanguageModel(name, dtype=str(dtype).removeprefix("torch."), device_map=None, **engine_kwargs)


def release_engine(lm: Any) -> None:
    """Unregister an engine's model and drop its cached key/values; the model's memory goes once the
    caller drops the engine (then :func:`free_memory`)."""
    from groundplan.llm.loading import unregister_model

    unregister_model(lm.name)
    lm.cache.clear()


def free_memory() -> None:
    """Return freed GPU memory before the next, larger model is built (or Serve's replica builds its own)."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def serve_engine(arch: str, dtype_name: str, device: str, seed: int = 0) -> Any:
    """The Serve scorer replica's model (``bench_serve.main``'s ``lm_factory``): the same random model,
    built inside the replica's process on the device the driver measured on."""
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("the Serve scorer replica sees no CUDA device (CUDA_VISIBLE_DEVICES in its process?)")
    return make_engine(arch, getattr(torch, dtype_name), device, seed, max_batch_rows=64, prefix_cache_mb=8192)


def kitchen_requests(n: int, options: int) -> list[tuple[str, list[str]]]:
    """``n`` kitchen steps of different episodes, built as bench_serve builds its requests: each with its
    own instruction's prompt and ``options`` of the 51 skills."""
    import bench_serve

    skills, instructions = bench_serve.kitchen_step()
    return [(r["prompt"], r["options"]) for r in bench_serve.make_requests(n, options, skills, instructions)]


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed(fn: Any, repeats: int) -> tuple[float, Any]:
    """Median seconds of ``repeats`` runs after one untimed warm-up run, and the warm-up's result."""
    out = fn()
    _sync()
    return harness_timed(fn, repeats, sync=_sync), out


#: how far packed and naive summed log-probs may differ per dtype: float32 to reduction order (about 1e-5
#: is typical); bf16 keeps 8 significant bits, so a token's log-prob near -12 moves by a few hundredths
#: and an option's sum, after many layers of rounding, by a few tenths
TOLERANCE = {"float32": 1e-3, "float16": 0.25, "bfloat16": 1.0}


def device_busy_ms(fn: Any, before: Any, repeats: int = 3) -> float | None:
    """Median device time (ms) of the CUDA kernels one ``fn()`` call runs, from ``torch.profiler``, with
    ``before()`` run outside the profile each time: the step's time if launching cost nothing (what CUDA
    graphs could at best reach). ``None`` where the profiler reports no device events."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    busy = []
    for _ in range(repeats):
        before()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            fn()
            _sync()
        us = sum(getattr(e, "self_device_time_total", 0) for e in prof.key_averages()
                 if getattr(e, "device_type", None) == DeviceType.CUDA)
        busy.append(us / 1e3)
    busy.sort()
    return busy[len(busy) // 2] if busy[-1] > 0 else None


def agreement(packed: Sequence[Any], naive: Sequence[Any], tol: float) -> dict[str, Any]:
    """How far packed scores are from the naive ones (``OptionScore`` lists of the same options).

    ``decisions``: ``yes`` when both pick the same argmax option; ``tie`` when they differ but the naive
    scores' top two are within ``tol`` (the dtype's rounding may order them either way); ``no``
    otherwise. ``within_tol``: the largest difference is at most ``tol``."""
    a = [s.logprob_sum for s in packed]
    b = [s.logprob_sum for s in naive]
    diff = max(abs(x - y) for x, y in zip(a, b))
    pick_a, pick_b = max(range(len(a)), key=a.__getitem__), max(range(len(b)), key=b.__getitem__)
    top = sorted(b, reverse=True)
    gap = top[0] - top[1] if len(top) > 1 else float("inf")
    decisions = "yes" if pick_a == pick_b else ("tie" if gap <= tol else "no")
    return {"max_abs_diff": diff, "decisions": decisions, "top2_gap": gap, "within_tol": diff <= tol}


@dataclass
class ArchResult:
    arch: str
    params: int
    dtype: str
    prompt_tokens: int
    options: int
    packed_options_s: float = 0.0
    naive_options_s: float = 0.0
    mfu: float | None = None
    naive_mfu: float | None = None
    warm_step_ms: float = 0.0
    warm_tokens: float = 0.0  # tokens one warm step runs through the model (the context tail + the options)
    warm_mfu: float | None = None
    warm_busy_ms: float | None = None  # device time of the warm step's kernels (torch.profiler), CUDA only
    ms_per_request: dict[tuple[str, int], float] = field(default_factory=dict)
    agreement: dict[str, Any] = field(default_factory=dict)
    padded_agreement: float = 0.0

    @property
    def speedup(self) -> float:
        return self.packed_options_s / self.naive_options_s

    def padded_ratio(self, b: int) -> float:
        return self.ms_per_request["loop", b] / self.ms_per_request["padded", b]


def bench_arch(arch: str, dtype: torch.dtype, device: str, args: argparse.Namespace, peak: float | None) -> ArchResult:
    """Packed vs naive, warm step, padded vs loop, and agreement, for one architecture."""
    t0 = time.perf_counter()
    lm = make_engine(arch, dtype, device, args.seed, max_batch_rows=max(args.batches), prefix_cache_mb=args.prefix_cache_mb)
    if args.no_splice:  # the baseline: every option encoded with the whole prompt, as before the line splice
        lm._line_splice = False
    log.info("%s: built %.1fM parameters (%s, %s), tokenizer included, in %.1f s", arch, lm.num_parameters / 1e6,
             dtype, lm.device, time.perf_counter() - t0)
    requests = kitchen_requests(max(args.batches), args.options)
    prompt, options = requests[0]
    prompt = prompt + " find a coke can, 2."  # one executed step, as bench_scoring's SayCan step
    res = ArchResult(arch, lm.num_parameters, str(dtype).removeprefix("torch."), len(lm.tokenizer(prompt).input_ids),
                     len(options))

    def cold() -> list:
        lm.cache.clear()
        return lm.score(prompt, options)

    cold()  # first call: allocator and kernel warm-up, untimed and uncounted
    tok0 = lm.stats.forward_tokens
    t_packed, packed_cold = timed(cold, args.repeats)
    packed_tokens = (lm.stats.forward_tokens - tok0) / (args.repeats + 1)
    res.packed_options_s = len(options) / t_packed
    packed = lm.score(prompt, options)  # prompt cached: the options' pack only

    naive_tokens = sum(len(lm.tokenizer(prompt + o).input_ids) for o in options)
    t_naive, naive = timed(lambda: lm.score_reference(prompt, options), args.repeats)
    res.naive_options_s = len(options) / t_naive
    if peak:
        res.mfu = 2 * res.params * packed_tokens / t_packed / peak
        res.naive_mfu = 2 * res.params * naive_tokens / t_naive / peak
    res.agreement = agreement(packed_cold, naive, TOLERANCE[res.dtype])
    res.agreement["warm_vs_cold"] = max(abs(x.logprob_sum - y.logprob_sum) for x, y in zip(packed, packed_cold))

    step1 = requests[0][0]

    def after_previous_step() -> None:
        lm.cache.clear()
        lm.score(step1, options)  # the previous step's prompt is cached, as in an episode
        _sync()

    warm = []
    for _ in range(args.repeats + 1):
        after_previous_step()
        tok0 = lm.stats.forward_tokens
        t = time.perf_counter()
        lm.score(prompt, options)
        _sync()
        warm.append(time.perf_counter() - t)
        res.warm_tokens = lm.stats.forward_tokens - tok0
    res.warm_step_ms = 1e3 * sorted(warm[1:])[len(warm[1:]) // 2]
    if peak:
        res.warm_mfu = 2 * res.params * res.warm_tokens / (res.warm_step_ms / 1e3) / peak
    if device == "cuda":
        res.warm_busy_ms = device_busy_ms(lambda: lm.score(prompt, options), after_previous_step)

    for p, o in requests:
        lm.score(p, o)  # every request's prompt cached before timing, as in a running sweep
    for b in args.batches:
        reqs = requests[:b]
        res.ms_per_request["loop", b] = 1e3 * timed(lambda: lm.score_batch(reqs, layout="loop"), args.repeats)[0] / b
        res.ms_per_request["padded", b] = (1e3 * timed(lambda: lm.score_batch(reqs, layout="padded"), args.repeats)[0] / b
                                           if b > 1 else res.ms_per_request["loop", b])
        log.info("%s b=%d: per request: loop %.2f ms, padded %.2f ms", arch, b, res.ms_per_request["loop", b],
                 res.ms_per_request["padded", b])
    big = requests[: max(args.batches)]
    loop_scores = lm.score_batch(big, layout="loop")
    padded_scores = lm.score_batch(big, layout="padded")
    res.padded_agreement = max(abs(x.logprob_sum - y.logprob_sum) for r1, r2 in zip(loop_scores, padded_scores)
                               for x, y in zip(r1, r2))
    release_engine(lm)
    return res


def bench_serve_ratio(arch: str, dtype: torch.dtype, device: str, args: argparse.Namespace) -> float:
    """``bench_serve.main`` with the random ``arch`` model in the scorer replica; its batched_ratio."""
    import bench_serve
    from ray import cloudpickle

    factory = functools.partial(serve_engine, arch, str(dtype).removeprefix("torch."), device, args.seed)
    if serve_engine.__module__ != "__main__":  # imported by name (tests): the replica need not find this file
        cloudpickle.register_pickle_by_value(sys.modules[serve_engine.__module__])
    argv = ["--requests", str(args.serve_requests), "--concurrency", str(args.serve_concurrency), "--rounds",
            str(args.serve_rounds), "--options", str(args.options), "--batch", str(args.serve_concurrency)]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        bench_serve.main(argv, lm_factory=factory)
    line = out.getvalue().strip().splitlines()[-1]
    print(f"bench_serve ({arch}): {line}")
    fields = dict(kv.split("=", 1) for kv in line.removeprefix("result: ").split())
    return float(fields["batched_ratio"])


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _fmt(x: float | None, spec: str = ".3g") -> str:
    return "na" if x is None else format(x, spec)


def main(argv: Sequence[str] | None = None) -> dict[str, str]:
    """Run the benchmark; returns the result line's fields (also printed as the last line)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto",
                    help="auto: CUDA when present, else the CPU dry path")
    ap.add_argument("--archs", nargs="+", choices=list(ARCHS), help="default: the 1B and 8B (CUDA), tiny (CPU)")
    ap.add_argument("--dtype", default=None, help="default: bfloat16 (CUDA), float32 (CPU)")
    ap.add_argument("--options", type=int, default=None, help="options per request (default: 51 on CUDA, 6 on CPU)")
    ap.add_argument("--batches", type=int, nargs="+", default=None, help="requests per score_batch (default 1 8 32; CPU 1 2 4)")
    ap.add_argument("--repeats", type=int, default=None, help="timed runs per figure, median (default 5; CPU 1)")
    ap.add_argument("--prefix-cache-mb", type=int, default=16384)
    ap.add_argument("--serve", dest="serve", action="store_true", default=None, help="run the Serve load (default on CUDA)")
    ap.add_argument("--no-serve", dest="serve", action="store_false")
    ap.add_argument("--serve-arch", default=None, help="architecture served (default: the first of --archs)")
    ap.add_argument("--serve-requests", type=int, default=None, help="requests per window (default 64; CPU 4)")
    ap.add_argument("--serve-concurrency", type=int, default=None, help="concurrent callers = the scorer batch size (default 16; CPU 2)")
    ap.add_argument("--serve-rounds", type=int, default=None, help="(serial, concurrent) window pairs (default 3; CPU 1)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-splice", action="store_true",
                    help="encode every option with the whole prompt (the engine's line splice off): the baseline "
                         "for the CPU cost of tokenisation in a step")
    ap.add_argument("--tokenizer", default=None,
                    help=f"tokenizer folder (default: ${TOKENIZER_ENV}, else the embedded {TOKENIZER})")
    args = ap.parse_args(argv)
    if args.tokenizer:
        if not Path(args.tokenizer, "tokenizer.json").is_file():
            ap.error(f"--tokenizer {args.tokenizer}: no tokenizer.json there")
        os.environ[TOKENIZER_ENV] = args.tokenizer
    setup_logging()

    cuda = torch.cuda.is_available()
    if args.device == "cuda" and not cuda:
        ap.error(f"--device cuda: no CUDA device (torch {torch.__version__}, CUDA build: {torch.version.cuda or 'none'})")
    device = "cuda" if (cuda and args.device != "cpu") else "cpu"
    gpu = device == "cuda"
    if gpu:
        name = torch.cuda.get_device_name(0)
        label, peak = gpu_peak(name)
        print(f"CUDA device: {name} ({label}; bf16 dense peak {_fmt(peak and peak / 1e12, '.0f')} TFLOP/s"
              f"{'' if peak else ': not in the table, no MFU'})")
    else:
        label, peak = "none", None
        why = "not selected (--device cpu)" if cuda else f"not available (torch {torch.__version__}, CUDA build: {torch.version.cuda or 'none'})"
        print(f"CUDA: {why}. Running the CPU dry path: a tiny Llama, a few options; it checks that every code "
              "path runs and that packed and naive scores agree. No GPU figures.")
    archs = args.archs or (["llama-3.2-1b", "llama-3.1-8b"] if gpu else ["tiny"])
    dtype = getattr(torch, args.dtype or ("bfloat16" if gpu else "float32"))
    args.options = args.options or (51 if gpu else 6)
    args.batches = sorted(set(args.batches or ([1, 8, 32] if gpu else [1, 2, 4])))
    args.repeats = args.repeats or (5 if gpu else 1)
    ray_missing = not _importable("ray")
    if args.serve and ray_missing:
        ap.error("--serve needs Ray (pip install 'ray[serve]'), which is not installed here")
    if args.serve is None and gpu and ray_missing:
        print("Ray is not installed here: the Serve load is skipped (batched_ratio=na)")
    args.serve = (gpu and not ray_missing) if args.serve is None else args.serve
    args.serve_requests = args.serve_requests or (64 if gpu else 4)
    args.serve_concurrency = args.serve_concurrency or (16 if gpu else 2)
    args.serve_rounds = args.serve_rounds or (3 if gpu else 1)
    print(f"archs={','.join(archs)} dtype={str(dtype).removeprefix('torch.')} options={args.options} "
          f"batches={args.batches} repeats={args.repeats} torch_threads={torch.get_num_threads()}")

    results = []
    for arch in archs:
        results.append(bench_arch(arch, dtype, device, args, peak))
        free_memory()
    for r in results:
        ag = r.agreement
        print(f"{r.arch}: {r.params / 1e6:.1f}M params, {r.dtype}, prompt {r.prompt_tokens} tokens, {r.options} options")
        print(f"  packed {r.packed_options_s:.1f} options/s (cold, prompt included), naive {r.naive_options_s:.1f} "
              f"options/s: {r.speedup:.1f}x; MFU packed {_fmt(r.mfu)}, naive {_fmt(r.naive_mfu)}; "
              f"warm step {r.warm_step_ms:.1f} ms ({r.warm_tokens:.0f} tokens, MFU {_fmt(r.warm_mfu)}; "
              f"kernels busy {_fmt(r.warm_busy_ms)} ms)")
        print("  per request, loop vs padded: " + ", ".join(
            f"b={b}: {r.ms_per_request['loop', b]:.1f} / {r.ms_per_request['padded', b]:.1f} ms ({r.padded_ratio(b):.2f}x)"
            for b in args.batches))
        print(f"  packed vs naive: max |diff| {ag['max_abs_diff']:.3g} (sum log-prob; {r.dtype} tolerance "
              f"{TOLERANCE[r.dtype]:g}), decisions {ag['decisions']} "
              f"(top-2 gap {ag['top2_gap']:.3g}); warm vs cold {ag['warm_vs_cold']:.3g}; padded vs loop {r.padded_agreement:.3g}")
    ratio = None
    if args.serve:
        serve_arch = args.serve_arch or archs[0]
        ratio = bench_serve_ratio(serve_arch, dtype, device, args)
        print(f"Serve ({serve_arch}, {args.serve_concurrency} concurrent callers): batched_ratio {ratio:.2f}x")

    def per(fn: Any) -> str:
        return ",".join(fn(r) for r in results)

    fields = {"gpu": label, "archs": per(lambda r: r.arch), "dtype": str(dtype).removeprefix("torch."),
              "packed_options_s": per(lambda r: f"{r.packed_options_s:.4g}"),
              "naive_options_s": per(lambda r: f"{r.naive_options_s:.4g}"),
              "speedup": per(lambda r: f"{r.speedup:.3g}"), "mfu": per(lambda r: _fmt(r.mfu)),
              "naive_mfu": per(lambda r: _fmt(r.naive_mfu)), "warm_step_ms": per(lambda r: f"{r.warm_step_ms:.4g}"),
              "warm_mfu": per(lambda r: _fmt(r.warm_mfu)), "warm_busy_ms": per(lambda r: _fmt(r.warm_busy_ms))}
    for b in args.batches[1:]:
        fields[f"padded_ratio_b{b}"] = per(lambda r: f"{r.padded_ratio(b):.3g}")
    fields["batched_ratio"] = _fmt(ratio)
    fields["max_abs_diff"] = per(lambda r: f"{r.agreement['max_abs_diff']:.3g}")
    fields["padded_max_abs_diff"] = per(lambda r: f"{r.padded_agreement:.3g}")
    fields["decisions_identical"] = per(lambda r: r.agreement["decisions"])
    fields["top2_gap"] = per(lambda r: f"{r.agreement['top2_gap']:.3g}")
    fields["splice"] = "off" if args.no_splice else "on"
    report(fields)
    return fields


if __name__ == "__main__":
    main()
