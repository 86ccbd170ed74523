"""Environments. ``ENVS.get(name)(**options)`` builds one; entries import their module on first use."""
from groundplan.core.registry import Registry

ENVS: Registry = Registry("env")
ENVS.register_lazy("kitchen", "groundplan.envs.kitchen.env:KitchenEnv")
ENVS.register_lazy("tabletop", "groundplan.envs.tabletop.env:TabletopEnv", install="pip install 'groundplan[tabletop]'")
ENVS.register_lazy("virtualhome", "groundplan.envs.virtualhome.env:VirtualHomeEnv", install="pip install --no-deps virtualhome-eval==0.1.1")
ENVS.register_lazy("house", "groundplan.envs.house.env:HouseEnv")
ENVS.register_lazy("thor_house", "groundplan.envs.house.thor:ThorHouseEnv", install="pip install ai2thor")
