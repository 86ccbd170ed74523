"""Errors of the serving layer, each mapped to one HTTP status by :mod:`groundplan.serve.api`."""
from __future__ import annotations

from groundplan.core.errors import GroundplanError, NotFoundError

__all__ = ["NotFoundError", "RetryableError", "SessionConflictError", "SessionExpiredError", "SessionLimitError",
           "SessionNotFoundError"]


class SessionNotFoundError(NotFoundError):
    """No session with this id (never created, or deleted) → 404."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class SessionExpiredError(GroundplanError):
    """The session sat idle past ``limits.session_idle_s`` → 410."""


class SessionLimitError(GroundplanError):
    """Too many open sessions → 429."""


class SessionConflictError(GroundplanError):
    """The session is finished, over its step cap, or was stepped concurrently → 409."""


class RetryableError(GroundplanError):
    """A backend replica died mid-request; the request had no effect and can be sent again → 503."""
