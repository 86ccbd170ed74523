"""Camera frames of an episode: captured as PNG bytes where the env runs, written beside the traces by
the sweep driver (so an env inside a Ray actor on another node needs no shared file system).

Layout under a run folder: ``frames/<safe episode id>/<n>.png`` with n = 0 after reset and k + 1 after
step k (the newest frame of an env that declares cameras).
"""
from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from groundplan.core.paths import atomic_write_bytes

#: (frame number, PNG bytes)
Frame = tuple[int, bytes]


def safe_id(episode_id: str) -> str:
    """A file-name-safe form of an episode id (``"+Scene|tabletop/x/00|0"`` → ``"_Scene_tabletop_x_00_0"``)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", episode_id).strip("._") or "episode"


def frames_dir(run_dir: str | Path, episode_id: str) -> Path:
    return Path(run_dir) / "frames" / safe_id(episode_id)


def png_bytes(rgb: Any) -> bytes:
    """An RGB array (HxWx3) as PNG bytes."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(np.asarray(rgb, dtype=np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()


def newest_frame(env: Any, number: int) -> Frame | None:
    """The env's newest frame as frame ``number``, or None when it declares no cameras or has none yet."""
    if not env.capabilities.cameras:
        return None
    frames = env.frames()
    if not frames:
        return None
    frame = frames[-1]
    return number, png_bytes(frame["rgb"] if isinstance(frame, Mapping) else frame)


def write_frames(run_dir: str | Path, episode_id: str, frames: Sequence[Frame]) -> list[Path]:
    """Write an episode's frames under ``frames/<safe id>/`` (atomically, replacing an earlier attempt's)."""
    folder = frames_dir(run_dir, episode_id)
    return [atomic_write_bytes(folder / f"{n}.png", data) for n, data in frames]
