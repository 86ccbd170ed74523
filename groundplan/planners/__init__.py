"""Planners, one module per paper. ``PLANNERS.get(name)(lm=..., affordance=..., **options)``; each entry
registers its typed options class, which configs are validated against at load."""
from groundplan.core.registry import Registry

PLANNERS: Registry = Registry("planner")
PLANNERS.register_lazy("saycan", "groundplan.planners.saycan:make_saycan", config="groundplan.planners.saycan:SayCanConfig")
PLANNERS.register_lazy("saycan_novf", "groundplan.planners.saycan:make_saycan_novf", config="groundplan.planners.saycan:SayCanConfig")
PLANNERS.register_lazy("generative", "groundplan.planners.saycan:make_generative", config="groundplan.planners.saycan:GenerativeConfig")
PLANNERS.register_lazy("inner_monologue", "groundplan.planners.inner_monologue:make_inner_monologue",
                       config="groundplan.planners.inner_monologue:InnerMonologueConfig")
PLANNERS.register_lazy("zeroshot", "groundplan.planners.zeroshot:make_zeroshot", config="groundplan.planners.zeroshot:ZeroShotConfig")
PLANNERS.register_lazy("zeroshot_vanilla", "groundplan.planners.zeroshot:make_vanilla", config="groundplan.planners.zeroshot:VanillaConfig")
PLANNERS.register_lazy("open_loop", "groundplan.planners.open_loop:make_open_loop",
                       config="groundplan.planners.open_loop:OpenLoopConfig")
PLANNERS.register_lazy("saynav", "groundplan.planners.saynav:make_saynav", config="groundplan.planners.saynav:SayNavConfig")
PLANNERS.register_lazy("house_explore", "groundplan.planners.nav_baselines:make_explore",
                       config="groundplan.planners.nav_baselines:ExploreConfig")
PLANNERS.register_lazy("house_oracle", "groundplan.planners.nav_baselines:make_oracle",
                       config="groundplan.planners.nav_baselines:OracleConfig")
PLANNERS.register_lazy("saycanpay", "groundplan.planners.saycanpay:make_saycanpay",
                       config="groundplan.planners.saycanpay:SayCanPayConfig")
