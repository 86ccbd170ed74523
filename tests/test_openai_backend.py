"""``llm.backend: openai`` against real local HTTP stand-in servers: SayCan-style echo scoring, sampling,
chat mode (refused for scoring planners when the config loads; a Zero-Shot episode over a chat-only
server), retries and faults (429 then 200, 503, a hang past the timeout, a closed port, a server without
prompt log-probs), infrastructure failures in traces, and the API key never leaking into traces, logs,
MLflow or error messages."""
from __future__ import annotations

import json
import logging
import re
import socket
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
import yaml

from groundplan.config import EvalConfig, load_config
from groundplan.core.errors import InvalidInputError
from groundplan.llm.base import GenerationParams
from groundplan.llm.openai_backend import (
    LLMServiceError,
    OpenAILanguageModel,
    option_start,
)

ROOT = Path(__file__).resolve().parents[1]
KEY = "sk-test-0f9e8d7c6b5a-never-leak"  # what the key env var holds in these tests
PROMPT = "Human: How would you bring me a coke can?\nRobot: 1."
OPTIONS = [" find a coke can", " find an apple", " done", " pick up the coke can"]

Behave = Callable[[str, dict[str, Any], dict[str, str]], tuple[int, Any, dict[str, str]]]


def words(text: str) -> list[str]:
    """The stand-in's tokenizer: each word with the whitespace before it."""
    return re.findall(r"\s*\S+", text)


def word_logprob(token: str) -> float:
    return -0.01 - (zlib.crc32(token.encode()) % 1000) / 200


def echo_choice(text: str) -> dict[str, Any]:
    """What an OpenAI-style server answers for ``echo`` + ``logprobs`` + ``max_tokens: 0``."""
    tokens = words(text)
    offsets = list(np.cumsum([0] + [len(t) for t in tokens[:-1]]))
    return {"index": 0, "text": text, "finish_reason": "length",
            "logprobs": {"tokens": tokens, "token_logprobs": [None] + [word_logprob(t) for t in tokens[1:]],
                         "top_logprobs": [None] + [{t: word_logprob(t)} for t in tokens[1:]],
                         "text_offset": [int(o) for o in offsets]}}


def completions_server(path: str, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, Any, dict[str, str]]:
    """A completions server: echo scoring, and sampling with canned text."""
    if path != "/v1/completions":
        return 404, {"error": "no such route"}, {}
    if body.get("echo") and body.get("max_tokens") == 0:
        return 200, {"choices": [echo_choice(body["prompt"])]}, {}
    choices = [{"index": i, "text": f" sample {i}", "finish_reason": "stop" if i % 2 else "length",
                "logprobs": {"tokens": [" sample", f" {i}"], "token_logprobs": [-1.0, -0.5 * i],
                             "top_logprobs": None, "text_offset": [0, 7]}} for i in range(body.get("n", 1))]
    return 200, {"choices": choices}, {}


class StandIn:
    """A real HTTP server on 127.0.0.1 that answers as ``behave`` says and records every request."""

    def __init__(self, behave: Behave, delay_s: float = 0.0) -> None:
        self.behave, self.delay_s = behave, delay_s
        self.requests: list[tuple[str, dict[str, Any], dict[str, str]]] = []
        self.in_flight = self.max_in_flight = 0
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                headers = {k.lower(): v for k, v in self.headers.items()}
                with outer._lock:
                    outer.requests.append((self.path, body, headers))
                    outer.in_flight += 1
                    outer.max_in_flight = max(outer.max_in_flight, outer.in_flight)
                try:
                    time.sleep(outer.delay_s)
                    status, payload, extra = outer.behave(self.path, body, headers)
                finally:
                    with outer._lock:
                        outer.in_flight -= 1
                data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    for k, v in {"Content-Type": "application/json", **extra}.items():
                        self.send_header(k, v)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout test)
                    pass

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def standin():
    servers: list[StandIn] = []

    def start(behave: Behave = completions_server, delay_s: float = 0.0) -> StandIn:
        servers.append(StandIn(behave, delay_s))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


@pytest.fixture(autouse=True)
def _key(monkeypatch):
    monkeypatch.setenv("GP_TEST_KEY", KEY)


def backend(url: str, **options: Any) -> OpenAILanguageModel:
    return OpenAILanguageModel("standin-model", base_url=url, api_key_env="GP_TEST_KEY", backoff_s=0.01, **options)


def expected_sum(prompt: str, option: str) -> tuple[float, int]:
    tokens = words(prompt + option)
    offsets = list(np.cumsum([0] + [len(t) for t in tokens[:-1]]))
    first = option_start(len(prompt), len(prompt + option), tokens, offsets)
    return sum(word_logprob(t) for t in tokens[first:]), len(tokens) - first


# ------------------------------------------------------------------------------------------- scoring


def test_each_option_is_one_echo_request_sent_concurrently_and_scored_over_its_own_tokens(standin):
    server = standin(delay_s=0.15)
    lm = backend(server.url, max_concurrency=3)
    scores = lm.score(PROMPT, OPTIONS * 2)
    assert [s.option for s in scores] == OPTIONS * 2
    for s in scores:
        total, n = expected_sum(PROMPT, s.option)
        assert s.logprob_sum == pytest.approx(total) and s.num_tokens == n and s.logprob_mean == pytest.approx(total / n)
    bodies = [b for _, b, _ in server.requests]
    assert sorted(b["prompt"] for b in bodies) == sorted(PROMPT + o for o in OPTIONS * 2)
    assert all(b["echo"] is True and b["logprobs"] == 1 and b["max_tokens"] == 0 and b["model"] == "standin-model"
               for b in bodies)
    assert server.max_in_flight == 3  # 8 requests, at most max_concurrency at once
    assert all(h["authorization"] == f"Bearer {KEY}" for _, _, h in server.requests)
    batch = lm.score_batch([(PROMPT, OPTIONS[:2]), ("Robot: 2.", [" done"])])
    assert [[s.option for s in r] for r in batch] == [OPTIONS[:2], [" done"]]
    assert batch[1][0].logprob_sum == pytest.approx(expected_sum("Robot: 2.", " done")[0])


def test_an_options_tokens_are_those_ending_past_the_prompt():
    # the usual case: the option starts a token of its own ("text_offset >= len(prompt)")
    tokens, offsets = ["Robot", ":", " 1", ".", " done"], [0, 5, 6, 8, 9]
    assert option_start(len("Robot: 1."), len("Robot: 1. done"), tokens, offsets) == 4
    # a token straddling the prompt's end ("pine" + "apple") is the option's, as in the hf engine
    tokens, offsets = ["I", " ate", " a", " pineapple"], [0, 1, 5, 7]
    assert option_start(len("I ate a pine"), len("I ate a pineapple"), tokens, offsets) == 3
    # a prompt ending in a space: the option's first token carries it
    tokens, offsets = ["Robot", ":", " find"], [0, 5, 6]
    assert option_start(len("Robot: "), len("Robot: find"), tokens, offsets) == 2
    assert option_start(len("Robot: find"), len("Robot: find"), tokens, offsets) is None


def test_generate_sends_the_decoding_parameters_and_returns_generations(standin):
    server = standin()
    lm = backend(server.url)
    gens = lm.generate("Task: make tea\nStep 1:", GenerationParams(n=3, temperature=0.3, top_p=0.9, max_new_tokens=12,
                                                                    stop=("\n",), seed=7))
    body = server.requests[0][1]
    assert server.requests[0][0] == "/v1/completions"
    assert {k: body[k] for k in ("prompt", "n", "temperature", "top_p", "max_tokens", "stop", "seed", "logprobs")} == {
        "prompt": "Task: make tea\nStep 1:", "n": 3, "temperature": 0.3, "top_p": 0.9, "max_tokens": 12, "stop": ["\n"],
        "seed": 7, "logprobs": 1}
    assert [g.text for g in gens] == [" sample 0", " sample 1", " sample 2"]
    assert [g.finish_reason for g in gens] == ["length", "stop", "length"]
    assert [g.logprob_mean for g in gens] == [pytest.approx(-0.5), pytest.approx(-0.75), pytest.approx(-1.0)]
    assert [g.num_tokens for g in gens] == [2, 2, 2]


def test_server_embeddings_are_requested_in_order_and_normalised(standin):
    def embeddings(path, body, headers):
        assert path == "/v1/embeddings"
        rows = [{"index": i, "embedding": [float(len(t)), 1.0, 0.0]} for i, t in enumerate(body["input"])]
        return 200, {"data": rows[::-1]}, {}  # out of order: the backend sorts by index

    server = standin(embeddings)
    lm = backend(server.url, embeddings="server", embedding_model="embedder-x")
    vectors = lm.embed(["a", "abcd"])
    assert server.requests[0][1] == {"model": "embedder-x", "input": ["a", "abcd"]}
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0)
    assert vectors[1, 0] / vectors[1, 1] == pytest.approx(4.0) and vectors[0, 0] / vectors[0, 1] == pytest.approx(1.0)


# --------------------------------------------------------------------------------------------- faults


def test_429_then_200_is_retried_after_the_servers_retry_after(standin):
    calls = []

    def limited(path, body, headers):
        calls.append(time.perf_counter())
        if len(calls) == 1:
            return 429, {"error": "slow down"}, {"Retry-After": "0.3"}
        return completions_server(path, body, headers)

    server = standin(limited)
    lm = backend(server.url, max_retries=2)
    [score] = lm.score(PROMPT, [" done"])
    assert score.logprob_sum == pytest.approx(expected_sum(PROMPT, " done")[0])
    assert len(server.requests) == 2 and lm.stats.retries == 1
    assert calls[1] - calls[0] >= 0.28  # it waited as the server asked, not the 0.01 s backoff


def test_5xx_is_retried_then_fails_naming_the_url(standin):
    server = standin(lambda p, b, h: (503, {"error": "overloaded"}, {}))
    lm = backend(server.url, max_retries=2)
    with pytest.raises(LLMServiceError) as err:
        lm.score(PROMPT, [" done"])
    assert f"{server.url}/completions answered HTTP 503" in str(err.value)
    assert "gave up after 3 attempt(s)" in str(err.value)
    assert len(server.requests) == 3


def test_a_server_that_hangs_past_the_timeout_fails_naming_the_url(standin):
    server = standin(delay_s=3.0)
    lm = backend(server.url, timeout_s=0.3, max_retries=0)
    t0 = time.perf_counter()
    with pytest.raises(LLMServiceError, match=re.escape(f"no answer from {server.url}/completions within timeout_s=0.3 s")):
        lm.generate("x", GenerationParams(max_new_tokens=2))
    assert time.perf_counter() - t0 < 2.0


def test_a_closed_port_fails_naming_the_url():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    lm = backend(f"http://127.0.0.1:{port}/v1", max_retries=1)
    with pytest.raises(LLMServiceError) as err:
        lm.score(PROMPT, [" done"])
    assert f"cannot connect to http://127.0.0.1:{port}/v1/completions" in str(err.value)
    assert "refused" in str(err.value).lower()


def test_a_server_without_prompt_logprobs_is_refused_at_the_first_call_with_what_it_returned(standin):
    def no_logprobs(path, body, headers):
        return 200, {"choices": [{"index": 0, "text": body["prompt"] + " and more", "logprobs": None,
                                  "finish_reason": "length"}], "marker": "no-prompt-logprobs-here"}, {}

    server = standin(no_logprobs)
    lm = backend(server.url)
    with pytest.raises(LLMServiceError) as err:
        lm.score(PROMPT, OPTIONS)
    message = str(err.value)
    assert "returned no prompt log-probs" in message and "no-prompt-logprobs-here" in message
    assert f"{server.url}/completions" in message
    assert len(server.requests) == 1  # the first request (sent alone, see _echo), nothing retried


def test_llm_failure_after_retries_is_an_infrastructure_failure_not_the_planners(standin):
    from groundplan.config import PlannerSpec
    from groundplan.envs.kitchen.env import KitchenEnv
    from groundplan.factory import make_planner
    from groundplan.rollout.episode import run_episode

    env = KitchenEnv()
    task = env.tasks()[0]
    server = standin(lambda p, b, h: (502, {"error": "bad gateway"}, {}))
    planner = make_planner(PlannerSpec(name="saycan_novf"), backend(server.url, max_retries=1), 3)
    trace = run_episode(planner, env, task, 0)
    assert trace.infrastructure_failure and trace.error.startswith("infrastructure failed: LLMServiceError")
    assert f"{server.url}/completions answered HTTP 502" in trace.error
    assert trace.execution_success is False

    class Broken:  # a planner's own bug stays the planner's failure
        name = "broken"
        max_steps = 3
        declarations = ()
        prompt = ""

        def reset(self, *a, **k):
            pass

        def use_action_model(self, m):
            pass

        def next_step(self, *a):
            raise ValueError("planner bug")

    trace = run_episode(Broken(), env, task, 0)
    assert trace.error.startswith("ValueError: planner bug") and not trace.infrastructure_failure


# ------------------------------------------------------------------------------------ the API key


def test_the_api_key_never_reaches_traces_logs_mlflow_or_errors(standin, tmp_path, caplog):
    def leaky(path, body, headers):  # answers, and on one prompt quotes the request's headers back
        if "LEAK" in body.get("prompt", ""):
            return 500, {"error": f"bad request with headers {headers}"}, {}
        return completions_server(path, body, headers)

    server = standin(leaky)
    caplog.set_level(logging.DEBUG)
    cfg = EvalConfig.model_validate({
        "name": "keycheck", "output_dir": str(tmp_path),
        "llm": {"backend": "openai", "model": "standin-model",
                "options": {"base_url": server.url, "api_key_env": "GP_TEST_KEY", "max_retries": 1, "backoff_s": 0.01}},
        "planners": [{"name": "saycan", "label": "SayCan", "affordance": "kitchen_value"}],
        "tasks": {"ids": ["kitchen/nl_nouns/00"]}, "max_steps": 2,
        "runtime": {"executor": "local", "mlflow": True}})
    from groundplan.pipelines.evaluate.sweep import run_sweep
    from groundplan.pipelines.tracking import flatten

    result = run_sweep(cfg, progress=False, resume=False)
    assert result.traces[0].steps and result.traces[0].error is None
    assert all(h["authorization"] == f"Bearer {KEY}" for _, _, h in server.requests)  # the key was used
    assert result.stats.get("mlflow_run_id")
    params = flatten(cfg.model_dump())
    assert params["llm.options.api_key_env"] == "GP_TEST_KEY" and KEY not in json.dumps(params)
    lm = backend(server.url, max_retries=1)
    with pytest.raises(LLMServiceError) as err:
        lm.score("LEAK", [" x"])
    assert "***" in str(err.value) and KEY not in str(err.value)
    files = [p for p in Path(tmp_path).rglob("*") if p.is_file()]
    assert any(p.name == "traces.jsonl" for p in files) and any("mlruns" in p.parts for p in files)
    for p in files:
        assert KEY.encode() not in p.read_bytes(), p
    assert KEY not in caplog.text and KEY not in repr(lm) and KEY not in json.dumps(vars(lm), default=str)


def test_a_pasted_key_is_refused_without_echoing_it(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"llm": {"backend": "openai", "options": {"api_key_env": KEY}}}))
    with pytest.raises(InvalidInputError) as err:
        load_config(path)
    assert "NAME of an environment variable" in str(err.value) and KEY not in str(err.value)


# ---------------------------------------------------------------------------------------- chat mode


def chat_server(replies: list[list[str]]) -> Behave:
    """A server that only speaks /v1/chat/completions and answers each call with the next replies."""
    def behave(path, body, headers):
        if path != "/v1/chat/completions":
            return 404, {"error": f"{path} not found: this server only has /v1/chat/completions"}, {}
        texts = replies.pop(0) if replies else [""] * body.get("n", 1)
        choices = [{"index": i, "message": {"role": "assistant", "content": t}, "finish_reason": "stop",
                    "logprobs": {"content": [{"token": w, "logprob": -0.25} for w in words(t)]}}
                   for i, t in enumerate((texts * body.get("n", 1))[:body.get("n", 1)])]
        return 200, {"choices": choices}, {}

    return behave


def no_echo_server(path: str, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, Any, dict[str, str]]:
    """A completions server without echo, as many hosted models are: it refuses ``echo`` with a 400 naming it
    and samples as usual."""
    if path == "/v1/completions" and body.get("echo"):
        return 400, {"error": {"message": "echo is not supported with this model (no-echo-marker)", "param": "echo"}}, {}
    return completions_server(path, body, headers)


def echo_ignored_server(path: str, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, Any, dict[str, str]]:
    """A completions server that ignores ``echo``: 200, a generated text, no prompt log-probs."""
    return 200, {"choices": [{"index": 0, "text": " ok", "logprobs": None, "finish_reason": "stop"}],
                 "marker": "echo-ignored-marker"}, {}


def kitchen_yaml(tmp_path: Path, url: str) -> Path:
    """The shipped SayCan kitchen config over an OpenAI-compatible server at ``url``, one task, no MLflow."""
    data = yaml.safe_load((ROOT / "configs" / "saycan_kitchen.yaml").read_text())
    data.update(llm={"backend": "openai", "model": "standin-model",
                     "options": {"base_url": url, "api_key_env": "GP_TEST_KEY", "max_retries": 0}},
                tasks={"ids": ["kitchen/nl_nouns/00"]}, max_steps=3, output_dir=str(tmp_path / "out"),
                runtime={"executor": "local", "mlflow": False})
    path = tmp_path / "kitchen.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("behave, answer", [(no_echo_server, "no-echo-marker"),
                                            (echo_ignored_server, "echo-ignored-marker")])
def test_a_server_without_echo_is_refused_when_a_scoring_config_loads_not_in_every_episode(standin, tmp_path, capsys,
                                                                                            behave, answer):
    """Completions mode declares it can score, but only the server knows whether it echoes prompt log-probs.
    ``eval`` of the SayCan kitchen config (SayCan and No-VF score) over a server without echo sends one echo
    request when the config loads, then stops with exit status 2 naming the scoring planners, the URL and
    what the server answered, before any episode: no trace is written (it used to record every episode as
    an infrastructure failure). ``plan`` is refused the same way."""
    from groundplan.cli import main

    server = standin(behave)
    path = kitchen_yaml(tmp_path, server.url)
    scoring = ", ".join(repr(p.display) for p in load_config(path).planners if p.name != "generative")
    assert scoring.startswith("'SayCan") and "'No-VF'" in scoring  # the labels the tables show
    code = main(["eval", str(path), "--local", "--no-progress"])
    out = re.sub(r"\s+", " ", capsys.readouterr().out)
    assert code == 2, out
    assert f"planner(s) {scoring} score options" in out and f"{server.url}/completions" in out
    assert answer in out and "Traceback" not in out and KEY not in out
    assert [b.get("echo") for _, b, _ in server.requests] == [True]  # one probe, nothing else
    assert not (tmp_path / "out" / "saycan_kitchen" / "traces.jsonl").exists()

    code = main(["plan", "bring me a coke can", "--set", "llm.backend=openai", "--set", f"llm.options.base_url={server.url}",
                 "--set", "llm.options.max_retries=0"])
    out = re.sub(r"\s+", " ", capsys.readouterr().out)
    assert code == 2 and "planner(s) 'saycan' score options" in out and answer in out, out
    assert len(server.requests) == 2 and "Robot:" not in out  # refused before the episode: no plan printed


def test_the_echo_probe_asks_only_for_scoring_planners_and_passes_a_server_with_echo(standin, tmp_path):
    """A config whose planners only sample sends nothing when it loads, even to a server without echo; a
    server with echo passes the one probe request, which is the scoring request a planner sends."""
    from groundplan.config import probe_llm_needs

    no_echo = standin(no_echo_server)
    cfg = load_config(kitchen_yaml(tmp_path, no_echo.url), ["planners=[{name: generative, label: Generative}]"])
    probe_llm_needs(cfg.llm, cfg.planners)
    assert no_echo.requests == []

    server = standin()
    cfg = load_config(kitchen_yaml(tmp_path, server.url))
    probe_llm_needs(cfg.llm, cfg.planners)
    [(path, body, headers)] = server.requests
    assert path == "/v1/completions" and body["echo"] is True and body["logprobs"] == 1 and body["max_tokens"] == 0
    assert body["prompt"].endswith("Human: How would you bring me a coke can?\nRobot: 1. find a coke can")
    assert headers["authorization"] == f"Bearer {KEY}"
    with pytest.raises(InvalidInputError, match=r"planner\(s\) 'SayCan.*'No-VF' score options.*no-echo-marker"):
        probe_llm_needs(load_config(kitchen_yaml(tmp_path, no_echo.url)).llm, cfg.planners)


def test_chat_mode_is_refused_for_scoring_planners_when_the_config_loads(standin, tmp_path, capsys):
    server = standin(chat_server([]))
    data = yaml.safe_load((ROOT / "configs" / "zeroshot_virtualhome.yaml").read_text())
    data["llm"] = {"backend": "openai", "model": "chat-model", "options": {"base_url": server.url, "mode": "chat"}}
    path = tmp_path / "chat.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(InvalidInputError) as err:
        load_config(path)
    assert "planner 'SayCan (oracle simulator preconditions)' needs LLM capability score" in str(err.value) and "mode 'chat'" in str(err.value)
    data["planners"] = [p for p in data["planners"] if p["name"] != "saycan"]
    path.write_text(yaml.safe_dump(data))
    assert {p.name for p in load_config(path).planners} == {"zeroshot", "zeroshot_vanilla"}  # sampling planners load
    from groundplan.cli import main

    code = main(["plan", "bring me a coke can", "--set", "llm.backend=openai", "--set", f"llm.options.base_url={server.url}",
                 "--set", "llm.options.mode=chat"])
    assert code == 2 and "needs LLM capability score" in capsys.readouterr().out
    assert server.requests == []  # refused before any request
    with pytest.raises(InvalidInputError, match="cannot score options"):
        backend(server.url, mode="chat").score(PROMPT, [" done"])


def test_a_chat_server_that_refuses_logprobs_is_sampled_without_them(standin, caplog):
    """Some hosted chat models answer 400 to ``logprobs``: the samples come back without log-probs (one
    warning), and later calls do not ask for them again."""
    inner = chat_server([[" Walk to kitchen"], [" Find cup"]])

    def behave(path, body, headers):
        if "logprobs" in body:
            return 400, {"error": {"message": "logprobs is not supported with this model", "param": "logprobs"}}, {}
        return inner(path, body, headers)

    server = standin(behave)
    lm = backend(server.url, mode="chat")
    with caplog.at_level(logging.WARNING, logger="groundplan.llm.openai_backend"):
        [first] = lm.generate("Task: make tea\nStep 1:", GenerationParams(n=1, max_new_tokens=8))
        [second] = lm.generate("Task: make tea\nStep 2:", GenerationParams(n=1, max_new_tokens=8))
    assert (first.text, second.text) == (" Walk to kitchen", " Find cup")
    assert ["logprobs" in body for _, body, _ in server.requests] == [True, False, False]
    assert sum("refuses token log-probs" in r.getMessage() for r in caplog.records) == 1


def test_a_server_that_answers_500_to_logprobs_is_sampled_without_them_after_its_retries(standin, caplog):
    """llama.cpp's server started without ``--logits_all`` answers sampling with log-probs by a 500 naming
    them: retried as any 5xx, then sampled without them, and not asked for them again."""
    inner = chat_server([[" Walk to kitchen"], [" Find cup"]])

    def behave(path, body, headers):
        if "logprobs" in body:
            return 500, {"error": {"message": "logprobs is not supported for models created with logits_all=False",
                                   "type": "internal_server_error"}}, {}
        return inner(path, body, headers)

    server = standin(behave)
    lm = backend(server.url, mode="chat", max_retries=1)
    with caplog.at_level(logging.WARNING, logger="groundplan.llm.openai_backend"):
        [first] = lm.generate("Task: make tea\nStep 1:", GenerationParams(n=1, max_new_tokens=8))
        [second] = lm.generate("Task: make tea\nStep 2:", GenerationParams(n=1, max_new_tokens=8))
    assert (first.text, second.text) == (" Walk to kitchen", " Find cup")
    assert ["logprobs" in body for _, body, _ in server.requests] == [True, True, False, False]  # 1 retry, then none
    assert sum("refuses token log-probs" in r.getMessage() for r in caplog.records) == 1


def test_a_500_that_does_not_name_logprobs_still_fails_sampling(standin):
    server = standin(lambda path, body, headers: (500, {"error": {"message": "out of memory"}}, {}))
    with pytest.raises(LLMServiceError, match="out of memory") as err:
        backend(server.url, mode="chat", max_retries=1).generate("Step 1:", GenerationParams(n=1, max_new_tokens=8))
    assert err.value.status == 500 and len(server.requests) == 2


def test_a_zero_shot_episode_runs_against_a_chat_only_server(standin, tmp_path):
    pytest.importorskip("virtualhome_eval")
    from groundplan.pipelines.evaluate.sweep import run_sweep

    replies = [[" Walk to dining room", " walk to the dining room", " Walk to dinning room"], [" Find cup"] * 3,
               [" Grab cup"] * 3]
    server = standin(chat_server(replies))
    data = yaml.safe_load((ROOT / "configs" / "zeroshot_virtualhome.yaml").read_text())
    translated = next(p for p in data["planners"] if p["label"] == "Translated")
    data.pop("select_on")  # one variant, no grid: nothing to choose on validation tasks
    data.update(planners=[{**translated, "grid": {}, "options": {**translated["options"], "num_samples": 3,
                                                                  "temperature": 0.3, "epsilon": 0.0}}],
                llm={"backend": "openai", "model": "chat-model",
                     "options": {"base_url": server.url, "mode": "chat", "api_key_env": "GP_TEST_KEY"}},
                tasks={"ids": ["26_1"]}, max_steps=6, output_dir=str(tmp_path),
                runtime={"executor": "local", "mlflow": False})
    result = run_sweep(EvalConfig.model_validate(data), progress=False, resume=False)
    [trace] = result.traces
    assert trace.error is None, trace.error
    chosen = [s.chosen for s in trace.steps if not s.done]
    assert chosen == ["walk to dining room", "find cup", "grab cup"], chosen  # samples translated to admissible steps
    assert trace.steps[-1].done  # then the server's empty samples end the plan
    assert {path for path, _, _ in server.requests} == {"/v1/chat/completions"}
    first = server.requests[0][1]
    assert first["n"] == 3 and first["temperature"] == 0.3 and first["stop"] == ["\n"]
    assert first["messages"][0]["role"] == "user" and first["messages"][0]["content"].rstrip().endswith("Step 1:")


def test_serve_over_an_openai_backend_samples_refuses_logprobs_and_answers_503_when_it_fails(standin):
    """``groundplan serve`` whose own model is an OpenAI-compatible server: sampling passes through, prompt
    log-probs are refused (the backend declares none), and a server that keeps failing is a 503."""
    from fastapi.testclient import TestClient

    from groundplan.serve.config import ServeConfig
    from groundplan.serve.local import local_app

    server = standin()
    opts = {"base_url": server.url, "api_key_env": "GP_TEST_KEY", "max_retries": 0}
    cfg = ServeConfig(viewer_dir=None, llm={"backend": "openai", "model": "standin-model", "options": opts},
                      planners=[{"name": "generative", "label": "Generative"}])
    client = TestClient(local_app(cfg, backend(server.url, max_retries=0)))
    r = client.post("/v1/completions", json={"model": "standin-model", "prompt": "Step 1:", "n": 2, "max_tokens": 5})
    assert r.status_code == 200 and [c["text"] for c in r.json()["choices"]] == [" sample 0", " sample 1"]
    r = client.post("/v1/completions", json={"model": "standin-model", "prompt": "x", "max_tokens": 0, "echo": True,
                                             "logprobs": 1})
    assert r.status_code == 422 and "logprobs" in str(r.json()["detail"]), r.json()  # this server's schema has none
    server.behave = lambda p, b, h: (503, {"error": "down"}, {})
    r = client.post("/v1/completions", json={"model": "standin-model", "prompt": "x", "max_tokens": 3})
    assert r.status_code == 503 and r.headers["Retry-After"] == "1"
    assert f"{server.url}/completions answered HTTP 503" in r.json()["detail"] and KEY not in r.text
    with pytest.raises(Exception, match="needs LLM capability score"):
        ServeConfig(viewer_dir=None, llm={"backend": "openai", "options": {**opts, "mode": "chat"}},
                    planners=[{"name": "saycan", "label": "SayCan"}])


# ------------------------------------------------------------------ servers that depart from the API
# Each departure below is one a real OpenAI-compatible server shows (llama-cpp-python's server: docs/models.md);
# the backend tolerates them without knowing which server it talks to.

GENERATED = [" and", " then", " some", " more", " words"]


def echo_with_generation(text: str, count: int, usage: bool) -> dict[str, Any]:
    """An echo answer for ``text`` followed by ``count`` generated tokens (their offsets at or past its end)."""
    choice = echo_choice(text)
    lp = choice["logprobs"]
    offset = len(text)
    for token in (GENERATED * count)[:count]:
        lp["tokens"].append(token)
        lp["token_logprobs"].append(-0.5)
        lp["top_logprobs"].append({token: -0.5})
        lp["text_offset"].append(offset)
        offset += len(token)
    choice["text"] = text + "".join((GENERATED * count)[:count])
    answer: dict[str, Any] = {"choices": [choice]}
    if usage:
        answer["usage"] = {"prompt_tokens": len(words(text)), "completion_tokens": count}
    return answer


@pytest.mark.parametrize("usage", [True, False], ids=["with-usage", "without-usage"])
def test_a_server_reading_max_tokens_0_as_no_limit_is_sent_1_after_the_first_request(standin, caplog, usage):
    """llama-cpp-python reads ``max_tokens: 0`` as "until the context is full": the first echo request, sent
    alone, shows it (generated tokens after the echoed text, by the usage or by their offsets); every later
    one asks for 1 token, and no generated token is ever counted in an option's score."""
    def no_limit(path, body, headers):
        return 200, echo_with_generation(body["prompt"], body["max_tokens"] or 5, usage), {}

    server = standin(no_limit, delay_s=0.05)
    lm = backend(server.url, max_concurrency=4)
    with caplog.at_level(logging.WARNING, logger="groundplan.llm.openai_backend"):
        scores = lm.score(PROMPT, OPTIONS)
        scores += lm.score(PROMPT, OPTIONS[:2])
    for s in scores:
        total, n = expected_sum(PROMPT, s.option)
        assert s.logprob_sum == pytest.approx(total) and s.num_tokens == n
    sent = [b["max_tokens"] for _, b, _ in server.requests]
    assert sent == [0] + [1] * (len(OPTIONS) + 1)  # the probe alone, then the rest
    # the probe's stop strings end a generation at the first word boundary; later requests carry none
    assert server.requests[0][1]["stop"] == ["\n", " ", ".", ","]
    assert all("stop" not in b for _, b, _ in server.requests[1:])
    assert server.max_in_flight > 1  # the rest still went out concurrently
    assert caplog.text.count("generated 5 token(s) for an echo request with max_tokens 0") == 1


def test_a_server_refusing_max_tokens_0_is_sent_1_and_its_generated_token_ignored(standin, caplog):
    def at_least_one(path, body, headers):
        if body["max_tokens"] < 1:
            return 400, {"error": {"message": "max_tokens must be at least 1, got 0.", "type": "BadRequestError"}}, {}
        return 200, echo_with_generation(body["prompt"], body["max_tokens"], usage=True), {}

    server = standin(at_least_one)
    lm = backend(server.url)
    with caplog.at_level(logging.WARNING, logger="groundplan.llm.openai_backend"):
        scores = lm.score(PROMPT, OPTIONS)
    assert [s.logprob_sum for s in scores] == pytest.approx([expected_sum(PROMPT, o)[0] for o in OPTIONS])
    assert [b["max_tokens"] for _, b, _ in server.requests] == [0] + [1] * len(OPTIONS)
    assert lm.stats.failures == 0 and lm.stats.retries == 0
    assert "refuses max_tokens 0 with echo" in caplog.text and "max_tokens must be at least 1" in caplog.text


def test_a_4xx_that_is_not_about_max_tokens_is_raised_with_its_status(standin):
    server = standin(lambda p, b, h: (400, {"error": "prompt is too long for the context window"}, {}))
    lm = backend(server.url)
    with pytest.raises(LLMServiceError) as err:
        lm.score(PROMPT, OPTIONS)
    assert err.value.status == 400 and "prompt is too long" in str(err.value)
    assert len(server.requests) == 1
    with pytest.raises(LLMServiceError):  # nothing was learnt: the next call asks with max_tokens 0 again
        lm.score(PROMPT, OPTIONS)
    assert [b["max_tokens"] for _, b, _ in server.requests] == [0, 0]


def test_only_the_first_tokens_log_prob_may_be_null(standin):
    """The API's null log-prob for the text's first token is fine (it is the prompt's); a null or NaN one
    among the option's tokens is the server's error, never a silently wrong sum."""
    def holes(path, body, headers):
        answer = {"choices": [echo_choice(body["prompt"])]}
        lps = answer["choices"][0]["logprobs"]["token_logprobs"]
        if "apple" in body["prompt"]:
            lps[-1] = float("nan")  # sent as JSON's NaN
        if "coke" in body["prompt"]:
            lps[-2] = None
        return 200, answer, {}

    server = standin(holes)
    lm = backend(server.url)
    [ok] = lm.score("Robot:", [" done"])
    assert ok.logprob_sum == pytest.approx(word_logprob(" done")) and ok.num_tokens == 1
    with pytest.raises(LLMServiceError, match="not finite numbers"):
        lm.score(PROMPT, [" find an apple"])
    with pytest.raises(LLMServiceError, match=r"not finite numbers .*\[-[0-9.]+, None, -[0-9.]+\]"):
        lm.score(PROMPT, [" find a coke"])
    with pytest.raises(InvalidInputError, match="prompt is empty"):
        lm.score("", ["done"])


@pytest.mark.parametrize("seed", [7, None])
def test_a_server_that_ignores_n_is_asked_again_for_the_missing_samples(standin, caplog, seed):
    """llama-cpp-python's server drops ``n`` and answers one choice: the backend asks for the rest, each
    follow-up of a seeded request with the next seed (the same seed would repeat the sample)."""
    def one_choice(path, body, headers):
        text = f" sample seed={body.get('seed')} call={len(server.requests)}"
        return 200, {"choices": [{"index": 0, "text": text, "finish_reason": "stop",
                                  "logprobs": {"tokens": words(text), "token_logprobs": [-0.25] * len(words(text)),
                                               "top_logprobs": None, "text_offset": [0] * len(words(text))}}]}, {}

    server = standin(one_choice)
    lm = backend(server.url)
    with caplog.at_level(logging.WARNING, logger="groundplan.llm.openai_backend"):
        gens = lm.generate("Step 1:", GenerationParams(n=3, temperature=0.7, max_new_tokens=8, stop=("\n",), seed=seed))
        lm.generate("Step 1:", GenerationParams(n=2, temperature=0.7, max_new_tokens=8, seed=seed))
    assert len(gens) == 3 and len({g.text for g in gens}) == 3
    assert all(g.logprob_mean == pytest.approx(-0.25) for g in gens)
    bodies = [b for _, b, _ in server.requests]
    assert [b["n"] for b in bodies] == [3, 2, 1, 2, 1]
    assert [b.get("seed") for b in bodies] == ([7, 8, 9, 7, 8] if seed is not None else [None] * 5)
    assert all(b["stop"] == ["\n"] and b["max_tokens"] == 8 for b in bodies[:3])
    assert caplog.text.count("answered 1 choice(s) for n=3") == 1  # warned once


def test_a_server_answering_no_choices_for_a_follow_up_fails_naming_the_url(standin):
    calls = []

    def dwindling(path, body, headers):
        calls.append(body)
        if len(calls) > 1:
            return 200, {"choices": []}, {}
        return 200, {"choices": [{"index": 0, "text": " one", "finish_reason": "stop", "logprobs": None}]}, {}

    server = standin(dwindling)
    with pytest.raises(LLMServiceError, match=re.escape(f"{server.url}/completions answered without choices")):
        backend(server.url).generate("x", GenerationParams(n=2, max_new_tokens=2))


def shifted_choice(text: str) -> dict[str, Any]:
    """An echo answer whose log-probs are read one position late: token i gets its log-prob under the
    distribution of token i+1, whose most likely token (listed in ``top_logprobs``) is mostly token i+1."""
    choice = echo_choice(text)
    lp = choice["logprobs"]
    tokens = lp["tokens"]
    for i in range(1, len(tokens)):
        nxt = tokens[i + 1] if i + 1 < len(tokens) else " and"
        best = -0.05 if i % 5 else -3.0  # the model expects the next token, mostly
        lp["top_logprobs"][i] = {(nxt if i % 5 else " the"): best, tokens[i]: -4.0 - (i % 3)}
        lp["token_logprobs"][i] = -4.0 - (i % 3)
    return choice


def test_a_server_whose_echo_log_probs_are_shifted_by_one_token_is_refused(standin):
    """A server that reads token i's log-prob from the logits after it (llama-cpp-python's, on a GGUF whose
    tokenizer adds no BOS token) returns numbers that score nothing: refused at the first answer long enough
    to tell, quoting the evidence; a well-aligned server (every other test here) is not."""
    server = standin(lambda p, b, h: (200, {"choices": [shifted_choice(b["prompt"])]}, {}))
    lm = backend(server.url)
    with pytest.raises(LLMServiceError) as err:
        lm.score(PROMPT + " Robot: I would find a coke can, pick it up, bring it to you, and be done.", OPTIONS)
    message = str(err.value)
    assert "shifted by one token" in message and "tokenizer.ggml.add_bos_token=bool:true" in message
    assert re.search(r"at (\d+) of (\d+) positions .* at only 0 the token itself", message)
    assert len(server.requests) == 1
    # too short to tell: not judged (and not refused) until an answer is long enough
    [short] = backend(server.url).score("Robot:", [" done"])
    assert short.num_tokens == 1
    # the probe a scoring config sends when it loads is long enough to tell: refused there, before any episode
    from groundplan.config import LLMSpec, PlannerSpec, probe_llm_needs

    spec = LLMSpec(backend="openai", model="standin-model", options={"base_url": server.url, "max_retries": 0})
    with pytest.raises(InvalidInputError, match="planner\\(s\\) 'SayCan' score options.*shifted by one token"):
        probe_llm_needs(spec, [PlannerSpec(name="saycan", label="SayCan")])
    probe_llm_needs(spec, [PlannerSpec(name="generative", label="Generative")])  # sampling: not asked
