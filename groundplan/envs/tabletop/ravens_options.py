"""Options of SayCanPay's two Ravens tasks on the tabletop (Tower of Hanoi, put blocks in bowls).

Kept free of pybullet so configs validate without it. Split sizes default to the paper's (Sec. 6,
"Training Details": 800 expert train trajectories per Ravens task, 100 per test split).
"""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from groundplan.envs.splits import SayCanPaySplit


class _RavensOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    split: SayCanPaySplit = Field(
        "test", description="Which deterministic split env.tasks() returns (train: Can/Pay data and prompt "
        "examples; test; test-generalize: novel colours and more objects).")
    train_size: int = Field(800, ge=1, le=100_000, description="Train tasks (paper: 800).")
    test_size: int = Field(100, ge=1, le=100_000, description="Test tasks (paper: 100).")
    generalize_size: int = Field(100, ge=1, le=100_000, description="Test-generalize tasks (paper: 100).")
    pick_noise_std: float = Field(0.0, ge=0.0, le=0.05, description="Std (m) of x/y noise on the pick point.")
    place_noise_std: float = Field(0.003, ge=0.0, le=0.05, description="Std (m) of x/y noise on the place point.")
    cameras: list[Literal["top", "front"]] = Field(
        default_factory=list, description="Cameras rendered into Observation.images (none by default: the "
        "SayCanPay planners read text only, and rendering dominates the step time).")
    image_width: int = Field(160, ge=16, le=1280, description="Camera image width (pixels).")
    image_height: int = Field(120, ge=16, le=960, description="Camera image height (pixels).")

    @property
    def split_size(self) -> int:
        """How many tasks the configured split holds."""
        return {"train": self.train_size, "test": self.test_size, "test-generalize": self.generalize_size}[self.split]


class HanoiConfig(_RavensOptions):
    """Options of :class:`~groundplan.envs.tabletop.hanoi.HanoiEnv`; unknown fields are refused."""

    tower_goal_prob: float = Field(0.25, ge=0.0, le=1.0, description="Share of tasks whose goal is the full "
                                   "tower move ('move all the disks to rod n'); the rest move one disk.")


class BlocksBowlsConfig(_RavensOptions):
    """Options of :class:`~groundplan.envs.tabletop.blocks_bowls.BlocksBowlsEnv`; unknown fields are refused."""
