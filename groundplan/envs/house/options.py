"""Options of the house env (``HouseEnv(**options)``); importing this module loads nothing heavy."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class HouseConfig(BaseModel):
    """Typed config of the procedural MultiON house env (SayNav Sec. 3.1 and 4.1)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    houses_per_split: int = Field(200, ge=1, le=100000, description="generated houses (one task each) per split")
    splits: tuple[str, ...] = Field(("val", "test"), description="task families; each split draws house seeds "
                                    "from its own disjoint range (val: 100000+k, test: 200000+k, train: k)")
    min_rooms: int = Field(3, ge=2, le=12, description="fewest rooms in a house (SayNav: 3)")
    max_rooms: int = Field(10, ge=2, le=12, description="most rooms in a house (SayNav: 10)")
    num_targets: int = Field(3, ge=1, le=5, description="target categories per episode (MultiON: 3)")
    turn_deg: Literal[30, 90] = Field(30, description="degrees per turn action")
    max_sim_steps: int = Field(1500, ge=10, description="simulator step limit per episode (moves, turns, look-around views)")
    found_radius: float = Field(2.5, gt=0, description="a target counts as found when seen within this distance (m)")
    fov_deg: float = Field(90.0, gt=0, le=360, description="horizontal field of view (AI2-THOR's default camera: 90°)")
    large_range: float = Field(6.0, gt=0, description="detection range of furniture and doors (m)")
    small_range: float = Field(3.0, gt=0, description="detection range of small objects (m)")
    perception: Literal["gt", "noisy"] = Field("gt", description="'gt': exact positions and instance ids (SayNav's "
                                               "GT graph); 'noisy': jittered positions, missed detections, no ids (VO)")
    position_noise: float = Field(0.15, ge=0, description="noisy mode: position std (m) at 0 m, growing with distance")
    miss_prob: float = Field(0.15, ge=0, le=1, description="noisy mode: chance a visible object is not detected")
    navigator: Literal["astar", "learned"] = Field("astar", description="point-goal navigator that executes "
                                                   "'navigate to (x, z)': 'astar' is SayNav's OrNav (shortest path on "
                                                   "the map); 'learned' the RLlib policy of ``navigator_model`` (Sec. 3.5)")
    navigator_model: str | None = Field(None, description="learned navigator: MLflow URI or folder of the policy "
                                        "trained by `groundplan train configs/train_pointnav_house.yaml`, e.g. "
                                        "'models:/pointnav-house/1'")
    navigator_tracking_uri: str | None = Field(None, description="MLflow registry that resolves a 'models:/' "
                                               "navigator_model (e.g. 'sqlite:///outputs/train/mlruns/mlflow.db')")
    nav_tolerance: float = Field(0.3, gt=0, description="A* navigator: a navigate step succeeds within this distance "
                                 "of the goal cell (m); the learned one uses the radius it was trained for")
    render_frames: bool = Field(False, description="render a top-down frame after every step (for traces and the viewer)")

    @model_validator(mode="after")
    def _check(self) -> "HouseConfig":
        if self.min_rooms > self.max_rooms:
            raise ValueError(f"min_rooms ({self.min_rooms}) > max_rooms ({self.max_rooms})")
        if self.navigator == "learned" and not self.navigator_model:
            raise ValueError("navigator: learned needs navigator_model (e.g. 'models:/pointnav-house/1')")
        bad = [s for s in self.splits if s not in ("train", "val", "test")]
        if bad or not self.splits:
            raise ValueError(f"splits must be non-empty, from train/val/test, got {list(self.splits)}")
        return self


class ThorHouseConfig(BaseModel):
    """Options of the AI2-THOR adapter (``thor_house``), for a config file; tests pass houses and a fixture
    controller to the constructor directly."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    houses_file: str | None = Field(None, description="JSON file: a list of {instruction, house} (ProcTHOR house "
                                    "JSON and a MultiON instruction naming 3 target types)")
    found_radius: float = Field(2.5, gt=0, description="a target counts as found when seen within this distance (m)")
    max_sim_steps: int = Field(1500, ge=1, description="THOR actions per episode before it is cut")
