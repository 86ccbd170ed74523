"""Ray plumbing every job shares: joining a cluster or starting a local Ray (:func:`connect`), the local
workers' priority, waiting for actors to start without hanging, and summing the scorer replicas' stats.
Sweeps, collection and point-goal rollouts use these beside :class:`~groundplan.actors.pool.ActorPool`."""
from __future__ import annotations

import contextlib
import math
import os
from pathlib import Path
from typing import Any, Iterator

from groundplan.core.errors import InvalidInputError


def connect(address: str | None, cpus_needed: float = 0.0, log_to_driver: bool = False) -> bool:
    """Join a cluster (``address`` or RAY_ADDRESS) or start a local Ray of our own; True when we
    started or joined it (so the caller shuts it down).

    A local Ray gets at least ``cpus_needed`` logical CPUs: actors' ``num_cpus`` are scheduling
    reservations, and on a 2-core machine the default sweep (a 1-CPU scorer and 4 half-CPU runners) would
    otherwise leave runners unschedulable and the sweep waiting forever. ``log_to_driver`` forwards the
    workers' output (Ray Train's progress bars) to this process."""
    import ray

    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS") or None
    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": log_to_driver}
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
        return True
    ray.init(address=address, **kwargs)
    return True


@contextlib.contextmanager
def ray_session(address: str | None, cpus_needed: float = 0.0, log_to_driver: bool = False) -> Iterator[bool]:
    """:func:`connect` for the length of a ``with`` block, and ``ray.shutdown()`` after it when this
    process started or joined Ray (never a Ray someone else started in this process). Yields whether it
    did."""
    import ray

    started = connect(address, cpus_needed, log_to_driver)
    try:
        yield started
    finally:
        if started:
            ray.shutdown()


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


def merge_scorer_stats(per: list[dict[str, Any]]) -> dict[str, Any]:
    """One scorer's stats, or the replicas' summed (memo hit rate over all lookups) with each kept."""
    if len(per) == 1:
        return per[0]
    total = {k: sum(s.get(k, 0) for s in per) for k in ("requests", "batches", "options", "busy_s", "memo_hits",
                                                         "memo_lookups", "options_computed")}
    return {**total, "mean_batch_size": total["requests"] / total["batches"] if total["batches"] else 0.0,
            "options_per_s": total["options"] / total["busy_s"] if total["busy_s"] else 0.0,
            "memo_hit_rate": total["memo_hits"] / total["memo_lookups"] if total["memo_lookups"] else 0.0,
            "replicas": per}
