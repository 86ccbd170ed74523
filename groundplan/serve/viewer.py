"""The trace viewer's data side and its local server (``groundplan view OUTPUT_DIR``).

The page (``static/viewer.html`` + ``viewer.js``, plain JS, no build step) reads three routes, served
the same way by this module's small HTTP server and by the Serve app at ``/``:

- ``viewer/api/runs``: the sweeps under the folder (each a folder with ``traces.jsonl``);
- ``viewer/api/runs/<run>``: its episodes (traces), frame file names per episode, ``summary.json``, and a
  summary table recomputed from the traces with n and 95% Wilson intervals;
- ``viewer/frames/<run>/<safe-id>/<n>.png``: camera frames written by :func:`groundplan.rollout.frames.write_frames`.

Paths from a request are never joined blindly: a run must be one that was listed, a frame name must
match ``<digits>.png`` and the resolved file must lie inside the run folder.
"""
from __future__ import annotations

import json
import logging
import math
import re
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from groundplan.core.stats import wilson_interval
from groundplan.evaluation.summary import summarize
from groundplan.rollout.traces import EpisodeTrace
from groundplan.serve.errors import NotFoundError

log = logging.getLogger(__name__)
STATIC = Path(__file__).parent / "static"
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
        with (path / "traces.jsonl").open(encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    raw = json.loads(line)
                except json.JSONDecodeError:  # a torn last line (a crash mid-write)
                    continue
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


class _Handler(BaseHTTPRequestHandler):
    data: ViewerData

    def log_message(self, fmt: str, *args: Any) -> None:  # route http.server's stderr lines to logging
        log.debug("view: " + fmt, *args)

    def _send(self, status: int, body: bytes, ctype: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        parts = [unquote(p) for p in urlparse(self.path).path.split("/") if p]
        try:
            if not parts:
                self._send(200, (STATIC / "viewer.html").read_bytes(), "text/html; charset=utf-8")
            elif parts == ["viewer.js"]:
                self._send(200, (STATIC / "viewer.js").read_bytes(), "text/javascript; charset=utf-8")
            elif parts == ["viewer", "api", "runs"]:
                self._send(200, json.dumps(self.data.runs()).encode(), "application/json")
            elif len(parts) == 4 and parts[:3] == ["viewer", "api", "runs"]:
                self._send(200, self.data.run_json(parts[3]).encode(), "application/json")
            elif len(parts) == 5 and parts[:2] == ["viewer", "frames"]:
                self._send(200, self.data.frame_path(*parts[2:]).read_bytes(), "image/png")
            else:
                raise NotFoundError(f"no page {self.path!r}")
        except NotFoundError as exc:
            self._send(HTTPStatus.NOT_FOUND, json.dumps({"detail": str(exc)}).encode(), "application/json")


def make_server(root: str | Path, host: str = "127.0.0.1", port: int = 8001) -> ThreadingHTTPServer:
    """The viewer's HTTP server (not started); ``port=0`` picks a free one."""
    handler = type("ViewerHandler", (_Handler,), {"data": ViewerData(root)})
    return ThreadingHTTPServer((host, port), handler)


def check_folder(root: str | Path) -> None:
    if not Path(root).is_dir():
        from groundplan.core.errors import InvalidInputError

        raise InvalidInputError(f"{root} is not a folder; give an output folder (e.g. outputs/saycan_kitchen)")


def serve_viewer(root: str | Path, host: str = "127.0.0.1", port: int = 8001) -> None:
    """``groundplan view``: serve until interrupted."""
    check_folder(root)
    server = make_server(root, host, port)
    log.info("trace viewer of %s at http://%s:%d/", root, host, server.server_address[1])
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
