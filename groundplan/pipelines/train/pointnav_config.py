"""Typed config of the point-goal policy training (``groundplan train configs/train_pointnav_house.yaml``)."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class PointNavTrainConfig(BaseModel):
    """Behaviour cloning of the shortest-path expert with RLlib, then DAgger rounds (SayNav Sec. 3.5).

    Round 0 clones ``expert_episodes`` expert demonstrations. Each DAgger round rolls out the current
    policy (the expert acts instead with probability ``dagger_beta``, halved every round), labels every
    visited state with the expert's action, adds them to the data and trains again on all of it (Ross et
    al. 2011). After every round the policy is scored on held-out houses (``eval_seeds``) and the best
    round is kept; it, the A* navigator and the expert are then reported on other houses (``test_seeds``),
    so the reported figures are not the ones the choice was made on.
    Defaults are sized to train in a few minutes on 2 CPU cores."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["pointnav"] = Field(description="selects this trainer in `groundplan train` (Can/Pay configs "
                                      "have a 'model' section instead)")
    name: str = Field("pointnav-house", min_length=1, pattern=r"^[A-Za-z0-9_.\-]+$",
                      description="registered model name (loaded as 'models:/<name>/<version>')")
    algorithm: Literal["bc"] = Field("bc", description="RLlib algorithm: 'bc' (behaviour cloning from the A* "
                                     "expert; with dagger_rounds > 0 it is DAgger, as in the paper)")
    train_seeds: tuple[int, int] = Field((0, 50000), description="half-open range of house seeds for training "
                                         "(the house env's train split; its test split starts at 200000)")
    eval_seeds: tuple[int, int] = Field((100000, 101000), description="half-open range of held-out house seeds that "
                                        "score every round to pick the best one (the house env's val split)")
    test_seeds: tuple[int, int] = Field((300000, 301000), description="half-open range of house seeds, used nowhere "
                                        "else, on which the picked policy, A* and the expert are reported")
    min_rooms: int = Field(3, ge=2, le=12, description="fewest rooms per training house")
    max_rooms: int = Field(10, ge=2, le=12, description="most rooms per training house")
    success_radius: float = Field(0.5, gt=0, le=2.0, description="a stop within this distance (m) of the goal succeeds")
    max_goal_m: float = Field(10.0, gt=0, description="goals at most this geodesic distance (m) from the start: "
                              "SayNav's planner asks for furniture in the room and points past a door")
    max_episode_steps: int = Field(300, ge=10, description="actions per point-goal episode before truncation")
    expert_episodes: int = Field(1500, ge=1, description="expert demonstrations of round 0")
    dagger_rounds: int = Field(2, ge=0, le=10, description="DAgger rounds after plain behaviour cloning")
    dagger_episodes: int = Field(400, ge=1, description="policy rollouts labelled by the expert per DAgger round")
    dagger_beta: float = Field(0.5, ge=0, le=1, description="chance the expert acts in the first DAgger round "
                               "(halved every round)")
    iterations: int = Field(200, ge=1, description="RLlib train() calls per round")
    updates_per_iteration: int = Field(4, ge=1, description="minibatch updates per train() call "
                                       "(RLlib's dataset_num_iters_per_learner)")
    batch_size: int = Field(512, ge=8, description="RLlib train_batch_size_per_learner")
    lr: float = Field(1e-3, gt=0, description="Adam learning rate")
    hidden: tuple[int, ...] = Field((256, 256), min_length=1, description="MLP hidden layer sizes (RLlib fcnet_hiddens)")
    action: Literal["greedy", "sample"] = Field("sample", description="how the policy acts, in evaluation and in "
                                                "the house env: its most likely action, or one drawn from its "
                                                "distribution (breaks the loops a memoryless greedy policy falls into)")
    eval_episodes: int = Field(200, ge=1, description="point-goal episodes per evaluation (each round's on "
                               "eval_seeds, the final report on test_seeds)")
    num_env_workers: int = Field(2, ge=1, description="rollout actors (one fault-aware pool) that roll out "
                                 "episodes in parallel")
    seed: int = Field(0, ge=0, description="seeds episode sampling and DAgger's expert coin")
    output_dir: str = Field("outputs/train", description="<output_dir>/<name>/ holds the data and the model; the "
                            "MLflow store defaults to <output_dir>/mlruns/mlflow.db")
    tracking_uri: str | None = Field(None, description="MLflow tracking/registry URI (None: SQLite under output_dir)")
    experiment: str = Field("saynav-pointnav", description="MLflow experiment name")

    @model_validator(mode="after")
    def _check(self) -> "PointNavTrainConfig":
        ranges = {f: getattr(self, f) for f in ("train_seeds", "eval_seeds", "test_seeds")}
        for field, (lo, hi) in ranges.items():
            if not 0 <= lo < hi:
                raise ValueError(f"{field} must be a non-empty range [lo, hi) with lo >= 0, got {[lo, hi]}")
        names = list(ranges)
        for i, f in enumerate(names):
            for g in names[i + 1:]:
                (a, b), (c, d) = ranges[f], ranges[g]
                if a < d and c < b:
                    raise ValueError(f"{f} {[a, b]} and {g} {[c, d]} overlap: selection and report need held-out houses")
        if self.min_rooms > self.max_rooms:
            raise ValueError(f"min_rooms ({self.min_rooms}) > max_rooms ({self.max_rooms})")
        return self
