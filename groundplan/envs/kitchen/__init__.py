"""SayCan's mock office kitchen (Ahn et al., Sec. 5.1, App. C): env "kitchen" and the affordance
sources "kitchen_value" (App. C.1 calibration) and "kitchen_language_sim" (App. C.2), registered
lazily in ``groundplan.envs`` and ``groundplan.grounding``."""
from __future__ import annotations

from groundplan.envs.kitchen.env import KitchenConfig, KitchenEnv
from groundplan.envs.kitchen.skills import SKILLS, parse_skill
from groundplan.envs.kitchen.tasks import FAMILIES, TASKS, kitchen_split, task_by_id

__all__ = ["FAMILIES", "SKILLS", "TASKS", "KitchenConfig", "KitchenEnv", "kitchen_split", "parse_skill", "task_by_id"]
