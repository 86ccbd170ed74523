"""Planners, one module per paper. ``PLANNERS.get(name)(lm=..., affordance=..., **options)``."""
from groundplan.core.registry import Registry

PLANNERS: Registry = Registry("planner")
PLANNERS.register_lazy("saycan", "groundplan.planners.saycan:make_saycan")
PLANNERS.register_lazy("saycan_novf", "groundplan.planners.saycan:make_saycan_novf")
PLANNERS.register_lazy("generative", "groundplan.planners.saycan:make_generative")
PLANNERS.register_lazy("inner_monologue", "groundplan.planners.inner_monologue:make_inner_monologue")
PLANNERS.register_lazy("zeroshot", "groundplan.planners.zeroshot:make_zeroshot")
PLANNERS.register_lazy("saycanpay", "groundplan.planners.saycanpay:make_saycanpay")
PLANNERS.register_lazy("zeroshot_vanilla", "groundplan.planners.zeroshot:make_vanilla")
