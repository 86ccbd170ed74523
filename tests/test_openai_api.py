"""``groundplan serve`` as an OpenAI-compatible server (``/v1/completions``, ``/v1/models``), with the real
embedded SmolLM2-135M, called by the official ``openai`` client over real HTTP: echo + logprobs scoring
equals the engine's, sampling goes through the engine, the API's token, limits and 4xx rules hold, and
``llm.backend: openai`` pointed at it makes the same SayCan decisions as the in-process ``hf`` backend.

The fast tests serve ``local_app`` (what ``groundplan serve --local`` runs) from uvicorn in a thread, over
the session's model; the slow ones start ``groundplan serve`` itself (``--local`` and on Ray) and run
``groundplan plan`` against it."""
from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import requests
import torch
import yaml

from groundplan.llm.base import GenerationParams
from groundplan.llm.openai_backend import OpenAILanguageModel, option_start
from groundplan.serve.api import build_api
from groundplan.serve.config import ServeConfig
from groundplan.serve.local import LocalBackend

openai = pytest.importorskip("openai")

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "serve-test-token"
MODEL = "smollm2-135m-instruct"
PROMPT = "Human: How would you bring me a coke can?\nRobot: 1."
OPTIONS = [" find a coke can", " find an apple", " done", " pick up the coke can", " go to the table"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def local_backend(lm):
    cfg = ServeConfig(viewer_dir=None, limits={"max_body_bytes": 8192, "max_new_tokens": 64, "max_samples": 8,
                                               "max_options": 8}, scorer={"max_batch_size": 16})
    return cfg, LocalBackend(cfg, lm)


@pytest.fixture(scope="module")
def server(lm, local_backend):
    """The serve API with the real model on a real port (uvicorn in a thread): ``local_app``, what
    ``groundplan serve --local`` runs."""
    import uvicorn

    cfg, backend = local_backend
    port = _free_port()
    app = build_api(cfg, backend, llm_name=lm.name, token=TOKEN)
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    for _ in range(400):
        if srv.started:
            break
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}/v1"
    srv.should_exit = True
    thread.join(timeout=10)


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server, api_key=TOKEN, max_retries=0)


def full_forward_logprobs(lm, ids: list[int]) -> list[float]:
    """Reference: one uncached forward of the whole sequence."""
    with torch.inference_mode():
        lp = torch.log_softmax(lm.model(input_ids=torch.as_tensor([ids])).logits[0].float(), dim=-1)
    return lp[:-1].gather(1, torch.as_tensor(ids[1:]).unsqueeze(1)).squeeze(1).tolist()


def test_models_lists_the_served_model_behind_the_token(client, server):
    assert [m.id for m in client.models.list().data] == [MODEL]
    assert requests.get(f"{server}/models", timeout=30).status_code == 401
    with pytest.raises(openai.PermissionDeniedError):
        openai.OpenAI(base_url=server, api_key="wrong", max_retries=0).models.list()


def test_echo_logprobs_score_options_as_the_engine_does(client, lm):
    """SayCan's pattern: every prompt + option, echo, logprobs 1, max_tokens 0."""
    r = client.completions.create(model=MODEL, prompt=[PROMPT + o for o in OPTIONS], max_tokens=0, echo=True, logprobs=1)
    assert [c.index for c in r.choices] == list(range(len(OPTIONS)))
    want = lm.score(PROMPT, OPTIONS)
    for option, choice, ref in zip(OPTIONS, r.choices, want):
        lp = choice.logprobs
        assert choice.text == PROMPT + option and choice.finish_reason == "length"
        assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
        assert all(len(t) == 1 for t in lp.top_logprobs[1:])
        assert all(lp.top_logprobs[j][tok] == pytest.approx(lp.token_logprobs[j], abs=1e-5)
                   for j, tok in enumerate(lp.tokens) if j and tok in lp.top_logprobs[j])
        assert [choice.text[o:o + len(t)] for o, t in zip(lp.text_offset, lp.tokens)] == lp.tokens
        first = option_start(len(PROMPT), len(choice.text), lp.tokens, lp.text_offset)
        assert len(lp.tokens) - first == ref.num_tokens
        assert sum(lp.token_logprobs[first:]) == pytest.approx(ref.logprob_sum, abs=1e-3)
    ids = lm.tokenizer(PROMPT + OPTIONS[0]).input_ids
    assert r.choices[0].logprobs.token_logprobs[1:] == pytest.approx(full_forward_logprobs(lm, ids), abs=1e-3)
    assert r.usage.prompt_tokens == sum(len(c.logprobs.tokens) for c in r.choices) and r.usage.completion_tokens == 0


def test_token_id_prompts_and_top_logprobs(client, lm):
    ids = lm.tokenizer(PROMPT).input_ids
    r = client.completions.create(model=MODEL, prompt=[ids, ids[:5]], max_tokens=0, echo=True, logprobs=3)
    text = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=0, echo=True, logprobs=3).choices[0]
    assert r.choices[0].text == PROMPT and r.choices[0].logprobs.tokens == text.logprobs.tokens
    assert r.choices[0].logprobs.token_logprobs[1:] == pytest.approx(text.logprobs.token_logprobs[1:], abs=1e-4)
    assert all(len(t) == 3 for t in r.choices[0].logprobs.top_logprobs[1:])
    best = [max(t.values()) for t in r.choices[0].logprobs.top_logprobs[1:]]
    assert all(b >= v - 1e-5 for b, v in zip(best, r.choices[0].logprobs.token_logprobs[1:]))
    assert len(r.choices[1].logprobs.tokens) == 5
    single = client.completions.create(model=MODEL, prompt=ids, max_tokens=0, echo=True, logprobs=0)
    assert len(single.choices) == 1 and single.choices[0].logprobs.top_logprobs[1] == {}


def test_sampling_goes_through_the_engine(client, lm):
    prompt = "Human: Say hello.\nRobot:"
    r = client.completions.create(model=MODEL, prompt=prompt, max_tokens=8, n=2, temperature=0, logprobs=2, stop=["\n"])
    greedy = lm.generate(prompt, GenerationParams(temperature=0, max_new_tokens=8, stop=("\n",)))[0]
    assert [c.text for c in r.choices] == [greedy.text] * 2 and r.choices[0].finish_reason == greedy.finish_reason
    lp = r.choices[0].logprobs
    assert "".join(lp.tokens) == greedy.text and lp.text_offset[0] == len(prompt)
    assert sum(lp.token_logprobs) / len(lp.token_logprobs) == pytest.approx(greedy.logprob_mean, abs=1e-3)
    assert r.usage.completion_tokens == 2 * greedy.num_tokens and r.usage.prompt_tokens == len(lm.tokenizer(prompt).input_ids)
    seeded = [client.completions.create(model=MODEL, prompt=prompt, max_tokens=6, temperature=0.9, seed=3).choices[0].text
              for _ in range(2)]
    assert seeded[0] == seeded[1]
    echoed = client.completions.create(model=MODEL, prompt=prompt, max_tokens=4, temperature=0, echo=True, logprobs=1)
    assert echoed.choices[0].text.startswith(prompt) and echoed.choices[0].logprobs.token_logprobs[0] is None


def test_lm_eval_style_requests_take_two_grouped_echo_calls_whatever_the_prompt_count(client, local_backend, monkeypatch):
    """lm-evaluation-harness's ``local-completions`` scores with token-id prompts, echo, logprobs 1 and
    max_tokens 1: the prompts' log-probs come from one grouped call (a call per text costs a forward pass
    each), and equal what the max_tokens 0 echo gives. That call keeps each text's next-token logits, so the
    one-token samples run no forward of their own, and their log-probs come with them (no second call)."""
    _, backend = local_backend
    ids = [backend.lm.tokenizer(PROMPT + o).input_ids for o in OPTIONS]
    calls = []
    real = backend.prompt_logprobs

    async def counted(prompts, top_k, keep_next=False):
        calls.append((len(prompts), keep_next))
        return await real(prompts, top_k, keep_next)

    monkeypatch.setattr(backend, "prompt_logprobs", counted)
    kept = backend.lm.stats.kept_next_tokens
    r = client.completions.create(model=MODEL, prompt=ids, max_tokens=1, temperature=0, echo=True, logprobs=1)
    assert calls == [(len(OPTIONS), True)]
    assert backend.lm.stats.kept_next_tokens == kept + len(OPTIONS)
    plain = client.completions.create(model=MODEL, prompt=ids, max_tokens=0, echo=True, logprobs=1)
    for got, want, toks in zip(r.choices, plain.choices, ids):
        head = got.logprobs.token_logprobs[:len(toks)]
        assert head[0] is None and head[1:] == pytest.approx(want.logprobs.token_logprobs[1:], abs=1e-4)


@pytest.mark.parametrize("body,code,words", [
    ({"model": "gpt-9", "prompt": "x", "max_tokens": 0}, 422, f"model: Input should be '{MODEL}'"),
    ({"model": MODEL, "prompt": "x", "logprobs": 6}, 422, "logprobs: Input should be less than or equal to 5"),
    ({"model": MODEL, "prompt": "x", "stream": True}, 422, "stream: Input should be False"),
    ({"model": MODEL, "prompt": "x", "max_tokens": 65}, 422, "max_tokens: Input should be less than or equal to 64"),
    ({"model": MODEL, "prompt": ["a", "b", "c"], "n": 3}, 422, "n x prompts is 9 samples; the limit is 8"),
    ({"model": MODEL, "prompt": ["x"] * 9, "max_tokens": 0}, 422, "prompt.texts: List should have at most 8 items"),
    ({"model": MODEL, "prompt": "", "max_tokens": 0}, 422, "prompt.text: String should have at least 1 character"),
    ({"model": MODEL, "prompt": 5}, 422, "prompt: must be a text, a list of texts, a list of token ids or a list"),
    ({"model": MODEL, "prompt": [[1, 10 ** 9]], "max_tokens": 0, "echo": True, "logprobs": 0}, 400, "vocabulary"),
    ({"model": MODEL, "prompt": [[1, -1]], "max_tokens": 0}, 422, "prompt.token-id lists.0.1: Input should be greater"),
    ({"model": MODEL, "prompt": "x", "frequency_penalty": 0.5}, 422, "frequency_penalty: Input should be less than"),
    ({"model": MODEL, "prompt": "x", "best_of": 1, "n": 2}, 422, "best_of is only supported as 1 with n 1"),
    ({"model": MODEL, "prompt": "x", "stop": ["a", "b", "c", "d", "e"]}, 422, "stop.texts: List should have at most 4"),
    ({"model": MODEL, "prompt": "x", "temperature": -1}, 422, "temperature"),
    ({"model": MODEL, "prompt": "x", "best_of_all": 2}, 422, "best_of_all"),
    ({"model": MODEL, "prompt": [1.5]}, 422, "prompt"),
])
def test_bad_requests_get_4xx_with_a_message(server, body, code, words):
    r = requests.post(f"{server}/completions", json=body, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60)
    assert r.status_code == code, r.text
    assert words in r.json()["detail"]


def test_body_limit_and_token_apply(server):
    big = {"model": MODEL, "prompt": "x" * 9000, "max_tokens": 0}
    assert requests.post(f"{server}/completions", json=big, headers={"Authorization": f"Bearer {TOKEN}"},
                         timeout=30).status_code == 413
    assert requests.post(f"{server}/completions", json={"model": MODEL, "prompt": "x"}, timeout=30).status_code == 401


def test_prompt_logprobs_reuse_the_cached_prompt_and_equal_a_full_forward(lm):
    """The engine side of echo scoring: the texts of the next step's options, scored one per call as an
    unbatched server does, run only their new tokens (the prompt's key/values and per-position log-probs
    come from the cache), and equal one uncached forward."""
    from groundplan.planners.saycan import load_prompt

    prompt = load_prompt("saycan_kitchen") + "\nHuman: How would you put the sponge in the trash?\nRobot: 1."
    lm.prompt_logprobs([prompt + o for o in OPTIONS], 1)
    step2 = prompt + " find a sponge, 2."
    before = lm.stats.forward_tokens
    got = [lm.prompt_logprobs([step2 + o], 1)[0] for o in OPTIONS]
    prompt_tokens = len(lm.tokenizer(step2).input_ids)
    assert lm.stats.forward_tokens - before < 4 * len(OPTIONS) * 8 < prompt_tokens  # not the prompt, per text
    assert list(got[-1].logprobs[1:]) == pytest.approx(full_forward_logprobs(lm, list(got[-1].token_ids)), abs=1e-3)
    for g, ref in zip(got, lm.score(step2, OPTIONS)):
        first = option_start(len(step2), len(g.text), g.tokens, g.offsets)
        assert sum(g.logprobs[first:]) == pytest.approx(ref.logprob_sum, abs=1e-3)
        assert all(top[0][1] >= lp - 1e-5 for top, lp in zip(g.top[1:], g.logprobs[1:]))


def test_the_openai_backend_makes_the_hf_backends_saycan_decisions(server, lm, local_backend):
    """Same skills chosen, every option's log-prob within 1e-3, over a few kitchen steps; the server
    batched each step's concurrent echo requests."""
    from groundplan.config import PlannerSpec
    from groundplan.envs.kitchen.env import KitchenEnv
    from groundplan.factory import make_planner
    from groundplan.rollout.episode import run_episode

    os.environ["GP_SERVE_TEST_TOKEN"] = TOKEN
    remote = OpenAILanguageModel(MODEL, base_url=server, api_key_env="GP_SERVE_TEST_TOKEN", max_concurrency=16)
    spec = PlannerSpec(name="saycan", affordance="kitchen_value", options={"prune": False})
    env = KitchenEnv()
    for task_id in ("kitchen/nl_nouns/00", "kitchen/structured/02"):
        task = next(t for t in env.tasks() if t.task_id == task_id)
        local = run_episode(make_planner(spec, lm, 2), env, task, 0, max_steps=2)
        over_http = run_episode(make_planner(spec, remote, 2), env, task, 0, max_steps=2)
        assert local.error is None and over_http.error is None, (local.error, over_http.error)
        assert [s.chosen for s in over_http.steps] == [s.chosen for s in local.steps]
        for a, b in zip(local.steps, over_http.steps):
            assert [c.skill for c in a.candidates] == [c.skill for c in b.candidates]
            assert max(abs(x.llm - y.llm) for x, y in zip(a.candidates, b.candidates)) < 1e-3
    assert local_backend[1].scorer._echo.stats.max_batch_seen > 1


# ------------------------------------------------------------------------------ the real commands


def _serve(tmp_path: Path, ray: bool) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    cfg = tmp_path / "serve.yaml"
    small = {"placement": {"num_cpus": 0.1}, "autoscaling": {"min_replicas": 1, "max_replicas": 1}}
    cfg.write_text(yaml.safe_dump({"name": "gpopenai", "viewer_dir": None, "scorer": small, "planner": small,
                                   "ingress": small,
                                   "planners": [{"name": "saycan", "label": "SayCan", "affordance": "kitchen_value"}]}))
    env = {**os.environ, "GROUNDPLAN_SERVE_TOKEN": TOKEN, "RAY_ADDRESS": "local", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(p for p in [str(ROOT), os.environ.get("PYTHONPATH", "")] if p)}
    cmd = [sys.executable, "-m", "groundplan.cli", "serve", str(cfg), "--port", str(port)] + ([] if ray else ["--local"])
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    base = f"http://127.0.0.1:{port}/v1"
    for _ in range(1200):
        assert proc.poll() is None, f"serve exited early: {proc.communicate()[1][-3000:]}"
        try:
            if requests.get(f"{base}/models", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10).status_code == 200:
                return proc, base
        except requests.RequestException:
            pass
        time.sleep(0.25)
    proc.kill()
    pytest.fail("serve never answered /v1/models")


def _stop(proc: subprocess.Popen) -> None:
    import signal

    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()


def _plan(*extra: str) -> list[str]:
    env = {**os.environ, "GP_SERVE_TEST_TOKEN": TOKEN, "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-m", "groundplan.cli", "plan", "How would you bring me a coke can?",
                          "--env", "kitchen", "--max-steps", "3", *extra],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200, check=False)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "episode error" not in out.stdout, out.stdout[-2000:]
    return [line for line in out.stdout.splitlines() if line.startswith(("Robot:", "step "))]


@pytest.mark.slow
def test_groundplan_plan_over_groundplan_serve_chooses_what_hf_chooses(tmp_path):
    """``groundplan plan --set llm.backend=openai ...`` against ``groundplan serve --local``: the same steps
    as the in-process hf backend (the log-probs are compared at 1e-3 in the test above; the printed
    probabilities are rounded, so a 1e-5 difference could flip a digit)."""
    proc, base = _serve(tmp_path, ray=False)
    try:
        over_http = _plan("--set", "llm.backend=openai", "--set", f"llm.options.base_url={base}",
                          "--set", "llm.options.api_key_env=GP_SERVE_TEST_TOKEN")
    finally:
        _stop(proc)
    local = _plan()
    assert any(line.startswith("Robot: 1.") for line in local)
    assert over_http == local


@pytest.mark.slow
def test_serve_on_ray_answers_echo_requests_as_the_engine_scores(tmp_path, lm):
    """``groundplan serve`` on Ray: concurrent echo requests go through the Scorer deployment's batched
    ``prompt_logprobs`` and give the engine's scores; a bad token id is the sender's 400."""
    proc, base = _serve(tmp_path, ray=True)
    try:
        os.environ["GP_SERVE_TEST_TOKEN"] = TOKEN
        remote = OpenAILanguageModel(MODEL, base_url=base, api_key_env="GP_SERVE_TEST_TOKEN", max_concurrency=8,
                                     timeout_s=300)
        got = remote.score(PROMPT, OPTIONS * 2)
        bad = requests.post(f"{base}/completions", json={"model": MODEL, "prompt": [[10 ** 9]], "max_tokens": 0,
                                                         "echo": True, "logprobs": 1},
                            headers={"Authorization": f"Bearer {TOKEN}"}, timeout=120)
    finally:
        _stop(proc)
    want = lm.score(PROMPT, OPTIONS * 2)
    assert [g.logprob_sum for g in got] == pytest.approx([w.logprob_sum for w in want], abs=1e-3)
    assert bad.status_code == 400 and re.search("vocabulary", bad.json()["detail"])
