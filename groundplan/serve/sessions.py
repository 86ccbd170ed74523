"""Closed-loop sessions: their state lives in one place, an append-only log per session.

A session is its creation request plus the log of (observation, feedback) events the client sent and
the decisions returned. Planner replicas keep live planner objects only as a cache: a replica that
does not hold a session (it restarted, or another replica served the last step) rebuilds the planner
by ``reset`` and replaying the logged events through ``next_step`` — planners score deterministically
(greedy LLM scoring, seeded sampling), so the replay reaches the same prompt and history. In Ray
Serve the store is one named, detached actor (:func:`session_store_handle`), so the log survives any
planner or ingress replica restart (not the loss of the store actor itself, which holds it in memory).

:class:`SessionStore` is a plain class (tested without Ray); the actor wraps it unchanged.
"""
from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from groundplan.serve.errors import (
    SessionConflictError,
    SessionExpiredError,
    SessionLimitError,
    SessionNotFoundError,
)

#: how many ids of expired sessions are remembered, to answer 410 rather than 404
_EXPIRED_MEMORY = 4096


@dataclass
class SessionRecord:
    session_id: str
    planner: str
    env: str
    instruction: str
    seed: int
    skills: list[str]
    events: list[dict[str, Any]] = field(default_factory=list)  # {"observation": {...}, "feedback": {...}|None}
    decisions: list[dict[str, Any]] = field(default_factory=list)  # {"skill": str, "done": bool}
    done: bool = False
    created: float = 0.0
    last_used: float = 0.0


class SessionStore:
    """Bounded in number (``max_sessions``) and idle time (``idle_s``); expired ids answer
    :class:`SessionExpiredError`, unknown ones :class:`SessionNotFoundError`."""

    def __init__(self, max_sessions: int, idle_s: float, max_steps: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_sessions = max_sessions
        self.idle_s = idle_s
        self.max_steps = max_steps
        self._clock = clock
        self._sessions: dict[str, SessionRecord] = {}
        self._expired: dict[str, float] = {}
        self._lock = threading.Lock()

    def _sweep(self, now: float) -> None:
        for sid, rec in list(self._sessions.items()):
            if now - rec.last_used > self.idle_s:
                del self._sessions[sid]
                self._expired[sid] = now
        while len(self._expired) > _EXPIRED_MEMORY:
            self._expired.pop(next(iter(self._expired)))

    def create(self, planner: str, env: str, instruction: str, seed: int, skills: list[str]) -> SessionRecord:
        with self._lock:
            now = self._clock()
            self._sweep(now)
            if len(self._sessions) >= self.max_sessions:
                raise SessionLimitError(f"too many open sessions ({self.max_sessions}); delete one "
                                        f"(DELETE /v1/sessions/{{id}}) or wait {self.idle_s:.0f} s for idle ones to expire")
            rec = SessionRecord(uuid.uuid4().hex, planner, env, instruction, seed, list(skills), created=now, last_used=now)
            self._sessions[rec.session_id] = rec
            return rec

    def get(self, session_id: str) -> SessionRecord:
        """The record (a copy is what crosses Ray; in-process callers must not mutate it); touches it."""
        with self._lock:
            now = self._clock()
            self._sweep(now)
            rec = self._lookup(session_id)
            rec.last_used = now
            return rec

    def _lookup(self, session_id: str) -> SessionRecord:
        rec = self._sessions.get(session_id)
        if rec is not None:
            return rec
        if session_id in self._expired:
            raise SessionExpiredError(f"session {session_id} expired after {self.idle_s:.0f} s without a request; "
                                      "start a new one with POST /v1/sessions")
        raise SessionNotFoundError(f"no session {session_id!r}; create one with POST /v1/sessions")

    def append(self, session_id: str, index: int, event: dict[str, Any], decision: dict[str, Any]) -> SessionRecord:
        """Log step ``index``; refused when another step got there first (two clients stepping one session)."""
        with self._lock:
            now = self._clock()
            rec = self._lookup(session_id)
            if rec.done:
                raise SessionConflictError(f"session {session_id} is finished (the planner chose done); start a new one")
            if index != len(rec.events):
                raise SessionConflictError(f"session {session_id} was stepped concurrently (step {index} vs "
                                           f"{len(rec.events)} logged); send one step at a time")
            if index >= self.max_steps:
                raise SessionConflictError(f"session {session_id} reached its cap of {self.max_steps} steps")
            rec.events.append(event)
            rec.decisions.append(decision)
            rec.done = bool(decision.get("done"))
            rec.last_used = now
            return rec

    def delete(self, session_id: str) -> None:
        with self._lock:
            self._lookup(session_id)
            del self._sessions[session_id]

    def count(self) -> int:
        with self._lock:
            self._sweep(self._clock())
            return len(self._sessions)


#: the store actor's name and namespace (one per Serve application name)
STORE_NAMESPACE = "groundplan-serve"


def session_store_handle(app_name: str, max_sessions: int, idle_s: float, max_steps: int) -> Any:
    """The named detached store actor of ``app_name``, created on first use (any replica may be first)."""
    import ray

    actor = ray.remote(num_cpus=0, max_concurrency=1)(SessionStore)
    return actor.options(name=f"sessions-{app_name}", namespace=STORE_NAMESPACE, lifetime="detached",
                         get_if_exists=True).remote(max_sessions, idle_s, max_steps)
