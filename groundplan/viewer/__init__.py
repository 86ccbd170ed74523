"""The trace viewer: one page over a folder of sweeps, served by ``groundplan view OUTPUT_DIR`` and by the
Serve app at ``/``.

The page (``static/viewer.html`` + ``viewer.js``, plain JS, no build step) reads four routes, answered the
same way by :mod:`groundplan.viewer.server` and by the Serve app (behind its token there):

- ``viewer/api/runs``: the sweeps under the folder (each a folder with ``traces.jsonl``);
- ``viewer/api/runs/<run>``: its episodes (traces), frame file names per episode, ``summary.json``, and a
  summary table recomputed from the traces with n and 95% Wilson intervals;
- ``viewer/api/compare/<run_a>/<run_b>``: the two runs on the episodes they share, as ``groundplan
  compare`` reports them (success with Wilson intervals, McNemar with Holm, paired measure differences);
- ``viewer/frames/<run>/<safe-id>/<n>.png``: camera frames written by :func:`groundplan.rollout.frames.write_frames`.

It sits above the evaluation layer, whose functions compute every number it shows, and below Serve.
"""
from __future__ import annotations

from pathlib import Path

#: the page's files
STATIC = Path(__file__).parent / "static"
