"""What every benchmark here shares: its logging set-up, the interval of a ratio measured over
alternating rounds, and its last line.

The last line is ``result: key=value ...`` (the keys each script's docstring names), the one line
that tools and the docs read; :func:`report` prints it and, when ``GROUNDPLAN_BENCH_JSON`` names a
file, also appends the same fields to it as one JSON line (with the script's name and the time), so
that a series of runs can be collected without parsing text.

Import it as ``from benchmarks.harness import ...`` (the scripts put the repository root on
``sys.path`` when run as ``python benchmarks/<name>.py``).
"""
from __future__ import annotations

import json
import logging
import math
import os
import statistics
import sys
import time
from typing import Any, Sequence

#: two-sided 95% Student t quantiles by degrees of freedom; between two entries the smaller df's
#: (larger) quantile is used, so the interval errs wide
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
       12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042, 60: 2.000, 120: 1.980}

#: where :func:`report` also writes its fields as a JSON line, when set
JSON_ENV = "GROUNDPLAN_BENCH_JSON"


def setup_logging(level: int = logging.INFO, quiet: Sequence[str] = (), quiet_level: int = logging.WARNING,
                  fmt: str = "%(message)s") -> None:
    """Plain messages on stderr; the loggers in ``quiet`` only from ``quiet_level`` up (groundplan's
    per-episode lines and Ray's start-up chatter would bury the benchmark's own)."""
    logging.basicConfig(level=level, format=fmt)
    for name in quiet:
        logging.getLogger(name).setLevel(quiet_level)


def t95(df: int) -> float:
    """The two-sided 95% Student t quantile for ``df`` degrees of freedom (nan below 1)."""
    if df < 1:
        return float("nan")
    return T95[max(k for k in T95 if k <= df)]


def log_interval(ratios: Sequence[float]) -> tuple[float, float, float]:
    """Geometric mean of per-round ratios and its 95% t-interval on the log scale (a ratio's noise is
    multiplicative: load slows a round by a factor); the bounds are nan with fewer than two rounds."""
    logs = [math.log(r) for r in ratios]
    mean = statistics.fmean(logs)
    if len(logs) < 2:
        return math.exp(mean), float("nan"), float("nan")
    half = t95(len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def percentile(xs: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0-1) of ``xs`` by the nearest rank."""
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def load_average() -> tuple[float, float, float]:
    """The machine's 1, 5 and 15 minute load averages (nan where the platform has none)."""
    try:
        return os.getloadavg()
    except (AttributeError, OSError):
        return (float("nan"),) * 3


def result_line(fields: dict[str, Any]) -> str:
    """``result: k=v ...`` in the given order; values are written as given (format them first)."""
    bad = [k for k in fields if not k or any(c.isspace() or c == "=" for c in k)]
    if bad:
        raise ValueError(f"result keys must be single words without '=': {bad}")
    return "result: " + " ".join(f"{k}={v}" for k, v in fields.items())


def report(fields: dict[str, Any]) -> str:
    """Print the result line on stdout (the benchmark's last line) and append the fields to
    ``$GROUNDPLAN_BENCH_JSON`` if it is set; returns the line."""
    line = result_line(fields)
    load = load_average()
    logging.getLogger("benchmarks").info("load average at the end (1, 5, 15 min): %s on %s CPUs",
                                         " ".join(f"{x:.2f}" for x in load), os.cpu_count())
    path = os.environ.get(JSON_ENV)
    if path:
        record = {"benchmark": os.path.basename(sys.argv[0]).removesuffix(".py"), "time": time.time(),
                  "load_average": list(load), "cpus": os.cpu_count(), **fields}
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record, default=str) + "\n")
    print(line, flush=True)
    return line
