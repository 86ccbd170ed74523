"""A fault-aware pool of Ray actors: one place for the rerun rules of sweeps, collection and rollouts.

Sweeps (episode runners), data collection (collect workers) and point-goal rollouts all hand a list of
independent items to a few actors and want each item's result once, in the driver, even if an actor dies
on the way. Each used to drive Ray by hand with its own retry rules; :class:`ActorPool` is the one
implementation, in the spirit of RLlib's ``FaultTolerantActorManager`` but small and without RLlib:

- every actor offers ``slots_per_actor`` concurrent calls (a threaded actor with several envs); at most
  ``max_in_flight`` calls run at once, and items start in the order given;
- :meth:`ActorPool.run` streams an :class:`Outcome` per item as it finishes, in the caller's thread (a
  generator over ``ray.wait``), so the caller alone writes results: no locks, no second thread;
- an item whose call failed for an *infrastructure* reason (the actor died or is restarting, its worker
  crashed, a node went away, no answer within ``call_timeout_s``) is rerun from its start on another slot,
  at most ``max_retries`` times, then reported failed with every error. An item's own exception
  (``RayTaskError``) is rerun only when ``retry_app_errors`` says so: a deterministic bug would fail the
  same way again, but some callers count any exception as infrastructure;
- the actor of an infrastructure failure is asked ``is_alive`` (when given): one Ray restarted
  (``max_restarts`` > 0) answers and keeps its slots; one that does not answer within ``probe_timeout_s``,
  or every failed actor when there is no ``is_alive``, is killed and replaced by a fresh one from
  ``make_actor``, and all its slots move to the replacement. Calls still out on the old handle are
  recognised when they fail and do not replace the new one;
- :meth:`ActorPool.close` (or leaving the ``with`` block) kills every actor without waiting on them.
"""
from __future__ import annotations

import logging
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, TypeVar

if TYPE_CHECKING:
    from ray import ObjectRef
    from ray.actor import ActorHandle

log = logging.getLogger(__name__)

T = TypeVar("T")

#: ``on_failure(item, error, attempt, will_retry)``: called in the driver after each failed attempt
OnFailure = Callable[[Any, BaseException, int, bool], None]


class CallTimeoutError(TimeoutError):
    """A call gave no answer within the pool's ``call_timeout_s``; its actor is treated as hung."""


class RayFailure(NamedTuple):
    """How a Ray call failed (:func:`classify_ray_error`)."""

    kind: str  # "app", "actor" or "other"
    cause: BaseException  # for "app" the exception raised inside the call (when Ray kept it), else the error itself


def classify_ray_error(exc: BaseException) -> RayFailure:
    """The one reading of a failed Ray call, shared by the pool, the scorer clients and Serve's handles,
    so a failure means the same to each of them:

    - ``"actor"``: the actor (a scorer, a worker, a Serve replica) died, is restarting or unreachable, or
      its worker process crashed: infrastructure, and the call had no effect, so it can be sent again.
      This holds also when the call's own code raised such an error (it called an actor that died);
    - ``"app"``: the call's own code raised; Ray raises it as a ``RayTaskError`` (a class derived from
      both ``RayTaskError`` and the cause), and ``cause`` is the exception raised inside;
    - ``"other"``: anything else (a ``ray.get`` timeout, a lost object, a plain exception)."""
    from ray.exceptions import RayActorError, RayTaskError, WorkerCrashedError

    if isinstance(exc, (RayActorError, WorkerCrashedError)):
        return RayFailure("actor", exc)
    if isinstance(exc, RayTaskError):
        return RayFailure("app", exc.cause if exc.cause is not None else exc)
    return RayFailure("other", exc)


def is_app_error(exc: BaseException) -> bool:
    """True when the item's own code raised, False for anything the infrastructure did (:func:`classify_ray_error`)."""
    return classify_ray_error(exc).kind == "app"


def error_text(exc: BaseException) -> str:
    """``Type: first line of the message``: short enough for a log line or a failed record."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"


@dataclass
class Outcome(Generic[T]):
    """One item's end: its result, or the error of every attempt (oldest first) when it failed."""

    index: int  # position in the items given to :meth:`ActorPool.run`
    item: T
    ok: bool
    value: Any = None
    errors: list[BaseException] = field(default_factory=list)  # also the failures before a successful rerun


@dataclass
class PoolStats:
    """What the faults cost, summed over every :meth:`ActorPool.run` of the pool."""

    reruns: int = 0
    rerun_items: list[Any] = field(default_factory=list)  # one entry per rerun, so an item may repeat
    failed_after_retries: int = 0
    actors_replaced: int = 0


@dataclass
class _Call:
    index: int
    item: Any
    slot: int  # the actor's position; the handle there may change when the actor is replaced
    actor: Any  # the handle the call went to
    deadline: float | None


class ActorPool:
    """A fixed number of actors, each with ``slots_per_actor`` concurrent calls; see the module docstring.

    ``make_actor()`` starts one actor (it is called ``size`` times here, and once per replacement);
    ``is_alive(actor)`` returns an ObjectRef that resolves when the actor answers (e.g. a ``ping``
    method); without it a failed actor is always replaced, which suits actors with ``max_restarts=0``."""

    def __init__(self, make_actor: Callable[[], ActorHandle], size: int, *, slots_per_actor: int = 1,
                 max_in_flight: int | None = None, max_retries: int = 0, retry_app_errors: bool = False,
                 call_timeout_s: float | None = None, is_alive: Callable[[ActorHandle], ObjectRef] | None = None,
                 probe_timeout_s: float = 60.0) -> None:
        if size < 1 or slots_per_actor < 1:
            raise ValueError(f"an actor pool needs at least one actor and one slot (size={size}, "
                             f"slots_per_actor={slots_per_actor})")
        self.make_actor = make_actor
        self.slots_per_actor = slots_per_actor
        self.max_in_flight = max(1, min(max_in_flight or size * slots_per_actor, size * slots_per_actor))
        self.max_retries = max_retries
        self.retry_app_errors = retry_app_errors
        self.call_timeout_s = call_timeout_s
        self.is_alive = is_alive
        self.probe_timeout_s = probe_timeout_s
        self.stats = PoolStats()
        self._actors: list[Any] = []
        self._closed = False
        try:
            for _ in range(size):
                self._actors.append(make_actor())
        except BaseException:
            self.close()
            raise
        self._free = self._all_slots()
        self._probing: Counter[int] = Counter()  # actor position -> its slots parked until the probe ends

    def _all_slots(self) -> deque[int]:
        """Slots round-robin over the actors (a0, a1, a0, a1, ...), so the first calls spread over all."""
        return deque(i for _ in range(self.slots_per_actor) for i in range(len(self._actors)))

    @property
    def actors(self) -> list[Any]:
        """The live actor handles (a copy): a replaced actor's successor stands where it stood."""
        return list(self._actors)

    def __enter__(self) -> ActorPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Kill every actor without waiting for its calls; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        for actor in self._actors:
            _kill(actor)

    def run(self, items: Iterable[T], call: Callable[[Any, T], ObjectRef],
            on_failure: OnFailure | None = None) -> Iterator[Outcome[T]]:
        """Run ``call(actor, item)`` for every item and yield its :class:`Outcome` as it finishes.

        Items start in order; a rerun goes before the items not started yet. ``on_failure(item, error,
        attempt, will_retry)`` is called after each failed attempt (for the caller's log lines and live
        counters). The generator runs in the caller's thread; stopping it early gives every slot back (a call
        still running on an actor only delays the next ones sent there)."""
        import ray

        if self._closed:
            raise RuntimeError("the actor pool is closed")
        pending: deque[tuple[int, T]] = deque(enumerate(items))
        errors: dict[int, list[BaseException]] = {}
        calls: dict[Any, _Call] = {}
        probes: dict[Any, tuple[int, Any, float]] = {}  # ref -> (position, handle, deadline)
        done: deque[Outcome[T]] = deque()

        def start() -> None:
            while pending and self._free and len(calls) < self.max_in_flight:
                slot = self._free.popleft()
                if self._probing[slot]:  # its actor is being asked whether it lives: wait for the answer
                    self._probing[slot] += 1
                    continue
                index, item = pending.popleft()
                actor = self._actors[slot]
                deadline = None if self.call_timeout_s is None else time.monotonic() + self.call_timeout_s
                calls[call(actor, item)] = _Call(index, item, slot, actor, deadline)

        def failed(c: _Call, exc: BaseException) -> None:
            errs = errors.setdefault(c.index, [])
            errs.append(exc)
            app = is_app_error(exc)
            will_retry = (not app or self.retry_app_errors) and len(errs) <= self.max_retries
            if on_failure is not None:
                on_failure(c.item, exc, len(errs), will_retry)
            else:
                log.warning("item %d: %s (attempt %d of %d)", c.index, error_text(exc), len(errs), self.max_retries + 1)
            if will_retry:
                self.stats.reruns += 1
                self.stats.rerun_items.append(c.item)
                pending.appendleft((c.index, c.item))
            else:
                self.stats.failed_after_retries += 1
                done.append(Outcome(c.index, c.item, ok=False, errors=errors.pop(c.index)))
            if app:  # the actor answered: it is fine
                self._free.append(c.slot)
            else:
                suspect(c.slot, c.actor, exc)

        def suspect(slot: int, actor: Any, exc: BaseException) -> None:
            """The actor at ``slot`` failed a call: keep it if it answers, else replace it."""
            if self._actors[slot] is not actor or self._probing[slot]:  # replaced already, or being asked
                self._park_or_free(slot)
                return
            if self.is_alive is None:
                self._replace(slot, error_text(exc))
                self._free.append(slot)
                return
            probes[self.is_alive(actor)] = (slot, actor, time.monotonic() + self.probe_timeout_s)
            self._probing[slot] = 1

        def probed(ref: Any, answered: bool, why: str) -> None:
            slot, actor, _ = probes.pop(ref)
            if answered:
                log.info("actor %d answers again (Ray restarted it); keeping it", slot)
            elif self._actors[slot] is actor:
                self._replace(slot, why)
            self._free.extend([slot] * self._probing.pop(slot))

        start()
        try:
            while calls or probes:
                now = time.monotonic()
                deadlines = [c.deadline for c in calls.values() if c.deadline is not None]
                deadlines += [d for _, _, d in probes.values()]
                timeout = max(0.0, min(deadlines) - now) if deadlines else None
                ready, _ = ray.wait([*calls, *probes], num_returns=1, timeout=timeout)
                for ref in ready:
                    if ref in probes:
                        try:
                            ray.get(ref)
                            probed(ref, True, "")
                        except Exception as exc:
                            probed(ref, False, error_text(exc))
                        continue
                    c = calls.pop(ref)
                    try:
                        value = ray.get(ref)
                    except Exception as exc:
                        failed(c, exc)
                    else:
                        self._free.append(c.slot)
                        done.append(Outcome(c.index, c.item, ok=True, value=value, errors=errors.pop(c.index, [])))
                now = time.monotonic()
                for ref, c in [(r, c) for r, c in calls.items() if c.deadline is not None and c.deadline <= now]:
                    del calls[ref]  # the call may still finish on the actor; its answer is dropped
                    failed(c, CallTimeoutError(f"no answer within {self.call_timeout_s:g} s"))
                for ref in [r for r, (_, _, d) in probes.items() if d <= now]:
                    probed(ref, False, f"no answer to is_alive within {self.probe_timeout_s:g} s")
                start()  # refill before handing results over: the actors work while the caller writes
                while done:
                    yield done.popleft()
        finally:
            if calls or probes:  # the caller stopped early: no slot may stay lent to an abandoned call
                self._probing.clear()
                self._free = self._all_slots()
        if pending:  # cannot happen while every slot is free, in a call or parked behind a probe
            raise RuntimeError(f"actor pool stopped with {len(pending)} items not started")

    def _park_or_free(self, slot: int) -> None:
        if self._probing[slot]:
            self._probing[slot] += 1
        else:
            self._free.append(slot)

    def _replace(self, slot: int, why: str) -> None:
        """Kill the actor at ``slot`` (Ray must not restart it behind our back) and start a fresh one there."""
        log.warning("actor %d is gone (%s); starting a new one", slot, why)
        _kill(self._actors[slot])
        self._actors[slot] = self.make_actor()
        self.stats.actors_replaced += 1


def _kill(actor: Any) -> None:
    import ray

    try:
        ray.kill(actor, no_restart=True)
    except Exception:  # already gone, or Ray is shutting down: nothing left to stop
        pass


class FunctionActor:
    """Runs plain functions, so work written as Ray tasks can be driven by an :class:`ActorPool` (its
    reruns and replacement) instead of Ray's task retries."""

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    def ping(self) -> bool:
        return True


def function_actor_factory(num_cpus: float = 1.0, **options: Any) -> Callable[[], ActorHandle]:
    """``make_actor`` for a pool of :class:`FunctionActor`; ``num_cpus`` 1 reserves what a Ray task would."""
    import ray

    remote = ray.remote(FunctionActor).options(num_cpus=num_cpus, max_restarts=0, **options)
    return remote.remote
