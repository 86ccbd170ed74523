"""Grounding: everything that scores a skill's feasibility or value in the current state.

SayCan's calibrated affordances (``saycan``), the tabletop's detected-object affordance (``tabletop``),
VirtualHome's simulator preconditions (``virtualhome``), and Zero-Shot Planners' translation to
admissible actions (``action_index``, ``zeroshot``). Each paper's formulas live in the module named
after the paper. Each registered source declares at class level what it reads of the simulator's truth
(``declaration``, :mod:`groundplan.core.truth`), so a config's label and the tables' marks are known before
anything is built.
"""
from groundplan.core.registry import Registry

#: affordance-source factories by name: ``AFFORDANCES.get(name)(**options) -> AffordanceSource``
AFFORDANCES: Registry = Registry("affordance")
AFFORDANCES.register_lazy("kitchen_value", "groundplan.grounding.saycan:KitchenValueAffordance",
                          config="groundplan.grounding.saycan:KitchenValueConfig")
AFFORDANCES.register_lazy("kitchen_language_sim", "groundplan.grounding.saycan:LanguageSimAffordance",
                          config="groundplan.grounding.saycan:LanguageSimConfig")
AFFORDANCES.register_lazy("tabletop_detected", "groundplan.grounding.tabletop:DetectedObjectAffordance",
                          install="pip install 'groundplan[tabletop]'", config="groundplan.grounding.tabletop:DetectedObjectConfig")
AFFORDANCES.register_lazy("virtualhome_preconditions", "groundplan.grounding.virtualhome:PreconditionAffordance",
                          install="pip install --no-deps virtualhome-eval==0.1.1", config="groundplan.grounding.virtualhome:PreconditionConfig")
AFFORDANCES.register_lazy("saycanpay_learned", "groundplan.grounding.saycanpay:LearnedCanPay",
                          config="groundplan.grounding.canpay.config:LearnedCanPayOptions")
AFFORDANCES.register_lazy("saycanpay_oracle", "groundplan.grounding.saycanpay:OracleCanPay",
                          config="groundplan.grounding.canpay.config:OracleCanPayOptions")
