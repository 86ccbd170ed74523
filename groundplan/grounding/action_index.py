"""Embedding indexes over admissible actions, cached on disk.

Zero-Shot Planners (Huang et al., Sec. 3.2) translate each sampled step to the admissible action with
the highest cosine similarity under a sentence encoder; SayCan on large action sets pre-filters its
options the same way. Embedding tens of thousands of labels takes minutes on a CPU, so matrices are
cached under ``cache_dir()/embeddings``, keyed by the encoder's name and a hash of the label list.
"""
from __future__ import annotations

import hashlib
import io
import logging
import re
import threading
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from groundplan.core.paths import atomic_write_bytes, cache_dir

logger = logging.getLogger(__name__)


def embedding_model_name(lm: Any) -> str:
    """Name of the translation LM behind ``lm.embed`` (the cache key): ``lm.embedder_name``, the
    HF engine's sentence encoder, or else ``lm.name``."""
    name = getattr(lm, "embedder_name", None) or getattr(getattr(lm, "_embedder", None), "model_name", None)
    return str(name or getattr(lm, "name", "lm"))


def action_set_hash(labels: Sequence[str]) -> str:
    h = hashlib.sha256()
    for label in labels:
        h.update(label.encode("utf-8"))
        h.update(b"\x00")
    return h.hexdigest()[:20]


def embeddings_dir() -> Path:
    return cache_dir() / "embeddings"


_MEMORY: dict[tuple[str, str], np.ndarray] = {}
_MEMORY_LOCK = threading.Lock()


def clear_memory_cache() -> None:
    """Forget the in-process copies (the disk cache stays); benchmarks time cold vs cached loads."""
    with _MEMORY_LOCK:
        _MEMORY.clear()


def action_embeddings(lm: Any, labels: Sequence[str], *, use_disk: bool = True, batch: int = 4096) -> np.ndarray:
    """Unit-norm embeddings (float32, one row per label) of an action set, from memory, from
    ``cache_dir()/embeddings/<model>-<hash>.npy`` or computed and saved there (atomically).

    A cached matrix is used only if it matches a fresh embedding of the first label (same width,
    cosine > 0.99), so a different model under the same name never reads stale vectors."""
    model = embedding_model_name(lm)
    key = (model, action_set_hash(labels))
    probe = unit_rows(np.asarray(lm.embed(list(labels[:1])), dtype=np.float32)) if labels else None

    def fits(matrix: np.ndarray | None) -> bool:
        if matrix is None or matrix.ndim != 2 or matrix.shape[0] != len(labels):
            return False
        if probe is None:
            return True
        return matrix.shape[1] == probe.shape[1] and float(matrix[0] @ probe[0]) > 0.99

    with _MEMORY_LOCK:
        cached = _MEMORY.get(key)
    if fits(cached):
        return cached  # type: ignore[return-value]
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", model)
    path = embeddings_dir() / f"{safe}-{key[1]}.npy"
    matrix: np.ndarray | None = None
    if use_disk and path.exists():
        try:
            matrix = np.load(path)
        except (OSError, ValueError):
            matrix = None
        if not fits(matrix):
            matrix = None
    if matrix is None:
        t0 = time.perf_counter()
        parts = [np.asarray(lm.embed(list(labels[i : i + batch])), dtype=np.float32) for i in range(0, len(labels), batch)]
        matrix = unit_rows(np.concatenate(parts) if parts else np.zeros((0, 1), np.float32))
        logger.info("embedded %d actions with %s in %.1f s", len(labels), model, time.perf_counter() - t0)
        if use_disk:
            try:
                buffer = io.BytesIO()
                np.save(buffer, matrix)
                atomic_write_bytes(path, buffer.getvalue())
            except OSError as exc:
                logger.warning("could not cache action embeddings at %s: %s", path, exc)
    matrix = np.ascontiguousarray(matrix, dtype=np.float32)
    with _MEMORY_LOCK:
        _MEMORY[key] = matrix
    return matrix


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length, float32 (zero rows stay zero, so their cosine with anything is 0)."""
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)


class ActionIndex:
    """The admissible actions of one skill list (the done label left out) and their embeddings; the
    list's hash is computed once per list object (envs hand out one shared list)."""

    def __init__(self, lm: Any, skills: Sequence[str], done_skill: str) -> None:
        self.skills = skills
        self.positions = [i for i, s in enumerate(skills) if s != done_skill]
        self.labels = [skills[i] for i in self.positions]
        self.matrix = action_embeddings(lm, self.labels)
        # torch shares the array's memory; its GEMM is ~3x faster than numpy's for this (40k x 384)
        # by (384 x k) product, which is memory-bound and dominates a translation step
        self.matrix_t = torch.from_numpy(self.matrix)
        self.position = {label: i for i, label in enumerate(self.labels)}

    def label_mask(self, admissible: Any) -> np.ndarray | None:
        """An ``Observation.admissible`` mask (aligned with the skill list) restricted to ``labels``."""
        if admissible is None:
            return None
        return np.asarray(admissible, dtype=bool)[self.positions]
