"""A synchronous LanguageModel over scorer actor handles, so planners run unchanged inside actors.

``RemoteLM`` satisfies :class:`~groundplan.llm.base.LanguageModel` over one or more ``LLMScorer``
handles (round-robin over replicas), blocking on ``ray.get``. ``run_episode`` records any exception from
the env or planner as the episode's error; an actor that *died* is infrastructure failure, not evidence
about the planner, so the wrapper remembers it in ``actor_error`` and the episode worker raises
instead of returning the trace, which makes the sweep driver rerun the episode.
"""
from __future__ import annotations

import itertools
import threading
from typing import Any

from groundplan.actors.pool import classify_ray_error
from groundplan.llm.client import HostClient


class ActorGuard:
    """Calls ``ray.get`` and remembers the first actor death it saw (``actor_error``): the capability an
    episode worker reads, declared by subclassing, to tell an infrastructure fault from the planner's."""

    def __init__(self, timeout_s: float | None = None) -> None:
        self.actor_error: BaseException | None = None
        self.timeout_s = timeout_s

    def _get(self, ref: Any) -> Any:
        import ray

        try:
            return ray.get(ref, timeout=self.timeout_s)
        except Exception as exc:
            if self.actor_error is None and classify_ray_error(exc).kind == "actor":
                self.actor_error = exc
            raise


class RemoteLM(ActorGuard, HostClient):
    """A LanguageModel over scorer actor handles. ``handles`` may be one handle or a list of replicas.

    Make one per episode (it is cheap) so an actor death is attributed to the right episode; the
    round-robin counter can be shared by passing ``counter``.
    """

    def __init__(self, handles: Any, name: str | None = None, *, counter: Any = None, timeout_s: float | None = None) -> None:
        super().__init__(timeout_s)
        import ray

        self.handles = list(handles) if isinstance(handles, (list, tuple)) else [handles]
        if not self.handles:
            raise ValueError("RemoteLM needs at least one scorer handle")
        self._rr = counter if counter is not None else itertools.count()
        self._lock = threading.Lock()
        self.name = name if name is not None else ray.get(self.handles[0].get_name.remote())

    def _next(self) -> Any:
        with self._lock:
            return self.handles[next(self._rr) % len(self.handles)]

    def _submit(self, method: str, *args: Any) -> Any:
        return getattr(self._next(), method).remote(*args)

    def _result(self, pending: Any) -> Any:
        return self._get(pending)
