"""RunnerGroup.connect(): a local Ray is always our own, even where a `ray start` cluster runs on the machine."""
from __future__ import annotations

import pytest

ray = pytest.importorskip("ray")


def test_a_local_ray_never_joins_a_cluster_already_running_here(monkeypatch):
    """Without an address, ray.init() joins a cluster that `ray start` left on this machine, and then
    refuses num_cpus with a ValueError traceback (seen when `groundplan train` ran beside the test
    suite's Ray head). The group must ask for a new local instance ("local") with its CPUs."""
    from groundplan.actors.group import RunnerGroup

    calls = []
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kw: calls.append(kw))
    assert RunnerGroup(cpus_needed=5).connect() is True
    assert calls[0]["address"] == "local" and calls[0]["num_cpus"] >= 5

    calls.clear()
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")  # an address given: join it, with no CPU count
    RunnerGroup().connect()
    assert calls[0]["address"] == "10.0.0.1:6379" and "num_cpus" not in calls[0]


def test_a_group_shuts_down_only_the_ray_it_started(monkeypatch):
    """A Ray this process had before the group (a test's, a notebook's) outlives the group; one the group
    started does not. Serve's group lets Ray pick where an address-less session goes, in Serve's namespace."""
    from groundplan.actors.group import RunnerGroup

    calls: list = []
    up = {"ray": False}

    def init(**kw):
        calls.append(kw)
        up["ray"] = True

    def shutdown():
        calls.append("shutdown")
        up["ray"] = False

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(ray, "is_initialized", lambda: up["ray"])
    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setattr(ray, "shutdown", shutdown)
    with RunnerGroup(cpus_needed=1) as group:
        assert group.started and up["ray"]
    assert calls[-1] == "shutdown" and not up["ray"]

    up["ray"] = True
    calls.clear()
    with RunnerGroup() as group:
        assert not group.started
    assert calls == [] and up["ray"]

    up["ray"] = False
    assert RunnerGroup(namespace="groundplan-serve", own_local=False).connect()
    assert calls == [{"address": None, "namespace": "groundplan-serve", "log_to_driver": False}]


def test_a_start_cut_short_is_still_the_groups_to_shut_down(monkeypatch):
    """A stop signal that reaches Ray's handler during ``ray.init`` (Serve's start-up) ends the start with
    SystemExit and may leave half a session up; the group that began it still shuts it down on close,
    while a group that found Ray up leaves it alone."""
    from groundplan.actors.group import RunnerGroup

    calls: list = []

    def init(**kw):
        calls.append("init")
        raise SystemExit(15)

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setattr(ray, "shutdown", lambda: calls.append("shutdown"))
    group = RunnerGroup(namespace="groundplan-serve", own_local=False)
    with pytest.raises(SystemExit):
        group.connect()
    assert group.started
    group.close()
    assert calls == ["init", "shutdown"] and not group.started

    calls.clear()
    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    group = RunnerGroup(namespace="groundplan-serve", own_local=False)
    assert group.connect() is False
    group.close()
    assert calls == []
