"""The /v1 API in-process (the plain services behind FastAPI, no Ray): endpoints, limits, error codes,
auth, and closed-loop sessions that survive losing the live planner (a replica restart)."""
from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from groundplan.serve.api import build_api
from groundplan.serve.config import ServeConfig
from groundplan.serve.local import LocalBackend
from tests.fakes import FakeLM

PLAN = ["find a coke can", "pick up the coke can", "bring it to you", "put down the coke can", "done"]


def make(token: str | None = None, **limits) -> tuple[TestClient, LocalBackend]:
    cfg = ServeConfig(planners=[{"name": "saycan", "label": "SayCan", "affordance": "kitchen_value"},
                                {"name": "saycan_novf", "label": "No-VF"}],
                      limits={"max_options": 4, "max_sessions": 2, "max_body_bytes": 4096, **limits}, viewer_dir=None)
    backend = LocalBackend(cfg, FakeLM.following(PLAN))
    return TestClient(build_api(cfg, backend, llm_name="fake-lm", token=token)), backend


def test_score_plan_and_meta():
    c, _ = make()
    assert c.get("/v1/healthz").json() == {"status": "ok"}
    assert [p["label"] for p in c.get("/v1/planners").json()["planners"]] == ["SayCan", "No-VF"]
    r = c.post("/v1/score", json={"prompt": "Robot: 1.", "options": [" find a coke can", " done"], "request_id": "r1"})
    assert r.status_code == 200 and r.json()["request_id"] == "r1"
    assert [o["option"] for o in r.json()["options"]] == [" find a coke can", " done"]
    r = c.post("/v1/plan", json={"task_id": "kitchen/nl_nouns/00", "env": "kitchen", "planner": "No-VF", "max_steps": 6})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["plan"] == PLAN[:4] and body["terminated"] and body["steps"][-1]["chosen"] == "done"
    assert body["task_id"] == "kitchen/nl_nouns/00" and body["steps"][0]["candidates"] and "trace" not in body
    assert body["steps"][0]["candidates"][0]["extra"]["num_tokens"] >= 1  # the trace, once, as traces.jsonl has it
    assert "openapi" in c.get("/openapi.json").json() and c.get("/docs").status_code == 200


@pytest.mark.parametrize("method,path,body,code,words", [
    ("post", "/v1/plan", {"instruction": "x", "planner": "Nope"}, 422, "planner: Input should be 'SayCan' or 'No-VF'"),
    ("post", "/v1/plan", {"instruction": "x", "env": "mars"}, 422, "env: Input should be 'kitchen'"),
    ("post", "/v1/plan", {"instruction": "   "}, 422, "instruction: must not be empty or only spaces"),
    ("post", "/v1/plan", {"instruction": "a" * 1001}, 422, "instruction: String should have at most 1000 characters"),
    ("post", "/v1/plan", {"task_id": "kitchen/nl_nouns/99"}, 404, "env 'kitchen' has no task 'kitchen/nl_nouns/99'"),
    ("post", "/v1/plan", {"seed": 1}, 422, "give an instruction, or a task_id"),
    ("post", "/v1/sessions", {"instruction": ""}, 422, "instruction: must not be empty or only spaces"),
    ("post", "/v1/score", {"prompt": "p", "options": ["a", "b", "c", "d", "e"]}, 422,
     "options: List should have at most 4 items"),
    ("post", "/v1/score", {"prompt": "p", "options": ["a", " "]}, 422, "options.1: must not be empty or only spaces"),
    ("post", "/v1/score", {"prompt": "p", "options": []}, 422, "options"),
    ("post", "/v1/score", {"prompt": "p", "options": ["a"], "extra": 1}, 422, "extra"),
    ("post", "/v1/sessions/0123abcd/step", {}, 404, "no session"),
    ("delete", "/v1/sessions/0123abcd", None, 404, "no session"),
    ("post", "/v1/sessions/..%2F..%2Fetc/step", {}, 404, ""),
])
def test_bad_input_gets_4xx_with_a_message(method, path, body, code, words):
    c, _ = make()
    r = getattr(c, method)(path, **({"json": body} if body is not None else {}))
    assert r.status_code == code, r.text
    assert words in r.json()["detail"]


def test_malformed_json_and_oversized_bodies():
    c, _ = make()
    r = c.post("/v1/score", content=b'{"prompt": "p", "options": [', headers={"Content-Type": "application/json"})
    assert r.status_code == 422 and "JSON" in r.json()["detail"]
    r = c.post("/v1/score", json={"prompt": "p" * 5000, "options": ["a"]})
    assert r.status_code == 413 and "4096 bytes" in r.json()["detail"]


def test_bearer_token_on_every_endpoint_but_healthz():
    c, _ = make(token="s3cret")
    assert c.get("/v1/healthz").status_code == 200
    for method, path in [("get", "/v1/planners"), ("post", "/v1/score"), ("post", "/v1/plan"), ("post", "/v1/sessions"),
                         ("post", "/v1/sessions/abc/step"), ("delete", "/v1/sessions/abc")]:
        assert getattr(c, method)(path).status_code == 401, path
        assert getattr(c, method)(path, headers={"Authorization": "Bearer nope"}).status_code == 403, path
    ok = c.post("/v1/score", json={"prompt": "p", "options": ["a"]}, headers={"Authorization": "Bearer s3cret"})
    assert ok.status_code == 200


def test_token_is_read_from_the_environment(monkeypatch):
    cfg = ServeConfig(viewer_dir=None, token_env="GP_TEST_TOKEN")
    c = TestClient(build_api(cfg, LocalBackend(cfg, FakeLM())))
    assert c.get("/v1/planners").status_code == 200  # unset: no auth
    monkeypatch.setenv("GP_TEST_TOKEN", "t0k")
    assert c.get("/v1/planners").status_code == 401
    assert c.get("/v1/planners", headers={"Authorization": "Bearer t0k"}).status_code == 200


def drive(c: TestClient, backend: LocalBackend, forget_every_step: bool) -> list[tuple[str, bool]]:
    sid = c.post("/v1/sessions", json={"instruction": "bring me a coke can", "planner": "SayCan"}).json()["session_id"]
    out, feedback = [], None
    for _ in range(8):
        if forget_every_step:
            backend.planners.forget()  # as if the planner replica restarted between steps
        r = c.post(f"/v1/sessions/{sid}/step",
                   json={"observation": {"affordances": {"done": 0.1}}, **({"feedback": feedback} if feedback else {})})
        assert r.status_code == 200, r.text
        body = r.json()
        assert {"llm", "affordance", "combined"} <= set(body["candidates"][0])
        out.append((body["skill"], body["replayed"]))
        feedback = {"success": True, "text": f"{body['skill']}: ok"}
        if body["done"]:
            break
    r = c.post(f"/v1/sessions/{sid}/step", json={})
    assert r.status_code == 409 and "finished" in r.json()["detail"]
    assert c.delete(f"/v1/sessions/{sid}").status_code == 204
    assert c.post(f"/v1/sessions/{sid}/step", json={}).status_code == 404
    return out


def test_session_closed_loop_survives_losing_the_live_planner():
    c, backend = make()
    live = drive(c, backend, forget_every_step=False)
    assert [s for s, _ in live] == PLAN and not any(r for _, r in live)
    rebuilt = drive(c, backend, forget_every_step=True)
    assert [s for s, _ in rebuilt] == PLAN  # replayed from the stored log: same decisions
    assert all(r for _, r in rebuilt[1:])


def test_client_affordances_steer_saycan():
    c, _ = make()
    sid = c.post("/v1/sessions", json={"instruction": "bring me a coke can", "skills": PLAN}).json()["session_id"]
    r = c.post(f"/v1/sessions/{sid}/step", json={"observation": {"affordances": {"done": 1.5}}})
    assert r.status_code == 422 and "affordances.done: Input should be less than or equal to 1" in r.json()["detail"]
    body = c.post(f"/v1/sessions/{sid}/step",
                  json={"observation": {"affordances": {"find a coke can": 0.0}}}).json()
    assert body["skill"] != "find a coke can"
    cand = {x["skill"]: x for x in body["candidates"]}
    assert cand["find a coke can"]["affordance"] == 0.0 and cand["find a coke can"]["combined"] is None  # log 0


def test_sessions_are_bounded_and_expire():
    c, backend = make(session_idle_s=60)
    store = backend.planners.store
    now = [0.0]
    store._clock = lambda: now[0]
    a = c.post("/v1/sessions", json={"instruction": "x"}).json()["session_id"]
    c.post("/v1/sessions", json={"instruction": "y"})
    r = c.post("/v1/sessions", json={"instruction": "z"})
    assert r.status_code == 429 and "too many open sessions" in r.json()["detail"]
    now[0] = 61.0
    r = c.post(f"/v1/sessions/{a}/step", json={})
    assert r.status_code == 410 and "expired" in r.json()["detail"]
    assert c.post("/v1/sessions", json={"instruction": "z"}).status_code == 201  # the expired ones freed room


def test_request_text_is_never_evaluated():
    c, backend = make()
    evil = "__import__('os').system('touch /tmp/gp-serve-pwned')"
    r = c.post("/v1/plan", json={"instruction": evil, "planner": "No-VF", "max_steps": 2})
    assert r.status_code == 200 and r.json()["instruction"] == evil
    import os
    assert not os.path.exists("/tmp/gp-serve-pwned")


@pytest.mark.parametrize("memo_size, computed", [(200_000, 1), (0, 2)])
def test_a_repeated_score_request_is_served_from_the_memo_unless_it_is_off(memo_size, computed):
    """Serve's scorer keeps the same score memo as eval's scorer actor (``scorer.memo_size``)."""
    cfg = ServeConfig(planners=[{"name": "saycan_novf", "label": "No-VF"}], scorer={"memo_size": memo_size},
                      viewer_dir=None)
    lm = FakeLM.following(PLAN)
    c = TestClient(build_api(cfg, LocalBackend(cfg, lm), llm_name="fake-lm"))
    body = {"prompt": "Robot: 1.", "options": [" find a coke can", " done"]}
    first, second = (c.post("/v1/score", json=body).json()["options"] for _ in range(2))
    assert first == second
    assert len(lm.score_calls) == computed


def test_plan_requests_reuse_the_deployments_env_and_planner():
    """Sequential episodes play on one pooled env with one planner per (label, step cap); each starts from
    reset, so the second answer equals the first (no state kept from the earlier request)."""
    c, backend = make()
    request = {"task_id": "kitchen/nl_nouns/00", "env": "kitchen", "planner": "No-VF", "max_steps": 6}
    first = c.post("/v1/plan", json=request).json()
    c.post("/v1/plan", json={"instruction": "bring me an apple", "planner": "SayCan", "max_steps": 3})
    again = c.post("/v1/plan", json=request).json()
    worker = backend.planners._worker("kitchen")
    assert len(worker.slots) == 1
    assert sorted(worker.slots[0].runner()._planners) == [("No-VF", 6), ("SayCan", 3)]
    assert [s["chosen"] for s in again["steps"]] == [s["chosen"] for s in first["steps"]]
    assert again["execution_success"] == first["execution_success"]
