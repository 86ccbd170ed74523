"""Malformed requests get a 4xx, never a 500 or a silent default: regression tests for what a review found
against ``groundplan serve --local``, and the typed start states behind them.

- ``start_state`` values of the wrong shape (a string for ``placement``, a list for ``robot``, an object for
  ``holding``, a list as a placement's location) raised ``TypeError``/``ValueError`` in the kitchen's own
  parser (500); each env now declares its start state's schema (``Env.start_state_schema``), checked
  before any env is built: a 422 naming the field, in the API and (as a line-numbered error) in task files;
- ``"skills": []`` at session creation got the env's 51 skills; an explicit empty list is now refused;
- a 5 MB body with a Content-Length got a connection reset for clients that send the whole body before
  reading (Python's ``urllib``): the server now reads and discards it (up to ``limits.max_drain_bytes``)
  and answers 413, checked with urllib against a real ``groundplan serve --local`` on 127.0.0.1;
- a JSON-escaped lone surrogate (``"\\ud800"``), found by the Schemathesis runs: a 500 when used as a key
  or echoed back, now a 422;
- a boolean where the schema says integer (``"seed": false``), found by the slow run: coerced and accepted,
  now a 422, as every other type the schema calls invalid;
- the default env was the kitchen whatever the server hosts (a server without it answered 400 to a request
  that left ``env`` out), and an explicit empty ``env``, ``planner`` or ``task_id`` quietly meant the
  default: the default env is now the server's first, and only leaving a value out (or null) means the
  default; the schema holds the server's names and limits, so a body it calls valid is never refused
  (``tests/test_serve_schema.py`` holds the server to that).
"""
from __future__ import annotations

import http.client
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient
from pydantic import ValidationError

from groundplan.core.errors import GroundplanError, InvalidInputError, MissingDependencyError, UnknownNameError
from groundplan.envs import ENVS
from groundplan.envs.base import StartStateError
from groundplan.envs.kitchen.env import KitchenEnv
from groundplan.envs.task_files import load_task_file
from groundplan.serve.api import build_api
from groundplan.serve.config import ServeConfig
from groundplan.serve.local import LocalBackend
from groundplan.serve.service import PlannerService, local_store, resolve_plan
from tests.fakes import FakeLM
from tests.live_services import free_ports, stop_group

ROOT = Path(__file__).resolve().parents[1]
PLAN = ["find a coke can", "pick up the coke can", "bring it to you", "put down the coke can", "done"]

#: the review's four start states that gave 500 (kitchen env), with the field each 422 must name
REVIEWED_500S = [
    ({"placement": "x"}, "start_state.placement: Input should be a valid dictionary, got 'x'"),
    ({"robot": ["a"]}, "start_state.robot: Input should be 'close counter', 'far counter', 'table', 'trash can' or "
                       "'user', got ['a']"),
    ({"holding": {}}, "start_state.holding: Input should be 'coke can'"),
    ({"placement": {"apple": ["x"]}}, "start_state.placement.apple: Input should be 'close counter'"),
]


def make(lm: FakeLM | None = None, envs: list[str] | None = None, **limits) -> tuple[TestClient, FakeLM]:
    lm = lm or FakeLM.following(PLAN)
    cfg = ServeConfig(planners=[{"name": "saycan", "label": "SayCan", "affordance": "kitchen_value"},
                                {"name": "saycan_novf", "label": "No-VF"}],
                      envs=[{"name": e} for e in envs or ["kitchen"]], limits={"max_body_bytes": 4096, **limits},
                      viewer_dir=None)
    return TestClient(build_api(cfg, LocalBackend(cfg, lm), llm_name="fake-lm")), lm


# ------------------------------------------------------------------------------------ start states
@pytest.mark.parametrize("start_state,words", REVIEWED_500S, ids=["placement-str", "robot-list", "holding-obj",
                                                                   "placement-loc-list"])
def test_the_reviewed_start_states_are_422_naming_the_field(start_state, words):
    c, lm = make()
    for body in ({"instruction": "bring me a coke can"}, {"task_id": "kitchen/nl_nouns/00"}):
        r = c.post("/v1/plan", json={**body, "planner": "No-VF", "start_state": start_state})
        assert r.status_code == 422, r.text
        assert r.json()["detail"].startswith("invalid request: ") and words in r.json()["detail"]
    assert lm.score_calls == []  # refused before any episode


def test_a_valid_start_state_still_pins_the_episode():
    c, _ = make(FakeLM.following(["put down the coke can", "done"]))
    pins = {"robot": "table", "holding": "coke can", "placement": {"apple": "user"}}
    r = c.post("/v1/plan", json={"instruction": "put it down", "planner": "No-VF", "start_state": pins})
    assert r.status_code == 200, r.text
    assert r.json()["steps"][0]["success"] is True  # held from the start, as pinned


def test_every_env_declares_its_start_state_schema():
    """Each registered env has a start-state model, and the env's own tasks fit it."""
    for name in ENVS.names():
        try:
            cls = ENVS.get(name)
        except MissingDependencyError:
            continue
        assert cls.start_state_schema is not None, name
        assert cls.start_state_schema.model_config.get("extra") == "forbid", name


def test_the_kitchen_tasks_fit_the_kitchen_schema_and_parse_unchanged():
    env = KitchenEnv()
    pinned = [t for t in env.tasks() if t.start_state]
    assert pinned
    for task in pinned:
        assert env.parse_start_state(task.start_state) == task.start_state  # a valid state passes unchanged


@pytest.mark.parametrize("env,good,bad,field", [
    ("tabletop", {"blocks": ["red", "blue block"], "bowls": ["green"], "layout_seed": 3}, {"blocks": "red"}, "blocks"),
    ("hanoi", {"colours": ["red", "blue", "green"], "rods": [0, 0, 2], "split": "test"},
     {"colours": ["red", "blue"], "rods": [0, 1, 2]}, "rods"),
    ("blocks_bowls", {"blocks": ["red block 1"], "bowls": ["blue bowl 1"],
                      "xy": {"red block 1": [0.3, 0.1], "blue bowl 1": [0.55, -0.1]}},
     {"blocks": ["red block 1"], "bowls": ["blue bowl 1"],
      "xy": {"red block 1": [0.3, 0.1], "blue bowl 1": [0.32, 0.1]}}, "xy"),  # the block would start in the bowl
    ("babyai", {"level_seed": 1_000_000, "split": "test"}, {"level_seed": "7"}, "level_seed"),
    ("virtualhome", {"program": "11_1"}, {"program": ["11_1"]}, "program"),
    ("virtualhome_scp", {"program": "7_1"}, {"scene": 1}, "scene"),
    ("house", {}, {"agent": [0, 0]}, "agent"),
])
def test_each_env_schema_accepts_its_states_and_names_the_bad_field(env, good, bad, field):
    try:
        cls = ENVS.get(env)
    except MissingDependencyError as exc:
        pytest.skip(str(exc))
    assert cls.check_start_state(good) is not None
    with pytest.raises(StartStateError) as info:
        cls.check_start_state(bad)
    assert info.value.path[0] == field and str(info.value).startswith(field)


def test_the_env_own_tasks_fit_the_ravens_schemas():
    pytest.importorskip("pybullet")
    from groundplan.envs.tabletop.blocks_bowls import BlocksBowlsEnv
    from groundplan.envs.tabletop.env import TabletopEnv
    from groundplan.envs.tabletop.hanoi import HanoiEnv
    from groundplan.envs.tabletop.tasks import tasks_for

    for cls, tasks in ((TabletopEnv, tasks_for(None, 2)), (HanoiEnv, HanoiEnv(split="test-generalize").tasks()),
                       (BlocksBowlsEnv, BlocksBowlsEnv(split="test-generalize").tasks())):
        for task in tasks:
            cls.check_start_state(task.start_state)


def test_a_task_file_start_state_of_the_wrong_shape_names_its_line(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("- instruction: go\n  family: f\n  goal: [robot_at(table)]\n  start_state:\n"
                    "    robot: [table]\n")
    with pytest.raises(InvalidInputError) as info:
        load_task_file(path, KitchenEnv())
    assert f"{path}:5: task '0', start_state: robot: Input should be" in str(info.value)


def test_the_openapi_schema_documents_each_served_env_start_state():
    """One plan-request variant per served env, tagged by ``env``, each with its env's start state: another
    env's state is invalid in the schema as the server refuses it; the first env is the default."""
    c, _ = make(envs=["kitchen", "house"])
    schemas = c.get("/openapi.json").json()["components"]["schemas"]
    for env, model, required in (("kitchen", "KitchenStartState", []), ("house", "HouseStartState", ["env"])):
        variant = schemas[f"PlanRequest_{env}"]
        prop = variant["properties"]["start_state"]
        assert {s.get("$ref") for s in prop["anyOf"]} == {f"#/components/schemas/{model}", None}
        assert variant["properties"]["env"]["const"] == env and variant.get("required", []) == required
    kitchen = schemas["KitchenStartState"]
    assert kitchen["additionalProperties"] is False and "close counter" in kitchen["properties"]["robot"]["enum"]
    r = c.post("/v1/plan", json={"instruction": "go", "env": "house", "start_state": {"robot": "table"}})
    assert r.status_code == 422 and "start_state.robot: Extra inputs are not permitted" in r.json()["detail"]
    r = c.post("/v1/plan", json={"instruction": "go", "env": "moon"})
    assert r.status_code == 422 and r.json()["detail"] == "invalid request: env: Input should be 'kitchen' or 'house'"


def test_an_instruction_of_ones_own_runs_in_the_scene_the_env_declares():
    """Hanoi has no default scene: a session's skills and an instruction without a task come from its first
    task's scene (they were a 500 and a failed trace), never with that task's goal."""
    c, _ = make(envs=["kitchen", "hanoi"])
    r = c.post("/v1/sessions", json={"instruction": "stack the disks", "env": "hanoi"})
    assert r.status_code == 201, r.text
    assert "put the green disk in rod 1" in r.json()["skills"]
    r = c.post("/v1/plan", json={"instruction": "stack the disks", "env": "hanoi", "planner": "No-VF", "max_steps": 1})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["error"] is None and out["family"] == "move_disk" and "no goal" in out["goal_details"]["note"]
    assert out["steps"] and out["execution_success"] is None
    kitchen = c.post("/v1/plan", json={"instruction": "bring me a coke can", "max_steps": 1}).json()
    assert kitchen["error"] is None and kitchen["family"] == "serve"  # the kitchen's default scene


def test_a_hanoi_start_state_schema_says_what_its_validators_check():
    """Distinct colours and one rod per colour are in the JSON schema, and JSON's integer 2.0 is a rod."""
    from groundplan.envs.tabletop.start_state import HanoiStartState

    schema = HanoiStartState.model_json_schema()
    assert schema["properties"]["colours"]["uniqueItems"] is True
    assert [b["properties"]["rods"]["minItems"] for b in schema["anyOf"]] == [1, 2, 3, 4]
    assert HanoiStartState.model_validate({"colours": ["red", "blue"], "rods": [2.0, 0]}).rods == [2, 0]
    for bad in ({"colours": ["red", "red"], "rods": [0, 1]}, {"colours": ["red"], "rods": [0, 1]},
                {"colours": ["red"], "rods": [True]}, {"colours": ["red"], "rods": [0.5]}):
        with pytest.raises(ValidationError):
            HanoiStartState.model_validate(bad)


# ------------------------------------------------------------------------------------ empty lists
def test_empty_skills_are_refused_never_read_as_the_default():
    c, _ = make()
    r = c.post("/v1/sessions", json={"instruction": "bring me a coke can", "skills": []})
    assert r.status_code == 422 and "skills: List should have at least 1 item" in r.json()["detail"]
    assert len(c.post("/v1/sessions", json={"instruction": "x", "skills": None}).json()["skills"]) == 51
    sid = c.post("/v1/sessions", json={"instruction": "bring me a coke can", "skills": PLAN}).json()["session_id"]
    r = c.post(f"/v1/sessions/{sid}/step", json={"observation": {"skills": []}})
    assert r.status_code == 422 and "observation.skills: List should have at least 1 item" in r.json()["detail"]
    r = c.post(f"/v1/sessions/{sid}/step", json={"observation": {"skills": None}})
    assert r.status_code == 200 and r.json()["step"] == 0  # null keeps the session's skills


def test_the_service_refuses_empty_skills_too():
    """The planner service (what Ray replicas run) never reads [] as "the env's skills" either."""
    cfg = ServeConfig(planners=[{"name": "saycan_novf", "label": "No-VF"}], viewer_dir=None)
    service = PlannerService(cfg, FakeLM(), local_store(cfg))
    with pytest.raises(InvalidInputError, match="skills: the list is empty"):
        service.create_session({"instruction": "x", "skills": []})
    with pytest.raises(StartStateError, match="robot: Input should be"):
        service.plan({"instruction": "x", "start_state": {"robot": ["a"]}})


# ------------------------------------------------------------------------------------ defaults and empty values
def test_the_default_env_is_the_servers_first_not_the_kitchen():
    """A server without the kitchen: a request that leaves ``env`` out runs in the server's first env (it
    got a 400 naming the kitchen), and the schema says so; the kitchen is an env this server lacks (422)."""
    cfg = ServeConfig(planners=[{"name": "saycan_novf", "label": "No-VF"}], envs=[{"name": "house"}],
                      viewer_dir=None)
    c = TestClient(build_api(cfg, LocalBackend(cfg, FakeLM.following(["done"])), llm_name="fake-lm"))
    spec = c.get("/openapi.json").json()["components"]["schemas"]
    for model in ("PlanRequest", "SessionCreate"):
        assert spec[model]["properties"]["env"]["default"] == "house"
    r = c.post("/v1/plan", json={"instruction": "find the kitchen", "max_steps": 1})
    assert r.status_code == 200, r.text
    assert r.json()["env"] == "house"
    r = c.post("/v1/sessions", json={"instruction": "find the kitchen", "skills": ["go to the kitchen", "done"]})
    assert r.status_code == 201 and r.json()["env"] == "house"
    assert resolve_plan(cfg, {"instruction": "go"}).env == "house"  # the service, as Ray replicas call it
    r = c.post("/v1/plan", json={"instruction": "go", "env": "kitchen"})
    assert r.status_code == 422 and "env: Input should be 'house'" in r.json()["detail"]


@pytest.mark.parametrize("path,body,words", [
    ("/v1/plan", {"instruction": "bring me a coke can", "env": ""}, "env: Input should be 'kitchen'"),
    ("/v1/plan", {"instruction": "bring me a coke can", "planner": ""}, "planner: Input should be 'SayCan' or 'No-VF'"),
    ("/v1/plan", {"task_id": ""}, "task_id: must not be empty or only spaces"),
    ("/v1/plan", {"env": "kitchen", "task_id": " "}, "task_id: must not be empty or only spaces"),  # the slow fuzz's find
    ("/v1/plan", {"task_id": "kitchen/nl_nouns/00", "instruction": ""}, "instruction: must not be empty or only spaces"),
    ("/v1/sessions", {"instruction": "bring me a coke can", "env": ""}, "env: Input should be 'kitchen'"),
    ("/v1/sessions", {"instruction": "bring me a coke can", "planner": ""}, "planner: Input should be 'SayCan'"),
], ids=["plan-env", "plan-planner", "plan-task", "plan-task-blank", "plan-instruction", "session-env", "session-planner"])
def test_an_explicit_empty_value_is_refused_never_read_as_the_default(path, body, words):
    c, lm = make()
    r = c.post(path, json=body)
    assert r.status_code == 422, r.text
    assert words in r.json()["detail"]
    assert lm.score_calls == []  # refused before any episode


@pytest.mark.parametrize("request_,error,words", [
    ({"instruction": "x", "env": ""}, UnknownNameError, "unknown env ''; this server has: kitchen"),
    ({"instruction": "x", "planner": ""}, UnknownNameError, "unknown planner ''; this server has: No-VF"),
    ({"task_id": ""}, InvalidInputError, "task_id is empty"),
    ({"task_id": "kitchen/nl_nouns/00", "instruction": ""}, InvalidInputError, "the instruction is empty"),
], ids=["env", "planner", "task", "instruction"])
def test_the_service_refuses_empty_names_too(request_, error, words):
    """What Ray replicas and other callers of the service pass as a mapping is held to the same rule."""
    cfg = ServeConfig(planners=[{"name": "saycan_novf", "label": "No-VF"}], viewer_dir=None)
    with pytest.raises(error, match=words):
        resolve_plan(cfg, request_)
    if "instruction" in request_ and "task_id" not in request_:
        service = PlannerService(cfg, FakeLM(), local_store(cfg))
        with pytest.raises(GroundplanError, match=words):
            service.create_session({**request_, "skills": ["done"]})


def test_not_blank_is_what_strip_leaves_something_of():
    """The schema's ``pattern`` of a text that must say something (:data:`NOT_BLANK`) refuses exactly the
    characters ``str.strip()`` removes, so the schema and the services' own checks agree on every text."""
    from groundplan.serve.schemas import NOT_BLANK

    every = "".join(map(chr, range(sys.maxunicode + 1)))
    kept = set(re.findall(NOT_BLANK, every))
    assert {c for c in every if c not in kept} == {c for c in every if c.isspace()}


@pytest.mark.parametrize("max_samples,max_options", [(1, 1), (8, 8), (7, 4), (64, 64), (300, 5)])
def test_the_completions_schema_and_validation_agree_on_samples_and_best_of(max_samples, max_options):
    """``n`` x prompts <= ``limits.max_samples`` (unless ``max_tokens`` is 0) and ``best_of`` only with n 1
    are rules across fields: the JSON schema states them in branches, the model checks them in Python, and
    both accept exactly the same bodies."""
    import jsonschema_rs

    from groundplan.serve.openai_api import completion_request_model

    cfg = ServeConfig(viewer_dir=None, limits={"max_samples": max_samples, "max_options": max_options})
    model = completion_request_model(cfg, "m", can_logprob=True)
    schema = jsonschema_rs.validator_for(model.model_json_schema())
    prompts = ["x", [1, 2, 3]] + [p for k in range(1, max_options + 1) for p in (["a"] * k, [[1]] * k)]
    agreed = refused = 0
    for n in (None, 1, 2, 3, 4, 5, 7, 8, 9, 16, 63, 64, 65, 128):
        for prompt in prompts:
            for max_tokens in (None, 0, 1):
                for best_of in (None, 1):
                    body = {"model": "m", "prompt": prompt, "n": n, "max_tokens": max_tokens, "best_of": best_of}
                    try:
                        model.model_validate(body)
                        valid = True
                    except ValueError:
                        valid = False
                    assert schema.is_valid(body) == valid, body
                    agreed, refused = agreed + 1, refused + (not valid)
    assert 0 < refused < agreed  # the grid holds bodies of both kinds


def test_two_sweeps_that_cannot_be_compared_are_a_409(tmp_path):
    """Both sweeps exist and the request is well formed; what they hold rules the comparison out (a 409,
    the state of the server, not a 400 for a valid request)."""
    (tmp_path / "r1").mkdir()
    (tmp_path / "r1" / "traces.jsonl").write_text("")
    cfg = ServeConfig(planners=[{"name": "saycan_novf", "label": "No-VF"}], viewer_dir=str(tmp_path))
    c = TestClient(build_api(cfg, LocalBackend(cfg, FakeLM()), llm_name="fake-lm"))
    r = c.get("/viewer/api/compare/r1/r1")
    assert r.status_code == 409 and "is not a run folder" in r.json()["detail"]
    assert c.get("/viewer/api/compare/r1/nope").status_code == 404


# ------------------------------------------------------------------------------------ lone surrogates
@pytest.mark.parametrize("body", [
    b'{"instruction": "x", "skills": ["a", "\\ud800"]}',
    b'{"instruction": "x", "\\udfff": 1}',
    b'{"instruction": "\\ud800 bring"}',
], ids=["in-a-list", "as-a-key", "a-field"])
def test_a_lone_surrogate_is_422_not_500(body):
    c, _ = make()
    r = c.post("/v1/sessions", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 422, r.text
    assert "lone surrogate" in r.json()["detail"]
    ok = c.post("/v1/sessions", content=b'{"instruction": "bring \\ud83d\\ude00 a coke"}',
                headers={"Content-Type": "application/json"})
    assert ok.status_code == 201  # a surrogate pair is just a character


# ------------------------------------------------------------------------------------ strict types
@pytest.mark.parametrize("path,body,field", [
    ("/v1/plan", {"instruction": "x", "seed": False}, "seed: must be an integer"),  # found by the slow fuzz run
    ("/v1/plan", {"instruction": "x", "max_steps": "2"}, "max_steps"),
    ("/v1/sessions", {"instruction": "x", "seed": 1.5}, "seed: must be a whole number"),
    ("/v1/sessions/0123/step", {"feedback": {"success": 1}}, "feedback.success: Input should be a valid boolean"),
    ("/v1/sessions/0123/step", {"observation": {"affordances": {"done": True}}}, "affordances.done"),
    ("/v1/completions", {"model": "fake-lm", "prompt": "p", "echo": "true"}, "echo"),
    ("/v1/completions", {"model": "fake-lm", "prompt": [1, True]}, "prompt"),
], ids=["bool-seed", "str-int", "fraction", "int-bool", "bool-float", "str-bool", "bool-token"])
def test_what_the_schema_calls_invalid_is_refused_not_coerced(path, body, field):
    c, _ = make()
    r = c.post(path, json=body)
    assert r.status_code == 422, r.text
    assert field in r.json()["detail"]


def test_an_integer_may_be_written_with_a_zero_fraction():
    c, _ = make()
    r = c.post("/v1/plan", json={"instruction": "bring me a coke can", "planner": "No-VF", "seed": 3.0, "max_steps": 1.0})
    assert r.status_code == 200, r.text
    assert len(r.json()["steps"]) == 1


# ------------------------------------------------------------------------------------ 413 on a real server
@pytest.fixture(scope="module")
def local_server(tmp_path_factory):
    """``groundplan serve --local`` (uvicorn, no Ray) on 127.0.0.1 with the fake model; drains bodies up
    to 8 MiB."""
    port = free_ports(1)[0]
    cfg = tmp_path_factory.mktemp("serve") / "serve.yaml"
    cfg.write_text(yaml.safe_dump({
        "viewer_dir": None, "llm": {"backend": "fake_slow", "model": "fake"},
        "planners": [{"name": "saycan_novf", "label": "No-VF"}],
        "limits": {"max_body_bytes": 65536, "max_drain_bytes": 8 * 2**20}}))
    env = {**os.environ, "GROUNDPLAN_PLUGINS": "tests.fake_backend", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(p for p in [str(ROOT), os.environ.get("PYTHONPATH", "")] if p)}
    env.pop("GROUNDPLAN_SERVE_TOKEN", None)
    proc = subprocess.Popen([sys.executable, "-m", "groundplan.cli", "serve", str(cfg), "--port", str(port), "--local"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            assert proc.poll() is None, f"serve exited early: {proc.communicate()[1][-3000:]!r}"
            try:
                with urllib.request.urlopen(f"{base}/v1/healthz", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.2)
        else:
            pytest.fail("groundplan serve --local never answered /v1/healthz")
        yield port
    finally:
        stop_group(proc, grace_s=20)


def _post(port: int, data, headers: dict[str, str]) -> tuple[int, dict, dict]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/score", data=data, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, dict(r.headers), json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), json.loads(e.read())


def test_urllib_sees_the_413_for_a_5mb_body(local_server):
    """urllib sends the whole body before reading: it used to get ConnectionResetError, now the 413."""
    big = json.dumps({"prompt": "p" * (5 * 2**20), "options": ["a"]}).encode()
    code, _, body = _post(local_server, big, {"Content-Type": "application/json"})
    assert code == 413 and "65536 bytes" in body["detail"]
    chunks = (big[i:i + 65536] for i in range(0, len(big), 65536))  # no Content-Length: chunked
    code, _, body = _post(local_server, chunks, {"Content-Type": "application/json", "Transfer-Encoding": "chunked"})
    assert code == 413 and "65536 bytes" in body["detail"]
    code, _, body = _post(local_server, json.dumps({"prompt": "p", "options": ["a"]}).encode(),
                          {"Content-Type": "application/json"})
    assert code == 200 and body["options"][0]["option"] == "a"


def test_a_drained_413_keeps_the_connection_usable(local_server):
    conn = http.client.HTTPConnection("127.0.0.1", local_server, timeout=60)
    try:
        conn.request("POST", "/v1/score", body=b"x" * (3 * 2**20), headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        assert r.status == 413 and r.getheader("connection") != "close"
        r.read()
        conn.request("POST", "/v1/score", body=json.dumps({"prompt": "p", "options": ["a"]}).encode(),
                     headers={"Content-Type": "application/json"})
        assert conn.getresponse().status == 200  # the same connection, after the 413
    finally:
        conn.close()


def test_a_body_over_the_drain_bound_gets_413_at_once_and_close(local_server):
    """Past limits.max_drain_bytes the server does not read on: a client that reads before sending all
    (here, one that sends only the headers) gets the 413 with Connection: close."""
    with socket.create_connection(("127.0.0.1", local_server), timeout=30) as s:
        s.sendall(b"POST /v1/score HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 1073741824\r\n\r\n")
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = s.recv(4096)
            if not chunk:
                break
            head += chunk
    status, *lines = head.split(b"\r\n\r\n")[0].decode().split("\r\n")
    assert status.startswith("HTTP/1.1 413")
    assert "connection: close" in [line.lower() for line in lines]


@pytest.mark.parametrize("env,module", [("blocks_bowls", "pybullet"), ("babyai", "minigrid"),
                                        ("virtualhome", "virtualhome_eval")])
def test_every_env_without_a_default_scene_runs_an_instruction_in_its_first_tasks(env, module):
    """Each env whose reset needs a layout runs an instruction of one's own in its first task's scene (its
    start state, or the metadata that names it: a VirtualHome program), with no goal, and lists the
    scene's skills for a session; before, each was a failed trace and a 500."""
    pytest.importorskip(module)
    cfg = ServeConfig(planners=[{"name": "saycan_novf", "label": "No-VF"}], envs=[{"name": env}], viewer_dir=None,
                      limits={"max_steps": 1})
    service = PlannerService(cfg, FakeLM.following(["done"]), local_store(cfg))
    out = service.plan({"instruction": "do the thing", "max_steps": 1})
    assert out["error"] is None and out["task_id"] == "serve" and out["execution_success"] is None
    if env != "virtualhome":  # its 40,561 skills are over the session limit: a 422 that says so
        assert service.create_session({"instruction": "do the thing"})["skills"]


def test_stream_takes_a_json_boolean_only():
    """The slow fuzz's find: ``"stream": 0`` was accepted (Python's ``0 == False`` satisfied ``Literal[False]``)
    while the schema's ``stream`` is ``false`` or null."""
    from groundplan.serve.openai_api import CompletionRequest

    for ok in (False, None):
        assert CompletionRequest.model_validate({"model": "m", "prompt": "x", "stream": ok}).stream is ok
    for bad in (0, 0.0, 1, True, "false"):
        with pytest.raises(ValidationError):
            CompletionRequest.model_validate({"model": "m", "prompt": "x", "stream": bad})
