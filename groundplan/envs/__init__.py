"""Environments and the datasets that come with them.

``ENVS.get(name)(**options)`` builds an env; ``DATASETS.get(name)(**options)`` returns a dataset's
records (e.g. VirtualHome's demonstration programs for few-shot prompts), so a planner takes examples
from a dataset by name instead of building an env. Entries import their module on first use.
"""
from groundplan.core.registry import Registry

ENVS: Registry = Registry("env")
ENVS.register_lazy("kitchen", "groundplan.envs.kitchen.env:KitchenEnv", config="groundplan.envs.kitchen.env:KitchenConfig")
ENVS.register_lazy("tabletop", "groundplan.envs.tabletop.env:TabletopEnv", install="pip install 'groundplan[tabletop]'",
                   config="groundplan.envs.tabletop.env:TabletopConfig")
ENVS.register_lazy("virtualhome", "groundplan.envs.virtualhome.env:VirtualHomeEnv",
                   install="pip install --no-deps virtualhome-eval==0.1.1", config="groundplan.envs.virtualhome.env:VirtualHomeConfig")

#: datasets by name: ``DATASETS.get(name)(**options) -> list of records``
DATASETS: Registry = Registry("dataset")
DATASETS.register_lazy("virtualhome", "groundplan.envs.virtualhome.env:load_demonstrations",
                       install="pip install --no-deps virtualhome-eval==0.1.1", config="groundplan.envs.virtualhome.env:VirtualHomeConfig")
ENVS.register_lazy("house", "groundplan.envs.house.env:HouseEnv", config="groundplan.envs.house.options:HouseConfig")
ENVS.register_lazy("thor_house", "groundplan.envs.house.thor:ThorHouseEnv", install="pip install 'groundplan[thor]'",
                   config="groundplan.envs.house.options:ThorHouseConfig")
ENVS.register_lazy("babyai", "groundplan.envs.babyai.env:BabyAIEnv", install="pip install 'groundplan[babyai]'",
                   config="groundplan.envs.babyai.options:BabyAIConfig")
ENVS.register_lazy("hanoi", "groundplan.envs.tabletop.hanoi:HanoiEnv", install="pip install 'groundplan[tabletop]'",
                   config="groundplan.envs.tabletop.ravens_options:HanoiConfig")
ENVS.register_lazy("blocks_bowls", "groundplan.envs.tabletop.blocks_bowls:BlocksBowlsEnv",
                   install="pip install 'groundplan[tabletop]'", config="groundplan.envs.tabletop.ravens_options:BlocksBowlsConfig")
ENVS.register_lazy("virtualhome_scp", "groundplan.envs.virtualhome.saycanpay:SayCanPayVirtualHome",
                   install="pip install --no-deps virtualhome-eval==0.1.1",
                   config="groundplan.envs.virtualhome.saycanpay:SayCanPayVirtualHomeConfig")
ENVS.register_lazy("virtualhome_eai", "groundplan.envs.virtualhome.eai.env:EAIVirtualHomeEnv",
                   install="pip install --no-deps virtualhome-eval==0.1.1",
                   config="groundplan.envs.virtualhome.eai.env:EAIEnvConfig")
