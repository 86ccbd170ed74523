"""The fault-aware actor pool (groundplan/actors/pool.py) on a local Ray: every item's outcome exactly once
and as it finishes; an actor that dies mid-item is replaced and the item rerun; an item that keeps killing
its actor fails after its retries with every error; an item's own exception is retried only when asked;
calls that never answer time out; nothing hangs when the actors are gone."""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from groundplan.actors.pool import ActorPool, CallTimeoutError, is_app_error

ray = pytest.importorskip("ray")
# the workers cannot import this test module by name: ship the actor class by value
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


class Worker:
    """Plays items ``"<kind>:<n>"``; ``folder`` holds the markers and gates the kinds use."""

    def __init__(self, folder: str, fail_init: bool = False) -> None:
        if fail_init:
            raise RuntimeError("this worker cannot start")
        self.folder = Path(folder)
        self.lock = threading.Lock()
        self.inside = 0
        self.peak = 0

    def ping(self) -> int:
        return os.getpid()

    def peak_calls(self) -> int:
        return self.peak

    def run(self, item: str) -> tuple[str, int]:
        with self.lock:
            self.inside += 1
            self.peak = max(self.peak, self.inside)
        try:
            return self._run(item)
        finally:
            with self.lock:
                self.inside -= 1

    def _run(self, item: str) -> tuple[str, int]:
        kind, _ = item.split(":")
        marker = self.folder / f"started-{item}"
        first = not marker.exists()
        if kind == "hold-once" and first:  # says where it runs, then waits (for the gate or its killer)
            written = marker.with_name(f"writing-{item}")
            written.write_text(str(os.getpid()))
            written.replace(marker)  # appears whole: a watcher never reads an empty pid
            self._wait_for(self.folder / "gate")
        elif kind == "gate":
            if not self._wait_for(self.folder / "gate"):
                return "gave up waiting", os.getpid()
        elif kind == "nap":
            time.sleep(0.2)
        elif kind == "die":
            os._exit(1)
        elif kind == "raise":
            raise ValueError(f"{item} is bad")
        elif kind == "raise-once" and first:
            marker.touch()
            raise ValueError(f"{item} is bad this once")
        elif kind == "stall-once" and first:
            marker.touch()
            time.sleep(120)
        return item, os.getpid()

    @staticmethod
    def _wait_for(path: Path, limit_s: float = 60.0) -> bool:
        end = time.monotonic() + limit_s
        while not path.exists():
            if time.monotonic() > end:
                return False
            time.sleep(0.02)
        return True


def factory(folder: Path, concurrency: int = 1, fail_init: bool = False):
    remote = ray.remote(Worker).options(num_cpus=0, max_restarts=0, max_concurrency=concurrency)
    return lambda: remote.remote(str(folder), fail_init)


def play(worker, item):
    return worker.run.remote(item)


def kill_when_started(folder: Path, n: int, kill) -> threading.Thread:
    """A thread that waits until ``n`` held items have started, calls ``kill(pids)``, then opens the gate."""

    def watch() -> None:
        end = time.monotonic() + 60
        while len(list(folder.glob("started-*"))) < n and time.monotonic() < end:
            time.sleep(0.02)
        kill(sorted({int(p.read_text()) for p in folder.glob("started-*")}))
        (folder / "gate").touch()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def test_each_item_once_streamed_as_it_finishes_within_the_in_flight_limit(tmp_path, ray_local):
    items = ["gate:0", "ok:1", "ok:2"]
    order = []
    with ActorPool(factory(tmp_path), 2) as pool:
        for out in pool.run(items, play):
            order.append(out.index)
            if out.index == 1:  # the first item is still held: results come back as they finish
                (tmp_path / "gate").touch()
            assert out.ok and out.item == items[out.index] and out.value[0] == items[out.index] and not out.errors
    # item 0 cannot finish before the gate exists, which is made only once item 1 came back; item 2 may then
    # finish before or after item 0 (it starts when item 1's actor frees, as item 0 polls for the gate)
    assert sorted(order) == [0, 1, 2] and order[0] == 1
    assert pool.stats.reruns == 0 and pool.stats.actors_replaced == 0

    naps = [f"nap:{i}" for i in range(6)]
    with ActorPool(factory(tmp_path, concurrency=4), 1, slots_per_actor=4, max_in_flight=2) as pool:
        got = sorted(out.value[0] for out in pool.run(naps, play))
        peak = ray.get(pool.actors[0].peak_calls.remote())
        for _ in pool.run(naps, play):
            break  # a caller that stops early gives the pool back whole
        again = sorted(out.value[0] for out in pool.run(naps, play))
    assert got == again == sorted(naps) and 1 <= peak <= 2


def test_sigkilled_actor_is_replaced_and_its_items_rerun_once(tmp_path, ray_local):
    """One actor with two slots is SIGKILLed with both its calls in flight: one replacement takes both
    slots, both items rerun on it, every item comes back once."""
    items = ["hold-once:0", "hold-once:1", "ok:2"]
    with ActorPool(factory(tmp_path, concurrency=2), 1, slots_per_actor=2, max_retries=1,
                   is_alive=lambda a: a.ping.remote()) as pool:
        first = pool.actors[0]
        killer = kill_when_started(tmp_path, 2, lambda pids: [os.kill(p, signal.SIGKILL) for p in pids])
        outs = list(pool.run(items, play))
        killer.join()
        assert len(pool.actors) == 1 and pool.actors[0] is not first
    assert sorted(o.item for o in outs) == sorted(items) and all(o.ok for o in outs)
    assert pool.stats.reruns == 2 and sorted(pool.stats.rerun_items) == items[:2]
    assert pool.stats.actors_replaced == 1 and pool.stats.failed_after_retries == 0
    for o in outs:
        assert len(o.errors) == (1 if o.item in items[:2] else 0)
        assert all(isinstance(e, ray.exceptions.RayActorError) for e in o.errors)


def test_every_actor_killed_mid_run_is_replaced(tmp_path, ray_local):
    items = [f"hold-once:{i}" for i in range(4)]
    with ActorPool(factory(tmp_path), 2, max_retries=2) as pool:
        before = pool.actors
        killer = kill_when_started(tmp_path, 2, lambda _: [ray.kill(a, no_restart=True) for a in pool.actors])
        outs = list(pool.run(items, play))
        killer.join()
        assert not set(map(id, pool.actors)) & set(map(id, before))
    assert sorted(o.item for o in outs) == items and all(o.ok for o in outs)
    assert pool.stats.reruns == 2 and pool.stats.actors_replaced == 2


def test_item_that_keeps_killing_its_actor_fails_after_its_retries(tmp_path, ray_local):
    seen = []
    with ActorPool(factory(tmp_path), 2, max_retries=1) as pool:
        outs = {o.item: o for o in pool.run(["die:0", "ok:1", "ok:2"], play,
                                            on_failure=lambda *a: seen.append((a[0], a[2], a[3])))}
    bad = outs["die:0"]
    assert not bad.ok and len(bad.errors) == 2
    assert all(isinstance(e, ray.exceptions.RayActorError) and not is_app_error(e) for e in bad.errors)
    assert seen == [("die:0", 1, True), ("die:0", 2, False)]
    assert outs["ok:1"].ok and outs["ok:2"].ok
    assert pool.stats.reruns == 1 and pool.stats.failed_after_retries == 1 and pool.stats.actors_replaced == 2


def test_application_errors_are_reported_at_once_or_retried_as_asked(tmp_path, ray_local):
    items = ["raise:0", "raise-once:1", "ok:2"]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with ActorPool(factory(tmp_path / "a"), 1, max_retries=2, retry_app_errors=False) as pool:
        outs = {o.item: o for o in pool.run(items, play)}
    for item in ("raise:0", "raise-once:1"):
        assert not outs[item].ok and len(outs[item].errors) == 1 and is_app_error(outs[item].errors[0])
        assert isinstance(outs[item].errors[0].cause, ValueError)
    assert outs["ok:2"].ok and pool.stats.reruns == 0 and pool.stats.actors_replaced == 0

    with ActorPool(factory(tmp_path / "b"), 1, max_retries=2, retry_app_errors=True) as pool:
        outs = {o.item: o for o in pool.run(items, play)}
    assert not outs["raise:0"].ok and len(outs["raise:0"].errors) == 3
    assert outs["raise-once:1"].ok and len(outs["raise-once:1"].errors) == 1 and outs["ok:2"].ok
    assert pool.stats.reruns == 3 and pool.stats.failed_after_retries == 1 and pool.stats.actors_replaced == 0


def test_a_call_that_never_answers_times_out_and_reruns_on_a_fresh_actor(tmp_path, ray_local):
    make = factory(tmp_path)

    def started():  # the replacement is up before the rerun is sent: its start does not eat the timeout
        actor = make()
        ray.get(actor.ping.remote())
        return actor

    with ActorPool(started, 1, max_retries=1, call_timeout_s=3) as pool:
        stalled = pool.actors[0]
        (out,) = pool.run(["stall-once:0"], play)
        assert pool.actors[0] is not stalled
    assert out.ok and [type(e) for e in out.errors] == [CallTimeoutError]
    assert pool.stats.reruns == 1 and pool.stats.actors_replaced == 1


def test_no_hang_when_no_actor_can_live(tmp_path, ray_local):
    pool = ActorPool(factory(tmp_path, fail_init=True), 1, max_retries=1, is_alive=lambda a: a.ping.remote())
    with pool:
        outs = list(pool.run(["ok:0", "ok:1"], play))
    pool.close()  # twice is fine
    assert sorted(o.item for o in outs) == ["ok:0", "ok:1"]
    assert all(not o.ok and len(o.errors) == 2 for o in outs)
    assert pool.stats.failed_after_retries == 2 and pool.stats.actors_replaced == 4
    with pytest.raises(RuntimeError, match="closed"):
        next(pool.run(["ok:2"], play))
