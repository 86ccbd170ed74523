"""The runner group: the one owner of a job's Ray session, its scorer replicas and its episode workers.

Modelled on RLlib's ``EnvRunnerGroup``. Every job that uses Ray (sweeps, collection, Ray Train, RLlib,
Serve) gets its session from :meth:`RunnerGroup.connect`, and only a group that started or joined Ray
shuts it down, so a Ray someone else started in this process (a test's, a notebook's) is never taken
away, and how a local Ray is started (its CPUs, its workers' priority, the checkout on the workers'
path) is decided in one place. This module is the only one that calls ``ray.init`` or ``ray.shutdown``.

A group also starts the jobs' actors and kills them when it closes: the LLM scorer replicas
(:meth:`add_scorers`) and one :class:`~groundplan.actors.pool.ActorPool` of
:class:`~groundplan.actors.worker.EpisodeWorker` actors (:meth:`add_workers`), which :meth:`run`
drives. A *local* group touches no Ray: it builds one worker in this process and plays the items one
after another on it, so the choice between this process and Ray is made here, once, and both run the
same worker.
"""
from __future__ import annotations

import contextlib
import itertools
import logging
import math
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from groundplan.actors.pool import ActorPool, OnFailure, Outcome
from groundplan.actors.worker import EpisodeWorker, WorkerSpec
from groundplan.config import RuntimeSpec
from groundplan.core.errors import InvalidInputError

log = logging.getLogger(__name__)


class RunnerGroup:
    """A job's Ray session, scorers and workers (see the module docstring); use it as a context manager.

    ``address``: a cluster to join (default: ``RAY_ADDRESS``, else a local Ray of our own with at least
    ``cpus_needed`` logical CPUs). ``log_to_driver`` forwards the workers' output (Ray Train's progress
    bars). ``namespace`` names the Ray namespace (Serve's). ``own_local=False`` lets Ray itself pick where
    an address-less session goes (a cluster running on this machine, else a new one with its dashboard),
    as Serve wants. ``start_timeout_s`` bounds the wait for actors to be placed. ``include_dashboard``
    starts Ray's dashboard with a local Ray (a benchmark that watches the cluster; Ray Train,
    whose placement-group cleaner polls the state API the dashboard serves and warns every second without it)."""

    def __init__(self, *, local: bool = False, address: str | None = None, cpus_needed: float = 0.0,
                 log_to_driver: bool = False, namespace: str | None = None, own_local: bool = True,
                 start_timeout_s: float | None = None, include_dashboard: bool = False) -> None:
        self.local = local
        self.address = address
        self.cpus_needed = cpus_needed
        self.log_to_driver = log_to_driver
        self.namespace = namespace
        self.own_local = own_local
        self.start_timeout_s = start_timeout_s
        self.include_dashboard = include_dashboard
        self.started = False  # this group started or joined Ray, so it shuts it down
        self._actors: list[Any] = []  # scorers and helpers, killed on close
        self._pool: ActorPool | None = None
        self._local_worker: EpisodeWorker | None = None

    @classmethod
    def for_runtime(cls, rt: RuntimeSpec, cpus_needed: float) -> RunnerGroup:
        """The group a ``runtime:`` section asks for (a sweep's or a collection's): local for ``executor:
        local``, else Ray at ``address`` with at least ``cpus_needed`` logical CPUs for its actors."""
        return cls(local=rt.executor == "local", address=rt.address, cpus_needed=cpus_needed,
                   start_timeout_s=rt.start_timeout_s)

    # ------------------------------------------------------------------ the Ray session
    def connect(self) -> bool:
        """Join the cluster or start a local Ray, unless this process has one already (or the group is
        local); True when this group did, and so shuts it down on :meth:`close`.

        The group counts as the session's owner from just before ``ray.init``: a start cut short (a stop
        signal that reaches Ray's handler while Serve's Ray starts) may have left half a session up, and
        :meth:`close` must still take it down."""
        if self.local or self.started:
            return self.started
        import ray

        if ray.is_initialized():
            return False
        self.started = True
        _connect(self.address, self.cpus_needed, self.log_to_driver, self.namespace, self.own_local,
                 self.include_dashboard)
        return True

    def __enter__(self) -> RunnerGroup:
        self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Kill the group's workers and actors, then shut Ray down if this group started or joined it."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        if self._actors:
            import ray

            for actor in self._actors:
                try:
                    ray.kill(actor)
                except Exception:  # already gone, or Ray is going down: nothing left to stop
                    pass
            self._actors = []
        self._local_worker = None
        if self.started:
            import ray

            self.started = False
            ray.shutdown()

    # ------------------------------------------------------------------ actors
    def add_scorers(self, n: int, **scorer_options: Any) -> list[Any]:
        """Start ``n`` LLM scorer replicas (``scorer_options`` go to
        :func:`~groundplan.actors.scorer.make_scorer_actor`) and wait until the first answers; returns
        their handles."""
        from groundplan.actors.scorer import make_scorer_actor

        scorers = [make_scorer_actor(**scorer_options) for _ in range(n)]
        self._actors += scorers
        wait_for_actors([scorers[0].get_name.remote()], "LLM scorer", self.start_timeout_s)
        return scorers

    def add_actor(self, actor: Any) -> Any:
        """Hand a helper actor (the affordance server) to the group, which kills it on close."""
        self._actors.append(actor)
        return actor

    def add_workers(self, spec: WorkerSpec, size: int, *, num_cpus: float = 1.0,
                    resources: dict[str, float] | None = None, max_restarts: int = 0,
                    max_in_flight: int | None = None, max_retries: int = 0, retry_app_errors: bool = False,
                    call_timeout_s: float | None = None, probe: bool = False, what: str | None = None) -> None:
        """The group's workers: ``size`` :class:`EpisodeWorker` actors built from ``spec`` (each with
        ``spec.envs`` concurrent calls) in an :class:`ActorPool` with the given rerun rules, or one worker
        in this process for a local group. ``max_restarts`` lets Ray restart a dead actor; ``probe`` asks
        a failed one for its ``info`` before replacing it (worth it only when Ray restarts actors).
        ``what`` names the workers in the error when they cannot be placed within ``start_timeout_s``;
        without it the group does not wait for them to start."""
        if self.local:
            self._local_worker = EpisodeWorker(spec)
            return
        import ray

        opts: dict[str, Any] = dict(num_cpus=num_cpus, max_restarts=max_restarts, max_task_retries=0,
                                    max_concurrency=max(1, spec.envs))
        if resources:
            opts["resources"] = resources
        remote = ray.remote(EpisodeWorker).options(**opts)
        ids = itertools.count()

        def make() -> Any:
            return remote.remote(spec, next(ids))

        self._pool = ActorPool(make, size, slots_per_actor=max(1, spec.envs), max_in_flight=max_in_flight,
                               max_retries=max_retries, retry_app_errors=retry_app_errors,
                               call_timeout_s=call_timeout_s, is_alive=(lambda w: w.info.remote()) if probe else None)
        if what is not None:
            wait_for_actors([w.info.remote() for w in self._pool.actors], what, self.start_timeout_s)

    @property
    def workers(self) -> list[Any]:
        """The live workers: actor handles (a replaced one's successor stands where it stood), or the one
        in-process worker of a local group."""
        if self._local_worker is not None:
            return [self._local_worker]
        return self._pool.actors if self._pool is not None else []

    def run(self, items: Iterable[Any], on_failure: OnFailure | None = None) -> Iterator[Outcome]:
        """Play every item once on the workers (``EpisodeWorker.run``) and yield its outcome as it
        finishes, in this thread. On Ray the pool's rerun rules apply; locally an item that raises is
        reported failed at once (nothing was lost that a rerun would recover)."""
        if self._local_worker is not None:
            yield from _run_here(self._local_worker, items, on_failure)
            return
        if self._pool is None:
            raise RuntimeError("the group has no workers: call add_workers first")
        yield from self._pool.run(items, lambda worker, item: worker.run.remote(item), on_failure=on_failure)


def pool_size(rt: RuntimeSpec, items: int) -> tuple[int, int]:
    """(worker actors, items in flight) that a ``runtime:`` section asks for a run of ``items`` items:
    ``rt.in_flight`` (default every env of every worker) but never more than the items, and no more workers
    than those need (a sweep's and a collection's workers are sized alike)."""
    in_flight = max(1, min(rt.in_flight or rt.workers * rt.envs_per_worker, items))
    return min(rt.workers, -(-in_flight // rt.envs_per_worker)), in_flight


def _run_here(worker: EpisodeWorker, items: Iterable[Any], on_failure: OnFailure | None) -> Iterator[Outcome]:
    for index, item in enumerate(items):
        try:
            value = worker.run(item)
        except Exception as exc:
            if on_failure is not None:
                on_failure(item, exc, 1, False)
            yield Outcome(index, item, ok=False, errors=[exc])
        else:
            yield Outcome(index, item, ok=True, value=value)


def wait_for_actors(refs: list[Any], what: str, timeout_s: float | None) -> list[Any]:
    """``ray.get`` the actors' first calls, failing clearly (not hanging) when the cluster cannot place
    them, e.g. it lacks the GPUs or custom resources they ask for."""
    import ray

    try:
        return ray.get(refs, timeout=timeout_s)
    except ray.exceptions.GetTimeoutError:
        raise InvalidInputError(
            f"the {what} did not start within {timeout_s:.0f} s: the cluster cannot place them "
            f"(available: {ray.available_resources()}; total: {ray.cluster_resources()}). Ask for fewer "
            "workers or scorers, or fewer CPUs/GPUs/resources per actor."
        ) from None


def _connect(address: str | None, cpus_needed: float, log_to_driver: bool, namespace: str | None = None,
             own_local: bool = True, include_dashboard: bool = False) -> None:
    """Join a cluster (``address`` or RAY_ADDRESS) or start a local Ray of our own, in a process without Ray.

    A local Ray gets at least ``cpus_needed`` logical CPUs: actors' ``num_cpus`` are scheduling
    reservations, and on a 2-core machine the default sweep (a 1-CPU scorer and 4 half-CPU runners) would
    otherwise leave runners unschedulable and the sweep waiting forever."""
    import ray

    kwargs: dict[str, Any] = {"log_to_driver": log_to_driver}
    if namespace is not None:
        kwargs["namespace"] = namespace
    if not own_local:
        ray.init(address=address, **kwargs)
        return
    kwargs["include_dashboard"] = include_dashboard
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address is None:
        # local Ray: actors must import groundplan (and test helpers) from this checkout
        root = str(Path(__file__).resolve().parents[2])
        env_vars = {"PYTHONPATH": os.pathsep.join(p for p in [root, os.environ.get("PYTHONPATH", "")] if p)}
        kwargs["runtime_env"] = {"env_vars": env_vars}
        kwargs["num_cpus"] = max(os.cpu_count() or 1, math.ceil(cpus_needed))
        with worker_niceness_for_local_ray():
            # "local": a new Ray of our own even when a `ray start` cluster runs on this machine, which
            # ray.init() without an address would join (and then refuse num_cpus with a traceback)
            ray.init(address="local", **kwargs)
        return
    ray.init(address=address, **kwargs)


@contextlib.contextmanager
def worker_niceness_for_local_ray() -> Iterator[None]:
    """Run a local Ray's workers at normal priority unless ``RAY_worker_niceness`` says otherwise.

    Ray starts every worker process at nice 15 so the driver stays responsive, which suits workers that
    are background helpers. Here the workers are the computation (the LLM scorer, the sims, the trainer):
    at nice 15 they lose the CPU to any normal-priority process on the machine, so a sweep beside another
    job runs far slower than the same sweep in one process, and a Ray Train worker beside an eval
    starved at about a fifth of a core (measured on this 2-core machine). Set before ``ray.init`` starts
    the raylet, which reads it; a cluster started with ``ray start`` keeps its own setting. Only the
    ``ray.init`` inside the block sees it: the variable is restored afterwards, so it does not leak into
    other Ray instances this process starts."""
    previous = os.environ.get("RAY_worker_niceness")
    os.environ.setdefault("RAY_worker_niceness", "0")
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("RAY_worker_niceness", None)
