"""Skill sets, affordance functions and learned grounding models."""
from groundplan.registry import Registry

#: affordance-source factories by name: ``AFFORDANCES.get(name)(**options) -> AffordanceSource``
AFFORDANCES: Registry = Registry("affordance")
AFFORDANCES.register_lazy("kitchen_value", "groundplan.envs.kitchen.affordance:KitchenValueAffordance")
AFFORDANCES.register_lazy("kitchen_language_sim", "groundplan.envs.kitchen.affordance:LanguageSimAffordance")
AFFORDANCES.register_lazy("tabletop_detected", "groundplan.envs.tabletop.affordance:DetectedObjectAffordance", install="pip install 'groundplan[tabletop]'")
AFFORDANCES.register_lazy("virtualhome_preconditions", "groundplan.envs.virtualhome.affordance:PreconditionAffordance", install="pip install --no-deps virtualhome-eval==0.1.1")
