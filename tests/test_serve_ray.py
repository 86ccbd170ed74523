"""The Ray Serve application end to end on loopback, with a fake model (run under
``flock /tmp/gp-heavy.lock``): endpoints, a session that outlives its planner replica, and a scorer
replica killed during a load run with no accepted request lost or duplicated."""
from __future__ import annotations

import json
import socket
import threading
import time
from collections import Counter

import pytest
import requests

ray = pytest.importorskip("ray")
serve = pytest.importorskip("ray.serve")

from groundplan.serve.app import run_server  # noqa: E402
from groundplan.serve.config import ServeConfig  # noqa: E402
from tests.fakes import SLOW_LM_PLAN, slow_lm  # noqa: E402

#: bounds of the client's retry loop (counts, not wall-clock limits on the test)
RETRIES, RETRY_SLEEP_S = 20, 0.25


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def base():
    port = _free_port()
    small = {"placement": {"num_cpus": 0.1}}
    fixed = {"min_replicas": 1, "max_replicas": 1, "target_ongoing_requests": 4}
    cfg = ServeConfig(
        name="gptest", port=port, viewer_dir=None,
        planners=[{"name": "saycan", "label": "SayCan", "affordance": "kitchen_value"}],
        scorer={**small, "max_batch_size": 8, "batch_wait_timeout_s": 0.02, "max_ongoing_requests": 16,
                "autoscaling": {"min_replicas": 2, "max_replicas": 2, "target_ongoing_requests": 8}},
        planner={**small, "autoscaling": fixed}, ingress={**small, "autoscaling": fixed})
    ray.init(address="local", num_cpus=2, namespace="groundplan-serve", include_dashboard=False, log_to_driver=False)
    try:
        run_server(cfg, blocking=False, lm_factory=slow_lm)
        yield f"http://127.0.0.1:{port}"
    finally:
        serve.shutdown()
        ray.shutdown()


def _send(method: str, url: str, retries: int = RETRIES, **kw) -> tuple[requests.Response, int]:
    """A well-behaved client: resend on 503 (the server said the request had no effect), a bounded
    number of times; returns the final response and how many 503s it got."""
    told = 0
    for _ in range(retries + 1):
        r = requests.request(method, url, timeout=60, **kw)
        if r.status_code != 503:
            return r, told
        assert r.headers.get("Retry-After"), r.text
        told += 1
        time.sleep(RETRY_SLEEP_S)
    return r, told


def _replicas(deployment: str) -> list:
    """The live replica actors of ``deployment`` (from the GCS actor table: the state API needs the
    dashboard, which these tests do not start)."""
    from types import SimpleNamespace

    from ray._private import state

    return [SimpleNamespace(name=info.get("Name", ""), class_name=info.get("ActorClassName", ""))
            for info in state.actors().values()
            if info.get("State") == "ALIVE" and info.get("ActorClassName", "").startswith("ServeReplica:")
            and info.get("ActorClassName", "").endswith(f":{deployment}")]


def test_endpoints(base):
    assert requests.get(f"{base}/v1/healthz").json() == {"status": "ok"}
    r = requests.post(f"{base}/v1/score", json={"prompt": "Robot: 1.", "options": [" done", " find a coke can"]})
    assert r.status_code == 200 and r.json()["batch_size"] >= 1
    r = requests.post(f"{base}/v1/plan", json={"task_id": "kitchen/nl_nouns/00", "max_steps": 6})
    assert r.status_code == 200, r.text
    assert r.json()["plan"] == SLOW_LM_PLAN[:4] and r.json()["execution_success"] is not None
    r = requests.post(f"{base}/v1/plan", json={"instruction": "x", "planner": "Nope"})
    assert r.status_code == 422 and "planner: Input should be" in r.json()["detail"]
    r = requests.post(f"{base}/v1/plan", json={"task_id": "kitchen/nl_nouns/99"})
    assert r.status_code == 404 and "has no task" in r.json()["detail"]  # raised in the planner replica
    r = requests.post(f"{base}/v1/sessions/abcdef/step", json={})
    assert r.status_code == 404


def test_a_chunked_body_over_the_limit_gets_413_through_the_proxy(base):
    big = json.dumps({"prompt": "p" * 70_000, "options": ["a"]}).encode()  # over the default 65536 bytes
    r = requests.post(f"{base}/v1/score", data=iter([big[:30_000], big[30_000:]]),
                      headers={"Content-Type": "application/json"}, timeout=60)
    assert r.request.headers.get("Transfer-Encoding") == "chunked" and "Content-Length" not in r.request.headers
    assert r.status_code == 413 and "65536 bytes" in r.json()["detail"]


def test_session_outlives_its_planner_replica(base):
    sid = requests.post(f"{base}/v1/sessions", json={"instruction": "bring me a coke can"}).json()["session_id"]
    first = requests.post(f"{base}/v1/sessions/{sid}/step", json={}).json()
    assert first["skill"] == SLOW_LM_PLAN[0]
    (victim,) = _replicas("Planner-SayCan")
    ray.kill(ray.get_actor(victim.name, namespace="serve"), no_restart=True)
    r, told = _send("post", f"{base}/v1/sessions/{sid}/step", json={"feedback": {"success": True, "text": "found it"}})
    assert r.status_code == 200, r.text
    assert r.json()["skill"] == SLOW_LM_PLAN[1] and r.json()["step"] == 1
    assert r.json()["replayed"]  # the new replica rebuilt the planner from the session store's log
    assert {a.name for a in _replicas("Planner-SayCan")} != {victim.name}


def test_scorer_replica_killed_under_load(base):
    n, workers = 48, 6
    results: dict[str, list[dict]] = {}
    statuses: Counter = Counter()
    lock = threading.Lock()
    done = threading.Semaphore(0)
    barrier = threading.Barrier(workers)

    def worker(k: int) -> None:
        barrier.wait()
        for i in range(k, n, workers):
            rid = f"req-{i}"
            body = {"prompt": f"Human: task {i}\nRobot: 1.", "options": [f" option {i}", " done"], "request_id": rid}
            r, told = _send("post", f"{base}/v1/score", json=body)
            with lock:
                statuses[r.status_code] += 1
                statuses["told_to_retry"] += told
                if r.status_code == 200:
                    results.setdefault(r.json()["request_id"], []).append(r.json())
            done.release()

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(workers)]
    for t in threads:
        t.start()
    for _ in range(n // 4):  # a quarter of the requests answered: kill a scorer replica mid-run
        done.acquire()
    victim = _replicas("Scorer")[0]
    ray.kill(ray.get_actor(victim.name, namespace="serve"), no_restart=True)
    for t in threads:
        t.join()
    assert statuses[200] == n, statuses  # every request accepted in the end...
    assert sorted(results) == sorted(f"req-{i}" for i in range(n))  # ...none lost
    assert all(len(v) == 1 for v in results.values())  # ...none answered twice
    for rid, (out,) in results.items():  # ...each with its own answer
        assert [o["option"] for o in out["options"]] == [f" option {rid[4:]}", " done"]
    assert set(statuses) <= {200, "told_to_retry"}, statuses  # no 5xx other than the 503s to retry
