"""Episode reports: RGB frames saved beside the traces, and an HTML page per episode.

Layout under a run folder (``outputs/<name>/``)::

    traces.jsonl                      # written by the eval pipeline
    frames/<episode-id-safe>/<n>.png  # n = 0 after reset, k+1 after step k
    report/index.html                 # one row per episode
    report/<episode-id-safe>.html     # frames, prompt, each step's action, feedback, candidate scores

Frames are recorded by the rollout (:mod:`groundplan.rollout.frames`) for envs that declare cameras and
written by the sweep driver; this module only renders.
"""
from __future__ import annotations

import html
from pathlib import Path
from typing import Any, Sequence

from groundplan.rollout.frames import safe_id
from groundplan.rollout.traces import EpisodeTrace, StepTrace, read_traces

# ------------------------------------------------------------------------------------ HTML
_CSS = """body{font-family:sans-serif;margin:20px;max-width:1200px}pre{background:#f4f4f4;padding:8px;white-space:pre-wrap;
max-height:400px;overflow:auto}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 6px;font-size:13px;
vertical-align:top}.ok{color:#080}.bad{color:#b00}img{image-rendering:pixelated;border:1px solid #999;margin:2px}"""


def _e(x: Any) -> str:
    return html.escape(str(x))


def _candidates(step: StepTrace, top: int = 5) -> str:
    if not step.candidates:
        return ""
    best = sorted(step.candidates, key=lambda c: c.combined, reverse=True)[:top]
    rows = "".join(
        f"<tr><td>{_e(c.skill)}</td><td>{'pruned' if c.llm is None else f'{c.llm:.3f}'}</td><td>{'' if c.affordance is None else f'{c.affordance:.2f}'}"
        f"</td><td>{c.combined:.3f}</td></tr>" for c in best)
    return f"<table><tr><th>candidate</th><th>llm</th><th>affordance</th><th>combined</th></tr>{rows}</table>"


def render_episode(trace: EpisodeTrace, frame_files: Sequence[str]) -> str:
    """One episode as an HTML page (frame paths relative to the page)."""
    status = f"<span class='{'ok' if trace.execution_success else 'bad'}'>{'success' if trace.execution_success else 'failure'}</span>"
    imgs = "".join(f"<figure style='display:inline-block;margin:2px'><img src='{_e(f)}' width=240>"
                   f"<figcaption>{_e(Path(f).stem)}</figcaption></figure>" for f in frame_files)
    steps = []
    for s in trace.steps:
        info = {k: v for k, v in s.info.items() if k not in ("env",)}
        steps.append(
            f"<tr><td>{s.index}</td><td>{_e(s.chosen)}{' (done)' if s.done else ''}</td>"
            f"<td>{'' if s.success is None else s.success}</td><td>{_e(s.feedback)}</td>"
            f"<td><pre style='max-height:160px'>{_e(s.prompt_delta)}</pre></td>"
            f"<td><pre style='max-height:160px'>{_e(info)}</pre></td><td>{_candidates(s)}</td></tr>")
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{_e(trace.episode_id)}</title><style>{_CSS}</style>"
        f"</head><body><p><a href='index.html'>all episodes</a></p><h2>{_e(trace.instruction)}</h2>"
        f"<p>{_e(trace.episode_id)} — planner {_e(trace.planner)}, family {_e(trace.family)}, seed {trace.seed}, "
        f"{len(trace.steps)} steps, {status}; goal: {_e(trace.goal_details)}"
        f"{'; error: ' + _e(trace.error) if trace.error else ''}</p>"
        f"<h3>Frames (top-down)</h3><div>{imgs or '<i>no frames saved</i>'}</div>"
        f"<h3>Steps</h3><table><tr><th>#</th><th>action</th><th>success</th><th>env feedback</th>"
        f"<th>prompt delta</th><th>planner info</th><th>candidate scores</th></tr>{''.join(steps)}</table>"
        f"<h3>Full prompt</h3><pre>{_e(trace.prompt)}</pre></body></html>")


def render_report(run_dir: str | Path) -> Path:
    """Render ``<run_dir>/report/index.html`` and one page per episode in ``<run_dir>/traces.jsonl``;
    returns the index path."""
    run_dir = Path(run_dir)
    out = run_dir / "report"
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for trace in read_traces(run_dir / "traces.jsonl"):
        sid = safe_id(trace.episode_id)
        fdir = run_dir / "frames" / sid
        files = sorted(fdir.glob("*.png"), key=lambda p: int(p.stem) if p.stem.isdigit() else 0) if fdir.is_dir() else []
        page = out / f"{sid}.html"
        page.write_text(render_episode(trace, [f"../frames/{sid}/{f.name}" for f in files]), encoding="utf-8")
        rows.append(f"<tr><td><a href='{_e(page.name)}'>{_e(trace.episode_id)}</a></td><td>{_e(trace.family)}</td>"
                    f"<td>{len(trace.steps)}</td><td class='{'ok' if trace.execution_success else 'bad'}'>"
                    f"{trace.execution_success}</td><td>{len(files)}</td></tr>")
    index = out / "index.html"
    index.write_text(f"<!doctype html><html><head><meta charset='utf-8'><style>{_CSS}</style></head><body>"
                     f"<h2>{_e(run_dir.name)}</h2><table><tr><th>episode</th><th>family</th><th>steps</th>"
                     f"<th>success</th><th>frames</th></tr>{''.join(rows)}</table></body></html>", encoding="utf-8")
    return index
