"""Inner Monologue's simulated tabletop (Huang et al. 2022, Sec. 4.1, App. A.1) as a groundplan Env.

One skill: ``"pick the <block> and place it on the <target>"`` (target: another block, a bowl or one of
the 9 named locations) plus ``"done"``. It runs the Panda's scripted pick-and-place under PyBullet
physics (:mod:`groundplan.envs.tabletop.world`) with the paper's test-time noise: Gaussian position
noise on the pick point and on the place point (the paper's N(0, 2.5 px) heatmap noise is ~8 mm at
Ravens' 3.125 mm/px; its place noise is N(0, 0.02 m)), and a disturbance: after a place, with
probability ``disturbance_prob`` the placed block is knocked off by an external force.

Every observation renders RGB-D + segmentation from a top-down and a front camera
(``Observation.images``: ``"top_rgb"``, ``"top_depth"``, ``"top_seg"``, ``"front_rgb"`` …), runs the
segmentation-based object lister (with its configured miss / false-positive rates) and the success
detector on the last action. The planner reads them from ``Observation.state`` (a
:class:`TabletopState`). The env keeps the last ``keep_frames`` top-down RGB frames: :meth:`frames`.

Not implemented: :meth:`check_plan` (a noise-free replay would rerun the physics); traces get
``plan_success=None``.
"""
from __future__ import annotations

import logging
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from groundplan.core.errors import InvalidInputError
from groundplan.core.types import GoalResult, Observation, StepResult, Task
from groundplan.core.validation import validate_options
from groundplan.envs.base import Env, EnvCapabilities
from groundplan.envs.tabletop.skills import DONE, parse_skill, skill_label
from groundplan.envs.tabletop.start_state import TabletopStartState
from groundplan.envs.tabletop.tasks import (
    FAMILIES,
    Geometry,
    check,
    layout_of,
    tasks_for,
)
from groundplan.envs.tabletop.world import (
    BLOCK_HALF,
    BOWL_FLOOR,
    COLOUR_NAMES,
    LOCATIONS,
    X_RANGE,
    TabletopWorld,
    block_name,
    bowl_name,
    is_bowl,
)
from groundplan.perception.object_lister import list_objects
from groundplan.perception.success_detector import SUCCESS_RADIUS, detect_success

logger = logging.getLogger(__name__)

VOCABULARY: tuple[str, ...] = tuple(block_name(c) for c in COLOUR_NAMES) + tuple(bowl_name(c) for c in COLOUR_NAMES)


class TabletopConfig(BaseModel):
    """Options of :class:`TabletopEnv` (``TabletopEnv(**options)``); unknown fields are refused."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tasks_per_family: int = Field(10, ge=1, le=99, description="Seeded tasks per family in env.tasks().")
    pick_noise_std: float = Field(0.008, ge=0.0, le=0.05, description="Std (m) of Gaussian x/y noise on the pick "
                                  "point (IM: N(0, 2.5 px) on the pick heatmap ≈ 8 mm).")
    place_noise_std: float = Field(0.02, ge=0.0, le=0.1, description="Std (m) of Gaussian x/y noise on the place "
                                   "point (IM: N(0, 0.02 m)).")
    disturbance_prob: float = Field(0.1, ge=0.0, le=1.0, description="Chance that a block just placed is knocked "
                                    "off by an external push (IM evaluates 'with disturbances'; rate not given).")
    object_miss_rate: float = Field(0.0, ge=0.0, le=1.0, description="Chance that the object lister misses a "
                                    "visible object (per object, per observation).")
    object_false_positive_rate: float = Field(0.0, ge=0.0, le=1.0, description="Chance per observation that the "
                                              "object lister reports one object that is not there.")
    image_width: int = Field(160, ge=16, le=1280, description="Camera image width (pixels).")
    image_height: int = Field(120, ge=16, le=960, description="Camera image height (pixels).")
    cameras: list[Literal["top", "front"]] = Field(["top", "front"], min_length=1,
                                                    description="Cameras rendered into Observation.images.")
    keep_frames: int = Field(16, ge=0, description="How many recent top-down RGB frames env.frames() keeps.")
    success_radius: float = Field(SUCCESS_RADIUS, gt=0.0, description="Success detector's 2-D radius (IM: 4 cm).")
    stack_radius: float = Field(0.03, gt=0.0, description="Ground truth: a block is on another within this 2-D distance.")
    location_radius: float = Field(0.10, gt=0.0, description="Ground truth: a block is on a location within this distance.")


@dataclass
class TabletopState:
    """What planners and perception read. ``positions`` are ground-truth poses (x, y, z) of every object;
    ``detected``/``occluded`` come from the object lister; ``last_action`` describes the last step."""

    blocks: list[str]
    bowls: list[str]
    positions: dict[str, tuple[float, float, float]]
    locations: dict[str, tuple[float, float]]
    detected: list[str] = field(default_factory=list)
    occluded: list[str] = field(default_factory=list)
    last_action: dict[str, Any] | None = None
    step: int = 0


class TabletopEnv(Env):
    """The IM sim tabletop; one PyBullet DIRECT client per instance (see :mod:`.world`)."""

    name = "tabletop"
    done_skill = DONE
    capabilities = EnvCapabilities(
        measures=("picks", "grasp_failures", "disturbances", "detected_successes", "sim_steps"), cameras=("top",))

    def default_affordance(self) -> str:
        return "tabletop_detected"

    def __init__(self, **options: Any) -> None:
        self.config: TabletopConfig = validate_options(TabletopConfig, options, "tabletop env options")
        self.geometry = Geometry(self.config.stack_radius, self.config.location_radius)
        self.world = TabletopWorld()
        self._task: Task | None = None
        self._frames: deque[dict[str, Any]] = deque(maxlen=max(self.config.keep_frames, 1))
        self._state: TabletopState | None = None
        self._rng = np.random.default_rng(0)
        self._lister_rng = np.random.default_rng(0)
        self._skills: list[str] = []
        self._stats: dict[str, float] = {}

    # ------------------------------------------------------------------------------------ Env API
    def tasks(self, families: Sequence[str] | None = None) -> list[Task]:
        if families is not None:
            unknown = [f for f in families if f not in FAMILIES]
            if unknown:
                raise InvalidInputError(f"unknown tabletop task families {unknown}; valid: {', '.join(FAMILIES)}")
        return tasks_for(families, self.config.tasks_per_family)

    def reset(self, task: Task, seed: int) -> Observation:
        layout = layout_of(task)
        self.world.build(layout)
        self._task = task
        base = int((task.start_state or {}).get("layout_seed", 0))
        self._rng = np.random.default_rng([seed, base, 1])
        self._lister_rng = np.random.default_rng([seed, base, 2])
        self._frames.clear()
        blocks, bowls = list(layout.blocks), list(layout.bowls)
        targets = blocks + bowls + list(LOCATIONS)
        self._skills = [skill_label(b, t) for b in blocks for t in targets if t != b] + [DONE]
        self._state = TabletopState(blocks, bowls, {}, dict(LOCATIONS))
        self._stats = {"picks": 0, "grasp_failures": 0, "disturbances": 0, "detected_successes": 0, "sim_steps": 0}
        return self._observe()

    # ------------------------------------------------------------------ task files (docs/tasks.md)
    goal_language = "groundplan.envs.tabletop.goal_language"
    start_state_schema = TabletopStartState

    def task_metadata(self, goal: Any, start_state: Mapping[str, Any] | None = None) -> dict[str, Any]:
        from groundplan.envs.tabletop import goal_language

        return goal_language.task_metadata(goal)

    @property
    def skills(self) -> list[str]:
        return list(self._skills)

    @property
    def state(self) -> TabletopState:
        if self._state is None:
            raise RuntimeError("call reset(task, seed) first")
        return self._state

    def execute(self, skill: str) -> StepResult:
        state = self.state
        state.step += 1
        if skill.strip().lower().rstrip(".") == DONE:
            state.last_action = {"skill": DONE}
            return StepResult(True, "done", self._observe())
        parsed = parse_skill(skill)
        names = set(state.blocks) | set(state.bowls)
        if parsed is None or parsed[0] not in state.blocks or parsed[1] == parsed[0] or \
                (parsed[1] not in names and parsed[1] not in LOCATIONS):
            state.last_action = {"skill": skill, "admissible": False, "success": False}
            return StepResult(False, f"'{skill}' is not an admissible action here", self._observe(),
                              info={"admissible": False})
        obj, target = parsed
        cfg = self.config
        positions = self.world.positions()
        pick_xy = np.array(positions[obj][:2]) + self._rng.normal(0.0, cfg.pick_noise_std, 2) * (cfg.pick_noise_std > 0)
        if target in LOCATIONS:
            tx, ty = LOCATIONS[target]
            tz = BLOCK_HALF
        elif is_bowl(target):
            tx, ty, bz = positions[target]
            tz = bz + BOWL_FLOOR + BLOCK_HALF
        else:
            tx, ty, bz = positions[target]
            tz = bz + 2 * BLOCK_HALF
        place = np.array([tx, ty]) + self._rng.normal(0.0, cfg.place_noise_std, 2) * (cfg.place_noise_std > 0)
        result = self.world.pick_and_place(obj, pick_xy, (float(place[0]), float(place[1]), float(tz)))
        self._stats["picks"] += 1
        self._stats["grasp_failures"] += int(not result.grasped)
        disturbed = False
        if result.grasped and cfg.disturbance_prob > 0 and self._rng.random() < cfg.disturbance_prob:
            centre = np.array([(X_RANGE[0] + X_RANGE[1]) / 2, 0.0])
            here = np.array(self.world.position(obj)[:2])
            away = centre - here if np.linalg.norm(centre - here) > 0.05 else np.array([1.0, 0.0])
            angle = math.atan2(away[1], away[0]) + self._rng.uniform(-math.pi / 4, math.pi / 4)
            self.world.knock(obj, (math.cos(angle), math.sin(angle)))
            disturbed = True
            self._stats["disturbances"] += 1
        positions = self.world.positions()
        ok = detect_success(positions, obj, target, LOCATIONS, cfg.success_radius)
        self._stats["detected_successes"] += int(ok)
        self._stats["sim_steps"] += result.sim_steps
        info = {
            "pick": obj, "target": target, "grasped": result.grasped, "disturbed": disturbed,
            "pick_xy": [round(v, 4) for v in result.pick_xy], "place_xyz": [round(v, 4) for v in result.place_xyz],
            "final_xyz": [round(v, 4) for v in positions[obj]], "sim_steps": result.sim_steps,
        }
        state.last_action = {"skill": skill, "admissible": True, "success": ok, **info}
        feedback = f"{'success' if ok else 'failure'}: {obj} {'is' if ok else 'is not'} on the {target}"
        if not result.grasped:
            feedback += " (nothing was grasped)"
        elif disturbed:
            feedback += " (it was knocked off)"
        return StepResult(ok, feedback, self._observe(), info=info)

    def check_goal(self) -> GoalResult:
        if self._task is None:
            raise RuntimeError("call reset(task, seed) first")
        return check(self._task.goal, self.world.positions(), self.geometry)

    def episode_metrics(self, task: Task, trace: Any) -> dict[str, float]:
        return {k: float(v) for k, v in self._stats.items()}

    # ------------------------------------------------------------------------------------ extras
    def frames(self) -> list[dict[str, Any]]:
        """The last ``keep_frames`` top-down RGB frames: ``{"step": int, "camera": "top", "rgb": HxWx3 uint8}``
        (step 0 is the state after reset)."""
        return list(self._frames) if self.config.keep_frames > 0 else []

    def close(self) -> None:
        self.world.close()

    def _observe(self) -> Observation:
        state = self.state
        cfg = self.config
        state.positions = self.world.positions()
        images: dict[str, Any] = {}
        for cam in cfg.cameras:
            rgb, depth, seg = self.world.render(cam, cfg.image_width, cfg.image_height)
            images[f"{cam}_rgb"], images[f"{cam}_depth"], images[f"{cam}_seg"] = rgb, depth, seg
        seg = images.get("top_seg")
        if seg is None:
            seg = self.world.render("top", cfg.image_width, cfg.image_height)[2]
        objects = {self.world.ids[n]: n for n in state.blocks + state.bowls}
        listed = list_objects(seg, objects, self._lister_rng, cfg.object_miss_rate, cfg.object_false_positive_rate,
                              VOCABULARY)
        state.detected, state.occluded = list(listed.visible), list(listed.occluded)
        if state.last_action is not None:
            state.last_action["lister"] = {"missed": list(listed.missed), "false_positives": list(listed.false_positives)}
        if cfg.keep_frames > 0 and "top_rgb" in images:
            self._frames.append({"step": state.step, "camera": "top", "rgb": images["top_rgb"]})
        return Observation(skills=list(self._skills), state=state, text="", images=images)
