"""Whether a reduced-precision engine decides as float32 does, on the planner's own decisions.

bf16 keeps 8 bits of mantissa; through a 30-layer model a log-prob summed over an option's tokens moves by
tenths of a nat (the table's max |Δ log p|). That matters only where two options are about that close. The check re-decides every float32 decision of a sweep
on the same prompt (teacher-forced: the float32 episode's history, so a decision that changes does not
change the ones after it) and records the float32 top-two gap beside it. SayCan's decision is the argmax of
log p_LLM + log p_affordance (Ahn et al. 2022, Algorithm 1); No-VF's is the argmax of log p_LLM alone.

A precision becomes the default only where every decision whose float32 top-two gap exceeds
:data:`DEFAULT_GAP` (nats) is unchanged; the data file this module renders holds every decision checked.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from groundplan.evaluation.page_blocks import render_blocks

#: a decision whose float32 top-two gap exceeds this (nats) must not change for a precision to be the default
DEFAULT_GAP = 0.1

MARK = re.compile(r"(?P<open><!-- precision: (?P<path>\S+) -->\n)(?P<body>.*?)(?P<close><!-- /precision -->)", re.S)


@dataclass
class DecisionCheck:
    """One float32 decision re-decided at another precision on the same prompt and options."""

    precision: str  # the precision compared with float32
    planner: str
    episode: str
    step: int
    options: int  # options ranked (those with a positive affordance where one is used)
    float32_choice: str
    other_choice: str
    gap: float  # float32's top-two gap of the ranked score (nats)
    max_abs_dlogp: float  # largest |log p_other - log p_float32| over the options


def decide(llm: Sequence[float], affordance: Sequence[float] | None) -> tuple[int, float]:
    """(index of the first maximum, top-two gap) of log p_LLM (+ log p_affordance when given); options with
    affordance 0 cannot win. A single option has an infinite gap."""
    ranked = [v + (math.log(a) if a > 0 else -math.inf) for v, a in zip(llm, affordance)] if affordance is not None \
        else list(llm)
    best = max(range(len(ranked)), key=lambda i: (ranked[i], -i))
    rest = [v for i, v in enumerate(ranked) if i != best]
    return best, (ranked[best] - max(rest)) if rest else math.inf


def check(precision: str, planner: str, episode: str, step: int, options: Sequence[str], llm32: Sequence[float],
          llm_other: Sequence[float], affordance: Sequence[float] | None) -> DecisionCheck:
    """The decision of both precisions on one step's options."""
    b32, gap = decide(llm32, affordance)
    b_other, _ = decide(llm_other, affordance)
    return DecisionCheck(precision, planner, episode, step, len(options), options[b32], options[b_other], gap,
                         max(abs(a - b) for a, b in zip(llm32, llm_other)))


def summarise(checks: Sequence[DecisionCheck], threshold: float = DEFAULT_GAP) -> dict[str, Any]:
    """Per (precision, planner) and per precision over all planners: decisions, how many changed, the
    float32 gap at each change, the largest |delta log p|, and how many decisions with a gap above
    ``threshold`` changed (what :func:`passes` reads)."""
    groups: dict[tuple[str, str], list[DecisionCheck]] = {}
    for c in checks:
        groups.setdefault((c.precision, c.planner), []).append(c)
        groups.setdefault((c.precision, "all"), []).append(c)
    out = {}
    for name, cs in groups.items():
        changed = [c for c in cs if c.float32_choice != c.other_choice]
        above = [c for c in cs if c.gap > threshold]
        out[name] = {
            "decisions": len(cs),
            "episodes": len({c.episode for c in cs}),
            "changed": len(changed),
            "changed_gaps": sorted(round(c.gap, 4) for c in changed),
            "above_threshold": len(above),
            "changed_above_threshold": sum(c.float32_choice != c.other_choice for c in above),
            "max_abs_dlogp": max((c.max_abs_dlogp for c in cs), default=0.0),
        }
    precisions = list(dict.fromkeys(p for p, _ in out))
    return dict(sorted(out.items(), key=lambda kv: (precisions.index(kv[0][0]), kv[0][1] == "all")))


def passes(summary: dict[tuple[str, str], Any], precision: str) -> bool:
    """The default's rule for ``precision``: no decision with a float32 gap above the threshold changed."""
    return summary[(precision, "all")]["changed_above_threshold"] == 0


#: the data file's row layout (one list per decision; the other precision's choice is null where it is float32's)
COLUMNS = ("precision", "planner", "episode", "step", "options", "float32_choice", "other_choice", "gap", "max_abs_dlogp")


def to_json(checks: Sequence[DecisionCheck]) -> dict[str, Any]:
    """The checks as compact rows for the data file (floats rounded to what a table shows and a test compares)."""
    rows = [[c.precision, c.planner, c.episode, c.step, c.options, c.float32_choice,
             None if c.other_choice == c.float32_choice else c.other_choice,
             round(c.gap, 5) if math.isfinite(c.gap) else None, round(c.max_abs_dlogp, 5)] for c in checks]
    return {"columns": list(COLUMNS), "rows": rows}


def from_json(table: dict[str, Any]) -> list[DecisionCheck]:
    if tuple(table["columns"]) != COLUMNS:
        raise ValueError(f"decision rows of columns {table['columns']}, expected {list(COLUMNS)}")
    out = []
    for r in table["rows"]:
        c = dict(zip(COLUMNS, r))
        c["other_choice"] = c["float32_choice"] if c["other_choice"] is None else c["other_choice"]
        c["gap"] = math.inf if c["gap"] is None else c["gap"]
        out.append(DecisionCheck(**c))
    return out


def render_markdown(data: dict[str, Any]) -> str:
    """The agreement and speed tables of one data file (:func:`summarise` is recomputed from its rows)."""
    threshold = data.get("threshold", DEFAULT_GAP)
    summary = summarise(from_json(data["decisions"]), threshold)
    lines = ["| precision | planner | decisions (episodes) | changed | float32 top-two gap at each change (nats) "
             f"| changed with gap > {threshold} | max \\|Δ log p\\| | rule for the default |",
             "|---|---|---|---|---|---|---|---|"]
    for (precision, planner), s in summary.items():
        gaps = s["changed_gaps"]
        shown = ", ".join(f"{g:.2f}" for g in gaps[:12]) + (f", ... ({len(gaps) - 12} more)" if len(gaps) > 12 else "")
        rule = ("met" if passes(summary, precision) else "not met") if planner == "all" else ""
        lines.append(f"| {precision} | {planner} | {s['decisions']} ({s['episodes']}) | {s['changed']} | {shown or '–'} "
                     f"| {s['changed_above_threshold']} of {s['above_threshold']} | {s['max_abs_dlogp']:.3f} | {rule} |")
    speed = data.get("speed")
    if speed:
        lines += ["", "| engine | episodes | decisions | episodes' wall clocks (s) | episodes/s | decisions/s |", "|---|---|---|---|---|---|"]
        for key, s in speed.items():
            lines.append(f"| {key} | {s['episodes']} | {s['decisions']} | {s['wall_s']:.1f} | {s['episodes'] / s['wall_s']:.3f} "
                         f"| {s['decisions'] / s['wall_s']:.2f} |")
        fast = [k for k in speed if k != "float32"]
        lines += ["", "; ".join(f"{k} runs the sweep {speed['float32']['wall_s'] / speed[k]['wall_s']:.2f}× as fast as float32"
                                for k in fast) + f" ({data.get('kernel', '')}).", ""]
    return "\n".join(lines)


def block(data: Path, m: re.Match) -> str:
    """A ``<!-- precision: FILE -->`` block's tables, from its data file."""
    import json

    return render_markdown(json.loads(data.read_text(encoding="utf-8")))


def render_page(page: str | Path, write: bool = True) -> str:
    """Rewrite every ``<!-- precision: FILE -->`` block of ``page`` from its data file."""
    return render_blocks(page, MARK, block, write=write)
