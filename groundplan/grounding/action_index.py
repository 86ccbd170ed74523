"""Embedding indexes over admissible actions, embedded as they are needed and cached on disk.

Zero-Shot Planners (Huang et al., Sec. 3.2) translate each sampled step to the admissible action with
the highest cosine similarity under a sentence encoder; SayCan on large action sets pre-filters its
options the same way. Both only ever compare against the actions the observation allows (VirtualHome:
the templates × the objects of the scene, a few thousand of the 40,560 labels), so a row is embedded
the first time an observation allows it, not up front: a new scene costs its own actions, not the
whole bank. The matrix, with rows not yet embedded left as NaN, is cached under
``cache_dir()/embeddings``, keyed by the encoder's name and a hash of the label list, and each write
merges the rows other processes saved meanwhile.
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
_MEMORY_LOCK = threading.RLock()


def clear_memory_cache() -> None:
    """Forget the in-process copies (the disk cache stays); benchmarks time cold vs cached loads."""
    with _MEMORY_LOCK:
        _MEMORY.clear()


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length, float32 (zero rows stay zero, so their cosine with anything is 0)."""
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)


def _present(matrix: np.ndarray) -> np.ndarray:
    return ~np.isnan(matrix[:, 0]) if matrix.shape[1] else np.zeros(len(matrix), dtype=bool)


class ActionEmbeddings:
    """The unit-norm embeddings (float32, one row per label) of one action set, one matrix per (encoder,
    label list) in the process, shared by every index over that list and filled in place by
    :meth:`ensure`, so views of it (a torch tensor) stay valid.

    A cached matrix is used only if its first embedded row matches a fresh embedding of that label
    (same width, cosine > 0.99), so a different model under the same name never reads stale vectors."""

    def __init__(self, lm: Any, labels: Sequence[str], *, use_disk: bool = True, batch: int = 4096) -> None:
        self.lm, self.labels, self.use_disk, self.batch = lm, list(labels), use_disk, batch
        model = embedding_model_name(lm)
        self.key = (model, action_set_hash(self.labels))
        self.path = embeddings_dir() / f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', model)}-{self.key[1]}.npy"
        with _MEMORY_LOCK:
            matrix = _MEMORY.get(self.key)
            if matrix is None or not self._fits(matrix):
                matrix = self._load()
                if matrix is None:
                    width = self._embed([0]).shape[1] if self.labels else 1
                    matrix = np.full((len(self.labels), width), np.nan, dtype=np.float32)
                _MEMORY[self.key] = matrix
        self.matrix: np.ndarray = matrix

    def _embed(self, rows: Sequence[int]) -> np.ndarray:
        return unit_rows(np.asarray(self.lm.embed([self.labels[i] for i in rows]), dtype=np.float32))

    def _fits(self, matrix: np.ndarray | None) -> bool:
        if matrix is None or matrix.ndim != 2 or matrix.shape[0] != len(self.labels):
            return False
        if not self.labels:
            return True
        present = np.flatnonzero(_present(matrix))
        row = int(present[0]) if len(present) else 0
        probe = self._embed([row])
        return matrix.shape[1] == probe.shape[1] and (not len(present) or float(matrix[row] @ probe[0]) > 0.99)

    def _read(self) -> np.ndarray | None:
        if not (self.use_disk and self.path.exists()):
            return None
        try:
            return np.ascontiguousarray(np.load(self.path), dtype=np.float32)
        except (OSError, ValueError):
            return None

    def _load(self) -> np.ndarray | None:
        matrix = self._read()
        return matrix if self._fits(matrix) else None

    def ensure(self, rows: np.ndarray | None = None) -> np.ndarray:
        """The matrix with every row of the boolean mask ``rows`` embedded (all rows when ``None``);
        rows it does not ask for may still be NaN."""
        with _MEMORY_LOCK:
            want = np.ones(len(self.labels), dtype=bool) if rows is None else np.asarray(rows, dtype=bool)
            missing = np.flatnonzero(want & ~_present(self.matrix))
            if not len(missing):
                return self.matrix
            t0 = time.perf_counter()
            for i in range(0, len(missing), self.batch):
                part = missing[i : i + self.batch]
                self.matrix[part] = self._embed(part)
            logger.info("embedded %d of %d actions with %s in %.1f s", len(missing), len(self.labels), self.key[0],
                        time.perf_counter() - t0)
            if self.use_disk:
                self._save()
            return self.matrix

    def _save(self) -> None:
        """Write the matrix, first taking the rows another process saved that this one lacks."""
        on_disk = self._read()
        if on_disk is not None and on_disk.shape == self.matrix.shape:
            ours, theirs = _present(self.matrix), _present(on_disk)
            both = np.flatnonzero(ours & theirs)  # same encoder: a row both embedded agrees
            if not len(both) or float(on_disk[both[0]] @ self.matrix[both[0]]) > 0.99:
                self.matrix[theirs & ~ours] = on_disk[theirs & ~ours]
        try:
            buffer = io.BytesIO()
            np.save(buffer, self.matrix)
            atomic_write_bytes(self.path, buffer.getvalue())
        except OSError as exc:
            logger.warning("could not cache action embeddings at %s: %s", self.path, exc)


def action_embeddings(lm: Any, labels: Sequence[str], *, use_disk: bool = True, batch: int = 4096) -> np.ndarray:
    """Unit-norm embeddings of every label of an action set, from memory, from the disk cache or
    computed and saved there (atomically)."""
    return ActionEmbeddings(lm, labels, use_disk=use_disk, batch=batch).ensure()


class ActionIndex:
    """The admissible actions of one skill list (the done label left out) and their embeddings, embedded
    as observations allow them (:meth:`ensure`); the list's hash is computed once per list object (envs
    hand out one shared list)."""

    def __init__(self, lm: Any, skills: Sequence[str], done_skill: str) -> None:
        self.skills = skills
        self.positions = [i for i, s in enumerate(skills) if s != done_skill]
        self.labels = [skills[i] for i in self.positions]
        self._embeddings = ActionEmbeddings(lm, self.labels)
        self.matrix = self._embeddings.matrix
        # torch shares the array's memory (filled in place); its GEMM is ~3x faster than numpy's for this
        # (40k x 384) by (384 x k) product, which is memory-bound and dominates a translation step
        self.matrix_t = torch.from_numpy(self.matrix)
        self.position = {label: i for i, label in enumerate(self.labels)}

    def ensure(self, admissible: Any) -> np.ndarray | None:
        """Embed the labels an ``Observation.admissible`` mask (aligned with the skill list) allows, all when
        ``None``, and return the mask restricted to ``labels``; rows it rules out may hold NaN, so callers
        set them to -inf."""
        mask = None if admissible is None else np.asarray(admissible, dtype=bool)[self.positions]
        self._embeddings.ensure(mask)
        return mask
