"""Options of the BabyAI env (no minigrid import, so configs validate without it)."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from groundplan.envs.splits import SayCanPaySplit

#: the four SayCanPay BabyAI levels (Sec. 6, "BabyAI ... pickup tasks")
FAMILIES: tuple[str, ...] = ("pickup", "unlock_pickup", "blocked_unlock_pickup", "unlock_to_unlock")


class BabyAIConfig(BaseModel):
    """Options of :class:`~groundplan.envs.babyai.env.BabyAIEnv`; unknown fields are refused.

    Split sizes default to the paper's (Sec. 6, "Training Details": 400 train trajectories for BabyAI,
    100 per test split), spread evenly over the four levels."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    split: SayCanPaySplit = Field(
        "test", description="Which deterministic split env.tasks() returns (train: Can/Pay data and prompt "
        "examples; test; test-generalize: more rooms and distractors).")
    train_per_family: int = Field(100, ge=1, le=10_000, description="Train tasks per level (paper: 400 in all).")
    test_per_family: int = Field(25, ge=1, le=10_000, description="Test tasks per level (paper: 100 in all).")
    generalize_per_family: int = Field(25, ge=1, le=10_000,
                                       description="Test-generalize tasks per level (paper: 100 in all).")
    max_primitive_steps: int = Field(400, ge=10, le=100_000, description="Cap on primitive minigrid actions per "
                                     "episode; a high-level action that would exceed it fails.")
