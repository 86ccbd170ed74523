"""One scorer host behind eval's Ray actor, Serve's scorer deployment and ``groundplan serve --local``:
the outputs of those paths equal the ones recorded before they shared the host (scores, stats without
timing fields, and the serve API's score, plan and session answers), and Ray's errors read one way."""
from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path

import numpy as np
import pytest

from groundplan.actors.pool import classify_ray_error, is_app_error
from groundplan.actors.scorer import LLMScorer
from groundplan.llm.base import GenerationParams
from tests.fakes import FakeLM

ray = pytest.importorskip("ray")

GOLDEN = Path(__file__).parent / "golden" / "expected_scorer_paths.json"
PLAN = ["find a coke can", "pick up the coke can", "bring it to you", "put down the coke can", "done"]
#: picklable by reference, for the Ray actor
LM_FACTORY = functools.partial(FakeLM.following, PLAN, generations=["find a coke can\nx", "done"])
#: stats that measure time or name the process: not part of the behaviour compared
TIMING = {"busy_s", "options_per_s", "uptime_s", "pid", "items_per_s"}


def _requests(n: int) -> list[tuple[str, list[str]]]:
    """Five prompts, options that repeat across them: the memo has hits to count."""
    return [(f"Human: task {i % 5}\nRobot: 1." + " x," * (i % 3), [" find a coke can", " done", f" option {i % 4}"])
            for i in range(n)]


def comparable(x):
    """JSON-like, without timing fields, the traces' bulk (whole traces, skill lists) or float noise."""
    if isinstance(x, dict):
        return {k: comparable(v) for k, v in sorted(x.items())
                if k not in TIMING and k not in ("trace", "skills") and "latency" not in k
                and not k.endswith("_ms") and not k.endswith("_s")}
    if _is_candidates(x):
        return [comparable(v) for v in x[:4]]
    if isinstance(x, (list, tuple)):
        return [comparable(v) for v in x]
    if dataclasses.is_dataclass(x):
        return comparable(dataclasses.asdict(x))
    if isinstance(x, np.ndarray):
        return comparable(x.tolist())
    if isinstance(x, float):
        return round(x, 9)
    return x


def _is_candidates(x) -> bool:
    return isinstance(x, list) and bool(x) and isinstance(x[0], dict) and {"skill", "llm", "combined"} <= set(x[0])


def ray_path() -> dict:
    """Eval's scorer actor: single calls, one score_batch (one coalesced batch), generate, embed, stats."""
    from groundplan.actors.scorer import make_scorer_actor

    s = make_scorer_actor(lm_factory=LM_FACTORY, batch_window_ms=50, max_batch=16, num_cpus=0)
    try:
        out = {"name": ray.get(s.get_name.remote())}
        out["sequential"] = [ray.get(s.score.remote(p, o)) for p, o in _requests(6)]
        out["batch"] = ray.get(s.score_batch.remote(_requests(10)))
        out["stats_after_scores"] = ray.get(s.stats.remote())
        params = GenerationParams(n=1, temperature=0.0, max_new_tokens=8, stop=("\n",))
        out["generate"] = ray.get(s.generate.remote("Task: Drink\nStep 1:", params))
        out["embed"] = ray.get(s.embed.remote(["a coke can", "the table"]))
        out["stats"] = ray.get(s.stats.remote())
    finally:
        ray.kill(s)
    return comparable(out)


def serve_path() -> dict:
    """The serve API in process (``--local``'s backend): scores, errors, plans and a closed-loop session."""
    from fastapi.testclient import TestClient

    from groundplan.serve.api import build_api
    from groundplan.serve.config import ServeConfig
    from groundplan.serve.local import LocalBackend

    cfg = ServeConfig(planners=[{"name": "saycan", "label": "SayCan", "affordance": "kitchen_value"},
                                {"name": "saycan_novf", "label": "No-VF"}],
                      limits={"max_options": 4, "max_sessions": 2, "max_body_bytes": 4096}, viewer_dir=None)
    c = TestClient(build_api(cfg, LocalBackend(cfg, LM_FACTORY()), llm_name="fake-lm"))
    prompt = "Human: bring me a coke\nRobot: 1."
    out = {"score": c.post("/v1/score", json={"prompt": prompt, "options": [" find a coke can", " done", " find a coke can"],
                                              "request_id": "r1"}).json(),
           "score2": c.post("/v1/score", json={"prompt": prompt + " find a coke can,",
                                               "options": [" pick up the coke can", " done"]}).json(),
           "score_bad": [c.post("/v1/score", json={"prompt": "p", "options": ["a", "b", "c", "d", "e"]}).json(),
                         c.post("/v1/score", json={"prompt": "p", "options": [" "]}).json()]}
    for planner in ("SayCan", "No-VF"):
        out[f"plan_{planner}"] = _recorded_view(c.post("/v1/plan", json={
            "task_id": "kitchen/nl_nouns/00", "env": "kitchen", "planner": planner, "max_steps": 6}).json())
    out["plan_instruction"] = _recorded_view(c.post("/v1/plan", json={
        "instruction": "bring me a coke can", "planner": "No-VF", "max_steps": 6}).json())
    created = c.post("/v1/sessions", json={"instruction": "bring me a coke can", "planner": "SayCan"}).json()
    sid = created.pop("session_id")
    out["session_create"], out["session_steps"] = created, []
    for _ in range(6):
        step = c.post(f"/v1/sessions/{sid}/step", json={"observation": {"affordances": {"done": 0.1}}}).json()
        step.pop("session_id", None)
        out["session_steps"].append(step)
        if step.get("done"):
            break
    return comparable(out)


def _recorded_view(plan: dict) -> dict:
    """The fields of a ``/v1/plan`` answer that the recording compared (it was made when the answer was a
    summary of the trace beside the whole trace; the answer is now the trace once, with more fields)."""
    steps = [{k: s[k] for k in ("index", "chosen", "done", "success", "feedback", "prompt_delta")}
             | {"candidates": [{k: c[k] for k in ("skill", "llm", "affordance", "combined")} for c in s["candidates"]]}
             for s in plan["steps"]]
    return {**{k: plan[k] for k in ("episode_id", "planner", "env", "instruction", "terminated", "execution_success",
                                    "plan_success", "goal_details", "error", "plan")}, "steps": steps}


def test_serve_api_answers_as_recorded():
    assert serve_path() == json.loads(GOLDEN.read_text())["serve"]


def test_eval_scorer_actor_answers_as_recorded(ray_local):
    assert ray_path() == json.loads(GOLDEN.read_text())["ray"]


def test_every_path_wraps_the_one_host():
    """Serve's deployment and --local hold the eval actor's class; nothing else batches scores."""
    from groundplan.serve import app
    from groundplan.serve.config import ServeConfig
    from groundplan.serve.local import LocalBackend
    from groundplan.serve.service import ServeScorer

    assert app.Scorer.func_or_class is ServeScorer and issubclass(ServeScorer, LLMScorer)
    assert isinstance(LocalBackend(ServeConfig(viewer_dir=None), FakeLM()).scorer, ServeScorer)


def test_local_planners_score_through_the_host():
    """``--local``'s planner threads reach the model through the scorer host (its batches, its memo), as a
    Serve planner replica does through the scorer deployment: an episode's scoring is in the host's stats,
    and the steps' repeated prompts are memo hits."""
    import asyncio

    from fastapi.testclient import TestClient

    from groundplan.serve.api import build_api
    from groundplan.serve.config import ServeConfig
    from groundplan.serve.local import LocalBackend

    cfg = ServeConfig(planners=[{"name": "saycan_novf", "label": "No-VF"}], viewer_dir=None)
    lm = LM_FACTORY()
    backend = LocalBackend(cfg, lm)
    c = TestClient(build_api(cfg, backend, llm_name="fake-lm"))
    body = {"task_id": "kitchen/nl_nouns/00", "env": "kitchen", "planner": "No-VF", "max_steps": 3}
    assert c.post("/v1/plan", json=body).status_code == 200
    stats = asyncio.run(backend.scorer.stats())
    assert stats["requests"] == 3 and len(lm.score_calls) == 3
    assert c.post("/v1/plan", json=body).status_code == 200  # the same episode again: every score from the memo
    assert asyncio.run(backend.scorer.stats())["requests"] == 6 and len(lm.score_calls) == 3


def test_ray_errors_read_one_way():
    from ray.exceptions import ActorDiedError, ActorUnavailableError, GetTimeoutError, RayTaskError, WorkerCrashedError

    inside = ValueError("bad input")
    app_error = RayTaskError("score", "Traceback ...", inside).as_instanceof_cause()
    assert classify_ray_error(app_error) == ("app", inside) and is_app_error(app_error)
    for died in (ActorDiedError(), ActorUnavailableError("gone", None), WorkerCrashedError()):
        assert classify_ray_error(died).kind == "actor" and not is_app_error(died)
    assert classify_ray_error(GetTimeoutError("slow")).kind == "other"
    plain = KeyError("x")
    assert classify_ray_error(plain) == ("other", plain)
