"""Plots people would rather look at than read: SayCan's per-step score bars (paper Fig. 7)."""
from __future__ import annotations

import math
from pathlib import Path

from groundplan.core.figures import save_figure
from groundplan.rollout.traces import EpisodeTrace


def _p(logv: float | None) -> float:
    return 0.0 if logv is None or logv == float("-inf") else math.exp(logv)


def plot_step_scores(trace: EpisodeTrace, path: str | Path, top: int = 5) -> Path:
    """One panel per step: the top options by combined score with their LLM probability, affordance
    and combined probability side by side, as in SayCan's Fig. 7."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [s for s in trace.steps if s.candidates]
    n = max(1, len(steps))
    fig, axes = plt.subplots(n, 1, figsize=(9, 2.4 * n), squeeze=False)
    for ax, step in zip(axes[:, 0], steps):
        cands = sorted(step.candidates, key=lambda c: c.combined, reverse=True)[:top]
        labels = [c.skill for c in cands][::-1]
        llm = [_p(c.llm) for c in cands][::-1]
        aff = [c.affordance if c.affordance is not None else float("nan") for c in cands][::-1]
        comb = [_p(c.combined) for c in cands][::-1]
        y = range(len(cands))
        h = 0.27
        ax.barh([i + h for i in y], llm, h, label="LLM", color="#4c72b0")
        ax.barh(list(y), aff, h, label="affordance", color="#dd8452")
        ax.barh([i - h for i in y], comb, h, label="combined", color="#55a868")
        ax.set_yticks(list(y), labels, fontsize=8)
        ax.set_xlim(0, 1)
        ax.set_title(f"step {step.index + 1}: chose '{step.chosen}'", fontsize=9, loc="left")
    axes[0, 0].legend(loc="lower right", fontsize=7)
    fig.suptitle(trace.instruction, fontsize=10)
    return save_figure(fig, path, dpi=110, rect=(0, 0, 1, 0.97))
