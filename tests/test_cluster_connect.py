"""connect(): a local Ray is always our own, even where a `ray start` cluster runs on the machine."""
from __future__ import annotations

import pytest

ray = pytest.importorskip("ray")


def test_a_local_ray_never_joins_a_cluster_already_running_here(monkeypatch):
    """Without an address, ray.init() joins a cluster that `ray start` left on this machine, and then
    refuses num_cpus with a ValueError traceback (seen when `groundplan train` ran beside the test
    suite's Ray head). connect() must ask for a new local instance ("local") with its CPUs."""
    from groundplan.actors import cluster

    calls = []
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kw: calls.append(kw))
    assert cluster.connect(None, cpus_needed=5) is True
    assert calls[0]["address"] == "local" and calls[0]["num_cpus"] >= 5

    calls.clear()
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")  # an address given: join it, with no CPU count
    cluster.connect(None)
    assert calls[0]["address"] == "10.0.0.1:6379" and "num_cpus" not in calls[0]
