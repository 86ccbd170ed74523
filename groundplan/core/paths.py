"""Where groundplan keeps files, and how it writes them so a crash never leaves a half-written one.

Caches (converted models, action embeddings, dataset indexes) live under :func:`cache_dir`; every cache
file is written to a temporary name in the same folder and renamed into place (:func:`atomic_write_bytes`),
so concurrent processes (Ray actors) and interrupted runs only ever see whole files.
"""
from __future__ import annotations

import os
import threading
from pathlib import Path


def cache_dir() -> Path:
    """``$GROUNDPLAN_CACHE_DIR`` or ``~/.cache/groundplan``."""
    return Path(os.environ.get("GROUNDPLAN_CACHE_DIR", Path.home() / ".cache" / "groundplan"))


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` through a temporary file in the same folder and an atomic rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        tmp.write_bytes(data)
        tmp.replace(path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def atomic_write_text(path: str | Path, text: str) -> Path:
    """:func:`atomic_write_bytes` for UTF-8 text."""
    return atomic_write_bytes(path, text.encode("utf-8"))
