"""Serve's edge cases: bodies over the limit however they are sent, the server's step cap as a ceiling,
``start_state`` checked before an episode, session steps' skill labels checked like a session's, and
``groundplan serve`` on Ray stopping cleanly on SIGTERM and SIGINT."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient

from groundplan.serve.api import build_api
from groundplan.serve.config import ServeConfig
from groundplan.serve.local import LocalBackend
from tests.fakes import FakeLM

ROOT = Path(__file__).resolve().parents[1]
PLAN = ["find a coke can", "pick up the coke can", "bring it to you", "put down the coke can", "done"]


def make(lm: FakeLM, **limits) -> TestClient:
    cfg = ServeConfig(planners=[{"name": "saycan", "label": "SayCan", "affordance": "kitchen_value"},
                                {"name": "saycan_novf", "label": "No-VF"}],
                      limits={"max_body_bytes": 4096, **limits}, viewer_dir=None)
    return TestClient(build_api(cfg, LocalBackend(cfg, lm), llm_name="fake-lm"))


def test_a_chunked_body_over_the_limit_gets_413():
    c = make(FakeLM())
    big = json.dumps({"prompt": "p" * 5000, "options": ["a"]}).encode()
    r = c.post("/v1/score", content=iter([big[:3000], big[3000:]]), headers={"Content-Type": "application/json"})
    assert "content-length" not in r.request.headers and r.request.headers["transfer-encoding"] == "chunked"
    assert r.status_code == 413, r.text
    assert "4096 bytes" in r.json()["detail"]
    small = json.dumps({"prompt": "p", "options": ["a"], "request_id": "chunked"}).encode()
    r = c.post("/v1/score", content=iter([small[:7], small[7:]]), headers={"Content-Type": "application/json"})
    assert r.status_code == 200 and r.json()["request_id"] == "chunked"  # under the limit: read whole, then parsed
    r = c.post("/v1/score", content=big, headers={"Content-Type": "application/json"})
    assert r.status_code == 413  # and by Content-Length


def test_plan_max_steps_is_a_ceiling():
    lm = FakeLM.following(["find a coke can", "pick up the coke can"])  # never chooses done
    c = make(lm, max_steps=3)
    r = c.post("/v1/plan", json={"instruction": "bring me a coke can", "planner": "No-VF", "max_steps": 50})
    assert r.status_code == 422, r.text
    assert "max_steps: Input should be less than or equal to 3" in r.json()["detail"]
    schema = c.get("/openapi.json").json()["components"]["schemas"]["PlanRequest"]["properties"]["max_steps"]
    assert schema["anyOf"][0]["maximum"] == 3  # the server's limit, in its schema
    assert lm.score_calls == []  # refused before the episode started
    for asked, ran in [(None, 3), (3, 3), (2, 2)]:
        body = {"instruction": "bring me a coke can", "planner": "No-VF"} | ({"max_steps": asked} if asked else {})
        r = c.post("/v1/plan", json=body)
        assert r.status_code == 200, r.text
        assert len(r.json()["steps"]) == ran and not r.json()["terminated"]


@pytest.mark.parametrize("start_state,code,words", [  # the kitchen's schema (KitchenStartState) decides: 422
    ({"robot": "mars"}, 422, "start_state.robot: Input should be 'close counter', 'far counter'"),
    ({"hovering": True}, 422, "start_state.hovering: Extra inputs are not permitted, got True"),
    ({"placement": {"apple": "the moon"}}, 422, "start_state.placement.apple: Input should be"),
    ({"holding": "unicorn"}, 422, "got 'unicorn'"),
    ("table", 422, "start_state: must be an object"),
])
def test_a_malformed_start_state_is_refused_before_the_episode(start_state, code, words):
    lm = FakeLM.following(PLAN)
    c = make(lm)
    for body in ({"instruction": "bring me a coke can"}, {"task_id": "kitchen/nl_nouns/00"}):
        r = c.post("/v1/plan", json={**body, "start_state": start_state})
        assert r.status_code == code, r.text
        assert words in r.json()["detail"]
    assert lm.score_calls == []


def test_a_start_state_with_a_task_id_is_used():
    c = make(FakeLM.following(["put down the coke can", "done"]))
    body = {"task_id": "kitchen/nl_nouns/00", "planner": "No-VF"}
    first = c.post("/v1/plan", json=body).json()["steps"][0]
    assert first["chosen"] == "put down the coke can" and first["success"] is False  # the task's own start
    r = c.post("/v1/plan", json={**body, "start_state": {"holding": "coke can"}})
    assert r.status_code == 200, r.text
    assert r.json()["steps"][0]["success"] is True  # held from the start, as the request said
    assert r.json()["instruction"] == "How would you bring me a fruit?" and r.json()["task_id"] == body["task_id"]


def test_a_session_step_refuses_empty_skill_labels_like_session_creation():
    c = make(FakeLM.following(PLAN))
    refused = c.post("/v1/sessions", json={"instruction": "bring me a coke can", "skills": ["", "  "]})
    assert refused.status_code == 422 and "skills.0: must not be empty or only spaces" in refused.json()["detail"]
    sid = c.post("/v1/sessions", json={"instruction": "bring me a coke can", "skills": PLAN}).json()["session_id"]
    for skills in (["", "  "], ["find a coke can", " "]):
        r = c.post(f"/v1/sessions/{sid}/step", json={"observation": {"skills": skills}})
        assert r.status_code == 422, r.text
        assert "observation.skills.1: must not be empty or only spaces" in r.json()["detail"]
    r = c.post(f"/v1/sessions/{sid}/step", json={"observation": {"skills": PLAN}})
    assert r.status_code == 200 and r.json()["step"] == 0  # the refused steps were not logged


# ---------------------------------------------------------------- stopping `groundplan serve` on Ray

def test_stop_signals_are_recorded_not_raised_and_handlers_put_back():
    from groundplan.serve.signals import StopSignals

    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    stop = StopSignals()
    assert stop.install() and stop.exit_status == 0
    try:
        assert stop.wait(until=lambda: True) is False  # nothing received: the wait ends on its condition
        os.kill(os.getpid(), signal.SIGTERM)  # would end this process without the handler
        assert stop.wait() is True and stop.received == signal.SIGTERM
        os.kill(os.getpid(), signal.SIGINT)  # a second signal is counted, never raised
        for _ in range(1000):  # the handler runs in the main thread at its next check
            if stop.repeats:
                break
            time.sleep(0.001)
        assert stop.received == signal.SIGTERM and stop.repeats == 1 and stop.exit_status == 143
    finally:
        stop.uninstall()
    assert {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)} == before


#: bounds on the waits below (poll counts, and hang guards that fail the test rather than block it)
READY_POLLS, POLL_S, EXIT_WAIT_S = 1200, 0.25, 240


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _server_processes(pid: int, started: bool = True) -> list:
    """The live processes in the server's session, and (``started``, while the server runs) those it
    started at any depth: Ray's GCS, raylet and workers, which have a session of their own."""
    import psutil

    out = {p.pid: p for p in psutil.Process(pid).children(recursive=True)} if started else {}
    for proc in psutil.process_iter():
        try:
            if os.getsid(proc.pid) == pid:
                out.setdefault(proc.pid, proc)
        except (ProcessLookupError, psutil.Error):
            continue
    return [p for p in out.values() if _alive(p)]


def _alive(proc) -> bool:
    import psutil

    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


@pytest.mark.parametrize("sig,to_group", [
    pytest.param(signal.SIGTERM, False, marks=pytest.mark.slow),  # Docker, Kubernetes: the main process only
    # `kill -TERM -PGID`: the whole process group. Ray's processes are in a session of their own, so the signal
    # reaches only the server (before, Ray's core worker saw its raylet die and ended the driver with status 1)
    pytest.param(signal.SIGTERM, True),
    pytest.param(signal.SIGINT, True, marks=pytest.mark.slow),    # Ctrl-C in a terminal: the foreground process group
], ids=["sigterm", "sigterm-group", "sigint-group"])
def test_serve_on_ray_stops_cleanly(tmp_path, sig, to_group):
    psutil = pytest.importorskip("psutil")
    import requests

    port = _free_port()
    small = {"placement": {"num_cpus": 0.1}, "autoscaling": {"min_replicas": 1, "max_replicas": 1}}
    cfg = tmp_path / "serve.yaml"
    cfg.write_text(yaml.safe_dump({
        "name": "gpstop", "viewer_dir": None, "llm": {"backend": "fake_slow", "model": "fake"},
        "planners": [{"name": "saycan", "label": "SayCan", "affordance": "kitchen_value"}],
        "scorer": small, "planner": small, "ingress": small}))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in [str(ROOT), os.environ.get("PYTHONPATH", "")] if p),
           "GROUNDPLAN_PLUGINS": "tests.fake_backend",  # the fake model, registered in the driver and replicas
           "RAY_ADDRESS": "local"}  # a Ray of its own, never a cluster another test left running
    proc = subprocess.Popen([sys.executable, "-m", "groundplan.cli", "serve", str(cfg), "--port", str(port)],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        base = f"http://127.0.0.1:{port}"
        for _ in range(READY_POLLS):
            assert proc.poll() is None, f"serve exited early ({proc.returncode}): {proc.communicate()[1][-3000:]}"
            try:
                r = requests.post(f"{base}/v1/score", json={"prompt": "Robot: 1.", "options": [" done"]}, timeout=10)
                if r.status_code == 200:
                    break
            except requests.RequestException:
                pass
            time.sleep(POLL_S)
        else:
            pytest.fail("serve never answered /v1/score")
        ray_procs = _server_processes(proc.pid)
        ray_core = [p for p in ray_procs if p.name() in ("raylet", "gcs_server")]
        assert len(ray_core) == 2, [p.name() for p in ray_procs]
        assert all(os.getpgid(p.pid) != proc.pid for p in ray_core), "Ray's processes are in the server's group"

        (os.killpg if to_group else os.kill)(proc.pid, sig)
        try:
            _, stderr = proc.communicate(timeout=EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"serve did not exit within {EXIT_WAIT_S} s of {sig.name}")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 128 + sig, (proc.returncode, stderr[-3000:])
    for noise in ("Traceback", "SIGTERM received", "Aborted", "KeyboardInterrupt"):
        assert noise not in stderr, stderr[-3000:]
    psutil.wait_procs(ray_procs, timeout=30)
    left = [p for p in ray_procs if _alive(p)] + _server_processes(proc.pid, started=False)
    assert left == [], f"processes of the stopped server are still running: {[p.name() for p in left]}"
