"""Environments. ``ENVS.get(name)(**options)`` builds one; importing this package registers them."""
from groundplan.registry import Registry

ENVS: Registry = Registry("env")

from groundplan.envs import kitchen  # noqa: E402,F401  (registers "kitchen")
