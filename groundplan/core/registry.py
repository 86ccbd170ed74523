"""Named registries, one per plugin kind (env, planner, LLM backend, affordance source).

Configs name plugins by string; a registry turns the string into the factory and, when the name is
unknown, raises an error that lists every valid name (habitat-lab / LeRobot style).

Plugins are declared lazily as ``"module:attribute"`` so that listing names imports nothing, a
plugin's heavy or optional dependencies (pybullet, virtualhome) load only when it is used, and a
missing optional dependency gives an install hint instead of breaking ``import groundplan``.

Installed packages add names through the ``groundplan.plugins`` entry points
(:mod:`groundplan.core.plugins`), loaded at the first lookup of any registry; each name remembers the
plugin that registered it (:meth:`Registry.origin`), and a plugin may not take a name groundplan has.
"""
from __future__ import annotations

import importlib
from typing import Any, Callable, Generic, Iterator, TypeVar

from groundplan.core import plugins as loader
from groundplan.core.errors import MissingDependencyError, UnknownNameError

T = TypeVar("T")


class Registry(Generic[T]):
    """A string → factory map for one plugin kind.

    ``plugins``: whether a lookup first loads the installed plugins (:func:`groundplan.core.plugins.ensure_loaded`).
    A registry that is looked up while groundplan's own modules import (the measures, checked as each is
    declared) passes False, since a plugin's ``register`` imports those modules; a plugin still registers
    into it, from its ``register``."""

    def __init__(self, kind: str, plugins: bool = True) -> None:
        self.kind = kind
        self._plugins = plugins
        self._items: dict[str, T | str] = {}
        self._install: dict[str, str] = {}
        self._configs: dict[str, Any] = {}
        self._origins: dict[str, loader.Plugin] = {}

    def _claim(self, name: str) -> None:
        """Refuse a second registration of ``name``, worded by who holds it; record the registering plugin."""
        if name in self._items:
            holder, plugin = self._origins.get(name), loader.current()
            if plugin is not None and holder is None:
                raise ValueError(f"{self.kind} '{name}' is built into groundplan; a plugin cannot replace it: register "
                                 "yours under another name")
            raise ValueError(f"{self.kind} '{name}' is registered twice" + (f" (first by {holder})" if holder else ""))
        plugin = loader.current()
        if plugin is not None:
            self._origins[name] = plugin

    def register(self, name: str, config: type | str | None = None) -> Callable[[T], T]:
        """Decorator: ``@ENVS.register("kitchen", config=KitchenConfig)`` above a class or factory function.
        ``config``: the plugin's typed options (a pydantic model or ``"module:Class"``), as for
        :meth:`register_lazy`."""

        def deco(obj: T) -> T:
            if self._items.get(name) is not obj:
                self._claim(name)
                self._items[name] = obj
                if config is not None:
                    self._configs[name] = config
            return obj

        return deco

    def register_lazy(self, name: str, target: str, install: str | None = None, config: str | None = None) -> None:
        """Declare ``name`` → ``"package.module:attribute"``, imported on first :meth:`get`.
        ``install`` is the command that installs the plugin's optional dependencies; ``config`` names the
        plugin's typed options (a pydantic model, ``"module:Class"``), which configs are validated
        against when they are loaded, before anything is built (LeRobot's configuration classes)."""
        self._claim(name)
        self._items[name] = target
        if install:
            self._install[name] = install
        if config:
            self._configs[name] = config

    def _resolve(self, name: str, target: str) -> Any:
        module, _, attr = target.partition(":")
        try:
            return getattr(importlib.import_module(module), attr)
        except ImportError as e:
            hint = self._install.get(name, "check the install")
            raise MissingDependencyError(
                f"{self.kind} '{name}' needs a package that is not installed ({e}); install it with: {hint}"
            ) from e

    def _load_plugins(self) -> None:
        if self._plugins:
            loader.ensure_loaded()

    def _require(self, name: str) -> T | str:
        self._load_plugins()
        try:
            return self._items[name]
        except KeyError:
            raise UnknownNameError(
                f"unknown {self.kind} '{name}'; valid {self.kind} names: {', '.join(sorted(self._items))}"
            ) from None

    def get(self, name: str) -> T:
        item = self._require(name)
        if isinstance(item, str):
            item = self._resolve(name, item)
            self._items[name] = item
        return item  # type: ignore[return-value]

    def config_class(self, name: str) -> Any:
        """The typed options class registered for ``name``, or None when it declares none."""
        self._require(name)
        cls = self._configs.get(name)
        if isinstance(cls, str):
            cls = self._configs[name] = self._resolve(name, cls)
        return cls

    def names(self) -> list[str]:
        self._load_plugins()
        return sorted(self._items)

    def origin(self, name: str) -> loader.Plugin | None:
        """The installed plugin that registered ``name``; None for groundplan's own (and for names that
        code registers by importing a module, such as a test's fake backend)."""
        self._require(name)
        return self._origins.get(name)

    def __contains__(self, name: object) -> bool:
        self._load_plugins()
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        self._load_plugins()
        return iter(sorted(self._items))
