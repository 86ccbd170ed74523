"""Zero-Shot Planners' translation cost on VirtualHome: the time of one step's translation (embedding
the k samples with the translation LM, then scoring them against the whole admissible action set;
target < 5 ms for the scoring), both parts reported, and the cold vs cached time to build the
action-set embeddings (all-MiniLM-L6-v2, the embedded sentence encoder).

    python benchmarks/bench_translation.py [--k 10] [--repeats 50] [--no-cold]

Actions are embedded when an observation first allows them: the cold scene time embeds the admissible
actions of one task's scene into a fresh temporary cache folder (what a planner's first step in a new
scene pays); the cold build then embeds every remaining label; the cached build loads the .npy file
that it wrote (a new process would do the same). Last line:
``result: step_ms=<x> embed_ms=<x> translate_ms=<x> scene_cold_s=<s> cold_s=<s> cached_s=<s>`` (step =
embed + translate, each a median over the repeats).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks.harness, when run as a script
from benchmarks.harness import report  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, default=10, help="samples per step")
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--no-cold", action="store_true", help="skip the cold build (uses the normal cache)")
    args = parser.parse_args()

    from groundplan.envs.virtualhome.env import VirtualHomeEnv
    from groundplan.grounding.action_index import (
        ActionIndex,
        clear_memory_cache,
        unit_rows,
    )
    from groundplan.grounding.zeroshot import translation_scores
    from groundplan.llm.embeddings import SentenceEmbedder

    class Embedder:  # the translation LM alone: no need to load the planning LM for this benchmark
        def __init__(self) -> None:
            self._embedder = SentenceEmbedder()
            self.name = self._embedder.model_name

        def embed(self, texts):
            return self._embedder.embed(texts)

    env = VirtualHomeEnv()
    skills = env.skills
    lm = Embedder()
    lm.embed(["warm up"])
    n = len(skills) - 1
    scene = env.reset(env.tasks()[0], 0).admissible
    scene_cold_s = cold_s = float("nan")
    if not args.no_cold:
        os.environ["GROUNDPLAN_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench_translation_")
    clear_memory_cache()
    t0 = time.perf_counter()
    index = ActionIndex(lm, skills, env.done_skill)
    index.ensure(scene)
    scene_s = time.perf_counter() - t0
    index.ensure(None)
    build_s = time.perf_counter() - t0
    if not args.no_cold:
        scene_cold_s, cold_s = scene_s, build_s
    clear_memory_cache()
    t0 = time.perf_counter()
    index = ActionIndex(lm, skills, env.done_skill)
    index.ensure(None)
    cached_s = time.perf_counter() - t0
    print(f"actions: {n}, embedding width {index.matrix.shape[1]}; cold: one scene's {int(scene.sum()) - 1} actions "
          f"{scene_cold_s:.1f} s, all {cold_s:.1f} s; cached load {cached_s:.3f} s")

    samples = ["Walk to the kitchen", "switch on the light", "grab a cup of water", "Sit on the sofa",
               "turn on the computer", "find the remote", "open the fridge", "Put the cup on the table",
               "look at the television", "wash your hands"][: args.k]
    lps = np.linspace(-0.5, -2.0, len(samples)).astype(np.float32)

    def step() -> tuple[float, float]:
        """One planner step's translation as ZeroShotPlanner.next_step does it: embed the k samples,
        then score them against every admissible action and take the best; (embed s, translate s)."""
        t0 = time.perf_counter()
        vecs = unit_rows(np.asarray(lm.embed(samples), dtype=np.float32))
        t1 = time.perf_counter()
        best, _, _ = translation_scores(index, vecs, lps, 0.3, "walk to bedroom", 0.5)
        int(np.argmax(best))
        return t1 - t0, time.perf_counter() - t1

    step()  # warm-up
    parts = [step() for _ in range(args.repeats)]
    embed = np.array([p[0] for p in parts]) * 1000
    translate = np.array([p[1] for p in parts]) * 1000
    total = embed + translate
    step_ms, embed_ms, translate_ms = (float(np.median(x)) for x in (total, embed, translate))
    print(f"one step, k={len(samples)} samples against {n} actions (median of {args.repeats}): "
          f"{step_ms:.2f} ms = embedding the samples {embed_ms:.2f} ms + translation {translate_ms:.2f} ms "
          f"(p90 step {float(np.percentile(total, 90)):.2f} ms)")
    report({"step_ms": f"{step_ms:.2f}", "embed_ms": f"{embed_ms:.2f}", "translate_ms": f"{translate_ms:.2f}",
            "scene_cold_s": f"{scene_cold_s:.1f}", "cold_s": f"{cold_s:.1f}", "cached_s": f"{cached_s:.3f}"})


if __name__ == "__main__":
    main()
