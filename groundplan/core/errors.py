"""Error types users see. One base class so callers can catch everything groundplan raises on purpose."""
from __future__ import annotations


class GroundplanError(Exception):
    """Base class for errors caused by bad input or a missing install, with a message a user can act on."""


class UnknownNameError(GroundplanError, KeyError):
    """A registry was asked for a name it does not hold; the message lists the valid names."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class NotFoundError(GroundplanError, KeyError):
    """Nothing by this name (a session, a run of the viewer, a frame); an HTTP front end answers 404."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class InvalidInputError(GroundplanError, ValueError):
    """An instruction, option list, action or config value that cannot be used as given."""


class ConflictError(InvalidInputError):
    """Well-formed input naming things whose state rules it out (two runs that cannot be compared); an HTTP
    front end answers 409, as the request may succeed once that state changes."""


class MissingModelError(GroundplanError, RuntimeError):
    """An embedded model package is not installed; the message says how to install it."""


class MissingDependencyError(GroundplanError, ImportError):
    """A plugin's optional dependency is not installed; the message says which extra installs it."""


class InfrastructureError(GroundplanError, RuntimeError):
    """Something an episode depended on failed for good: an actor died, or an LLM server still failed
    after its retries. It says nothing about the planner, so an episode records it as an
    infrastructure failure (``EpisodeTrace.infrastructure_failure``), never as the planner's."""


class OracleAccessError(GroundplanError, RuntimeError):
    """A planner or grounding source read simulator truth (a task's goal, reference plan, metadata or start
    state, or the simulator state in an observation) that its declaration does not name. Reading truth is
    an oracle and must be declared (:mod:`groundplan.core.truth`), so the tables can mark the rows that did."""


class PluginError(GroundplanError, RuntimeError):
    """An installed plugin (a package's ``groundplan.plugins`` entry point) failed to import or to register,
    or tried to replace a name groundplan already has. The message names the plugin, its distribution and
    how to get rid of it, so a broken third-party package never shows up as a bare traceback."""
