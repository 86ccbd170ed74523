"""Plugins without forking: installed packages that add envs, planners, affordance sources, LLM backends
(or datasets, experts, measures) through the ``groundplan.plugins`` entry-point group.

A package declares, in its ``pyproject.toml``::

    [project.entry-points."groundplan.plugins"]
    pantry = "groundplan_example_plugin:register"

and ``register`` is a function that takes no arguments and registers into the registries the same way the
built-ins do (``ENVS.register_lazy(name, "module:Class", config="module:Options")``), importing them itself.
Taking no arguments keeps this module in the bottom layer: it never imports the registries' packages, and
a plugin asks for exactly the ones it extends.

Why lazily, at the first lookup of any registry, and not at ``import groundplan``: importing groundplan
must not run third-party code (or pay for scanning the installed packages) in a process that never looks
a name up, and the first lookup is where a plugin's names are first needed, in the driver and in every Ray
worker alike (a worker finds the plugin the same way, as long as the package is installed on its node).

Why a broken plugin fails every lookup rather than being skipped: a sweep or a server that silently ran
without the env a config names, or with half a plugin registered, would fail later and further from the
cause. :class:`~groundplan.core.errors.PluginError` names the plugin, its distribution and the fix.
"""
from __future__ import annotations

import contextvars
import logging
import threading
from dataclasses import dataclass
from importlib import metadata
from typing import Callable, Iterable

from groundplan.core.errors import PluginError

log = logging.getLogger(__name__)

#: the entry-point group a package registers its plugin under
GROUP = "groundplan.plugins"


@dataclass(frozen=True)
class Plugin:
    """One entry point of :data:`GROUP`: its name, its ``"module:function"`` target and the installed
    distribution that declares it (None for an entry point made by hand)."""

    name: str
    target: str
    distribution: str | None = None
    version: str | None = None

    @classmethod
    def of(cls, entry_point: metadata.EntryPoint) -> "Plugin":
        dist = getattr(entry_point, "dist", None)
        return cls(entry_point.name, entry_point.value, dist.name if dist else None, dist.version if dist else None)

    @property
    def source(self) -> str:
        """The distribution, as ``groundplan list`` shows where a name comes from."""
        if self.distribution is None:
            return "an unknown distribution"
        return f"{self.distribution} {self.version}" if self.version else self.distribution

    def __str__(self) -> str:
        return f"plugin '{self.name}' (entry point '{self.name} = {self.target}' of {self.source})"


#: the plugin whose ``register`` is running, so a registry records where each name came from and can tell
#: a plugin that reuses a built-in name from groundplan registering its own
_current: contextvars.ContextVar[Plugin | None] = contextvars.ContextVar("groundplan_plugin", default=None)


def current() -> Plugin | None:
    """The plugin registering right now, None outside a plugin's ``register``."""
    return _current.get()


def installed() -> list[metadata.EntryPoint]:
    """The entry points of :data:`GROUP` in the installed distributions (on ``sys.path``)."""
    return list(metadata.entry_points(group=GROUP))


class PluginLoader:
    """Loads the plugins ``discover`` finds, once; later calls only report what failed.

    Thread-safe (a runner actor's envs look names up from several threads) and re-entrant (a plugin's
    ``register`` may look names up itself). ``discover`` is replaceable so tests can load a chosen set of
    entry points without installing them into the environment."""

    def __init__(self, discover: Callable[[], Iterable[metadata.EntryPoint]] = installed) -> None:
        self._discover = discover
        self._lock = threading.RLock()
        self._started = False
        self._loading = False
        self._seen: set[tuple[str | None, str, str]] = set()
        self._failures: list[tuple[str | None, str]] = []  # (distribution, what failed)
        #: the plugins registered so far, in load order
        self.loaded: list[Plugin] = []

    def ensure_loaded(self) -> None:
        """Load the installed plugins unless that was done; raise :class:`PluginError` if any failed."""
        with self._lock:
            if self._loading:  # a plugin's own lookup while it registers
                return
            if not self._started:
                self._started = True
                self._load_new()
            self._raise_failures()

    def refresh(self) -> list[Plugin]:
        """Load the plugins installed since the last scan (``pip install`` in a running interpreter,
        e.g. a notebook or a test session) and return them; the ones already loaded are not run again."""
        with self._lock:
            self._started = True
            before = len(self.loaded)
            self._load_new()
            self._raise_failures()
            return self.loaded[before:]

    def _load_new(self) -> None:
        self._loading = True
        try:
            try:
                found = list(self._discover())
            except Exception as exc:  # noqa: BLE001 - e.g. an installed package's unreadable metadata
                log.debug("listing the %s entry points failed", GROUP, exc_info=True)
                self._failures.append((None, f"the installed plugins could not be listed (entry-point group "
                                             f"'{GROUP}'): {type(exc).__name__}: {exc}"))
                return
            for entry_point in found:
                plugin = Plugin.of(entry_point)
                key = (plugin.distribution, plugin.name, plugin.target)
                if key in self._seen:
                    continue
                self._seen.add(key)
                error = self._load_one(entry_point, plugin)
                if error is None:
                    self.loaded.append(plugin)
                else:
                    self._failures.append((plugin.distribution, error))
        finally:
            self._loading = False

    @staticmethod
    def _load_one(entry_point: metadata.EntryPoint, plugin: Plugin) -> str | None:
        """Import and run one plugin's ``register``; the failure, worded for a user, or None."""
        token = _current.set(plugin)
        try:
            try:
                register = entry_point.load()
            except Exception as exc:  # noqa: BLE001 - any failure of third-party code is reported, not raised raw
                log.debug("%s failed to import", plugin, exc_info=True)  # the traceback, for `groundplan -v`
                return f"{plugin} failed to import: {type(exc).__name__}: {exc}"
            if not callable(register):
                return (f"{plugin} names an object of type {type(register).__name__}, not a function: point the entry "
                        "point at a function that takes no arguments and registers the plugin's parts")
            try:
                register()
            except Exception as exc:  # noqa: BLE001
                log.debug("%s failed to register", plugin, exc_info=True)
                return f"{plugin} failed to register: {type(exc).__name__}: {exc}"
            return None
        finally:
            _current.reset(token)

    def _raise_failures(self) -> None:
        if not self._failures:
            return
        dists = sorted({d for d, _ in self._failures if d})
        fix = f"`pip uninstall {' '.join(dists)}`" if dists else "remove its entry point"
        raise PluginError("; ".join(error for _, error in self._failures) + f". Fix the plugin, or uninstall it "
                          f"({fix}): groundplan does not run with a broken plugin installed, so that no config "
                          "runs without a part it names")


#: the loader every registry asks (tests may replace it with one over chosen entry points)
LOADER = PluginLoader()


def ensure_loaded() -> None:
    """Load the installed plugins on first call (every registry lookup calls this); raise
    :class:`PluginError` naming each plugin that failed."""
    LOADER.ensure_loaded()


def refresh() -> list[Plugin]:
    """Load plugins installed since the first lookup (see :meth:`PluginLoader.refresh`)."""
    return LOADER.refresh()


def loaded() -> list[Plugin]:
    """The plugins registered in this process so far (``groundplan list`` shows them)."""
    return list(LOADER.loaded)
