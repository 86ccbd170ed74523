"""Planners, one module per paper. ``PLANNERS.get(name)(lm=..., affordance=..., **options)``."""
from groundplan.registry import Registry

PLANNERS: Registry = Registry("planner")

from groundplan.planners import saycan  # noqa: E402,F401  (registers saycan, saycan_novf, generative)
