"""Environments. ``ENVS.get(name)(**options)`` builds one; entries import their module on first use."""
from groundplan.core.registry import Registry

ENVS: Registry = Registry("env")
ENVS.register_lazy("kitchen", "groundplan.envs.kitchen.env:KitchenEnv")
ENVS.register_lazy("tabletop", "groundplan.envs.tabletop.env:TabletopEnv", install="pip install 'groundplan[tabletop]'")
ENVS.register_lazy("virtualhome", "groundplan.envs.virtualhome.env:VirtualHomeEnv", install="pip install --no-deps virtualhome-eval==0.1.1")
ENVS.register_lazy("babyai", "groundplan.envs.babyai.env:BabyAIEnv", install="pip install 'groundplan[babyai]'")
ENVS.register_lazy("hanoi", "groundplan.envs.tabletop.hanoi:HanoiEnv", install="pip install 'groundplan[tabletop]'")
ENVS.register_lazy("blocks_bowls", "groundplan.envs.tabletop.blocks_bowls:BlocksBowlsEnv",
                   install="pip install 'groundplan[tabletop]'")
ENVS.register_lazy("virtualhome_scp", "groundplan.envs.virtualhome.saycanpay:SayCanPayVirtualHome",
                   install="pip install --no-deps virtualhome-eval==0.1.1")
