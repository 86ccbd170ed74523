"""What the trace viewer's routes answer, read from a folder of sweeps (see :mod:`groundplan.viewer`).

Paths from a request are never joined blindly: a run must be one that was listed, a frame name must
match ``<digits>.png`` and the resolved file must lie inside the run folder.
"""
from __future__ import annotations

import json
import logging
import math
import re
from pathlib import Path
from typing import Any

from groundplan.core.errors import ConflictError, InvalidInputError, NotFoundError
from groundplan.core.stats import wilson_interval
from groundplan.evaluation.compare import compare_folders
from groundplan.evaluation.summary import summarize
from groundplan.rollout.traces import EpisodeTrace, trace_records

log = logging.getLogger(__name__)
_FRAME = re.compile(r"^\d{1,6}\.png$")
_SAFE = re.compile(r"^[A-Za-z0-9_.-]{1,300}$")


def _finite(obj: Any) -> Any:
    """Traces may hold -inf (log of a zero affordance); browsers' JSON has none: map it to null."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return obj


def summary_table(traces: list[EpisodeTrace]) -> list[dict[str, Any]]:
    """The evaluation layer's summary (:func:`groundplan.evaluation.summary.summarize`), planners in the
    order they first appear, as the page's rows: one per (planner, family) and an ``all`` row per planner,
    each rate with n and its 95% Wilson interval."""
    order = list(dict.fromkeys(t.planner for t in traces))
    rows = []
    for r in summarize(traces, order):
        row: dict[str, Any] = {"planner": r.planner, "family": r.family, "n": r.episodes, "mean_steps": r.mean_steps}
        for key in ("execution_success", "plan_success"):
            k, n, lo, hi = r.interval(key) or (0, 0, *wilson_interval(0, 0))
            row[key] = {"k": k, "n": n, "rate": k / n if n else None, "lo": lo, "hi": hi}
        rows.append(row)
    return rows


class ViewerData:
    """The sweeps under ``root``: ``root`` itself when it holds ``traces.jsonl``, else its sub-folders that do."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def _runs(self) -> dict[str, Path]:
        if (self.root / "traces.jsonl").exists():
            return {self.root.resolve().name: self.root}
        if not self.root.is_dir():
            return {}
        return {p.name: p for p in sorted(self.root.iterdir()) if (p / "traces.jsonl").exists()}

    def runs(self) -> list[dict[str, Any]]:
        return [{"name": name, "has_summary": (p / "summary.json").exists()} for name, p in self._runs().items()]

    def _run(self, run: str) -> Path:
        path = self._runs().get(run)
        if path is None:
            raise NotFoundError(f"no sweep {run!r} under {self.root}")
        return path

    def run_data(self, run: str) -> dict[str, Any]:
        from groundplan.rollout.frames import safe_id

        path = self._run(run)
        traces, episodes = [], []
        # the one reader of traces files (a torn last line skipped); the page gets each record as written,
        # the summary table the trace it parses to
        for raw, _ in trace_records(path / "traces.jsonl"):
            episodes.append(EpisodeTrace.from_dict(raw))
            t = _finite(raw)
            sid = safe_id(t["episode_id"])
            fdir = path / "frames" / sid
            files = sorted((p.name for p in fdir.glob("*.png") if _FRAME.match(p.name)), key=lambda n: int(n[:-4])) \
                if fdir.is_dir() else []
            t["_safe_id"], t["_frames"] = sid, files
            traces.append(t)
        summary = None
        if (path / "summary.json").exists():
            try:
                summary = _finite(json.loads((path / "summary.json").read_text()))
            except json.JSONDecodeError:
                summary = None
        return {"name": run, "traces": traces, "summary": summary, "table": summary_table(episodes)}

    def run_json(self, run: str) -> str:
        return json.dumps(self.run_data(run), allow_nan=False)

    def frame_path(self, run: str, sid: str, name: str) -> Path:
        path = self._run(run)
        if not _SAFE.match(sid) or sid in (".", "..") or not _FRAME.match(name):
            raise NotFoundError("no such frame")
        file = (path / "frames" / sid / name).resolve()
        if not file.is_file() or path.resolve() not in file.parents:
            raise NotFoundError("no such frame")
        return file

    def compare(self, run_a: str, run_b: str) -> dict[str, Any]:
        """Two listed runs compared on the episodes they share: ``groundplan compare``'s dict
        (:func:`groundplan.evaluation.compare.compare_folders`). Differing env options, or no shared
        episode, are a :class:`~groundplan.core.errors.ConflictError` that names them: both runs exist, what
        they hold rules the comparison out."""
        folder_a, folder_b = self._run(run_a), self._run(run_b)
        try:
            result, _ = compare_folders(folder_a, folder_b)
        except InvalidInputError as exc:
            raise ConflictError(str(exc)) from None
        result["run_a"], result["run_b"] = run_a, run_b
        return _finite(result)

    def compare_json(self, run_a: str, run_b: str) -> str:
        return json.dumps(self.compare(run_a, run_b), allow_nan=False)
