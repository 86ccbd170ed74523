"""Schemathesis over every route of the /v1 API (and the viewer's data routes): no request, however
malformed, gets a 5xx, and every response matches the OpenAPI schema (status code, content type,
headers and body, the 4xx error bodies included).

Each route gets three kinds of requests, all seeded (Hypothesis ``derandomize``), in process (the ASGI app
called directly, no socket) over the same ``local_app`` that ``groundplan serve --local`` runs, serving two
envs (:data:`ENVS`: the kitchen and Hanoi). The CI run serves a fake model (:class:`FuzzLM`), so an example
costs milliseconds; the slow run serves it and then the real model path, the embedded engine on a tiny
random Llama (:func:`fuzz_long`):

- **positive**: valid requests generated from the schema (Schemathesis' positive mode); the schema is
  the server's own (its model, planners and envs as enums, its limits as bounds), so every one gets past
  the checks into the handlers; half of them are steered to a live session and the env's task ids, so they
  reach the handlers' work rather than a 404;
- **negative**: invalid requests generated from the schema (negative mode: Schemathesis mutates each
  part's schema and draws data that breaks it), which must also be rejected with a 4xx
  (``negative_data_rejection``);
- **mutated**: valid requests mutated on the wire, where a schema cannot describe the damage: truncated
  or non-JSON bodies, NaN/Infinity/1e400/huge integers, lone surrogates, deep nesting, duplicate keys,
  wrong top-level types, unknown fields, odd content types, extra headers and query parameters, hostile
  path segments.

Checks on every response: ``not_a_server_error``, ``status_code_conformance``, ``content_type_conformance``,
``response_headers_conformance`` and ``response_schema_conformance``; on negative ones also
``negative_data_rejection`` (a 4xx, 413 included), on positive ones ``positive_data_acceptance`` with the
statuses a valid request may still get from the state of the server, which no schema can hold: 404 (no
such session, task or sweep), 409 (a finished session, two sweeps that cannot be compared), 410, 413 (the
body limit) and 429. Never 400 nor 422: a body the schema calls valid and the server refuses is a failure,
so the schema says exactly what the server accepts. Two refusals are the model's, not the server's, which
the schema cannot know (a Serve ingress has no model): a token id past the model's vocabulary
(:data:`FuzzLM.VOCAB`) and a text its tokenizer encodes to no token at all (SmolLM2's vocabulary lacks a
few bytes, '\x04' among them: an option made of them adds nothing to score) are a 400
(:func:`models_refusal`).
A mutated request whose path was damaged may reach another route or none: it is held to "no 5xx" only.
The CI run asserts at least :data:`CI_EXAMPLES` examples per route, the slow one :data:`SLOW_EXAMPLES`::

    python -m pytest -q tests/test_serve_schema.py -m "not slow"   # CI: >= 300 examples per route
    python -m pytest -q tests/test_serve_schema.py -m slow         # >= 5,000 examples per route
"""
from __future__ import annotations

import collections
import json
import logging
import re
import time
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import schemathesis
from fastapi.routing import APIRoute
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    positive_data_acceptance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from starlette.testclient import TestClient

from groundplan.core.errors import InvalidInputError
from groundplan.llm.base import Generation, GenerationParams, PromptLogprobs
from groundplan.serve.config import ServeConfig
from groundplan.serve.local import local_app
from tests.conftest import tiny_llama_lm
from tests.fakes import FakeLM

log = logging.getLogger(__name__)

TOKEN = "t0k"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
#: examples each route gets at least, over the three kinds
CI_EXAMPLES, SLOW_EXAMPLES = 300, 5_000
PLANNERS = ["SayCan", "No-VF"]
PLAN = ["find a coke can", "pick up the coke can", "bring it to you", "put down the coke can", "done"]
#: the served envs: the kitchen, whose instructions of one's own run in its default scene, and Hanoi, whose run
#: in its first task's scene (``EnvCapabilities.adhoc_scene``)
ENVS = ["kitchen", "hanoi"]
TASK_IDS = ["kitchen/nl_nouns/00", "kitchen/nl_single_primitive/00", "kitchen/embodiment/00", "kitchen/nope/99",
            "hanoi/test/0000", "hanoi/test/0001"]
#: the viewer folder's one sweep (an empty traces.jsonl: the data routes answer 200 for it)
RUN = "r1"
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_headers_conformance,
          response_schema_conformance]


class FuzzLM(FakeLM):
    """:class:`~tests.fakes.FakeLM` with what ``/v1/completions`` needs of a served model (per-token prompt
    log-probs, token counts, samples), all deterministic and instant. Words are tokens; token ids outside
    its vocabulary are refused as the embedded engine refuses them (``InvalidInputError``)."""

    VOCAB = 1000

    def __init__(self) -> None:
        super().__init__(FakeLM.following(PLAN)._scores, name="fuzz-lm")  # sessions take several steps

    @staticmethod
    def _lp(token: str) -> float:
        return -0.01 - (zlib.crc32(token.encode("utf-8", "surrogatepass")) % 1000) / 100

    def _tokens(self, prompt: str | Sequence[int]) -> tuple[str, list[str], list[int]]:
        if isinstance(prompt, str):
            tokens = re.findall(r"\s*\S+|\s+", prompt)
            return prompt, tokens, [zlib.crc32(t.encode("utf-8", "surrogatepass")) % self.VOCAB for t in tokens]
        if not prompt:
            raise InvalidInputError("a prompt is an empty list of token ids")
        bad = [i for i in prompt if not 0 <= i < self.VOCAB]
        if bad:
            raise InvalidInputError(f"token id {bad[0]} is not in this model's vocabulary (0..{self.VOCAB - 1})")
        tokens = [f" t{i}" for i in prompt]
        return "".join(tokens), tokens, list(prompt)

    def prompt_logprobs(self, prompts: Sequence[str | Sequence[int]], top_k: int = 0,
                        keep_next: bool = False) -> list[PromptLogprobs]:
        out = []
        for prompt in prompts:
            text, tokens, ids = self._tokens(prompt)
            offsets = [0]
            for t in tokens[:-1]:
                offsets.append(offsets[-1] + len(t))
            lps = [None] + [self._lp(t) for t in tokens[1:]]
            top = [()] + [tuple((f"{t}{k}" if k else t, self._lp(t) - k) for k in range(top_k)) for t in tokens[1:]]
            out.append(PromptLogprobs(text, tuple(ids), tuple(tokens), tuple(offsets[:len(tokens)]), tuple(lps),
                                      tuple(top)))
        return out

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return [len(self._tokens(t)[1]) for t in texts]

    def generate(self, prompt: str, params: GenerationParams) -> list[Generation]:
        text = " done."
        for stop in params.stop:
            if stop in text:
                text = text[:text.index(stop)]
        return [Generation(text=text, logprob_mean=-1.0, num_tokens=len(text.split()), finish_reason="stop")] * params.n


def past_vocabulary(body: Any, vocab: int) -> bool:
    """Whether a completions body has a token id past the served model's vocabulary (``vocab`` ids): the one
    refusal of a valid body (400) that is the model's, which the schema cannot know."""
    prompt = body.get("prompt") if isinstance(body, dict) else None
    ids = [i for p in prompt for i in (p if isinstance(p, list) else [p])] if isinstance(prompt, list) else []
    return any(isinstance(i, (int, float)) and not isinstance(i, bool) and i >= vocab for i in ids)


def unseen_text(body: Any, encodes_nothing: Callable[[str], bool]) -> bool:
    """Whether a score or completions body holds a text (its prompt or an option) the served model's tokenizer
    encodes to no token."""
    if not isinstance(body, dict):
        return False
    texts = [body.get("prompt")] + (body.get("options") if isinstance(body.get("options"), list) else [])
    texts += body["prompt"] if isinstance(body.get("prompt"), list) else []
    return any(isinstance(t, str) and encodes_nothing(t) for t in texts)


def models_refusal(body: Any, response: Any, fuzz: Fuzz) -> bool:
    """Whether ``response`` is the model's refusal of a valid body, which the schema cannot know: a 400 for a
    token id past the served model's vocabulary, or for a text its tokenizer encodes to no token."""
    return response.status_code == 400 and (
        (past_vocabulary(body, fuzz.vocab) and "vocabulary" in response.text)
        or unseen_text(body, fuzz.encodes_nothing))


def config(viewer_dir: str | None) -> ServeConfig:
    return ServeConfig(planners=[{"name": "saycan", "label": "SayCan", "affordance": "kitchen_value"},
                                 {"name": "saycan_novf", "label": "No-VF"}], envs=[{"name": e} for e in ENVS],
                       limits={"max_steps": 2, "max_session_steps": 3, "max_sessions": 100_000,
                               "max_body_bytes": 16384},
                       viewer_dir=viewer_dir)


def operations(schema: Any) -> dict[str, Any]:
    return {op.label: op for op in (result.ok() for result in schema.get_all_operations())}


#: every operation of the schema ("POST /v1/plan", ...): the routes the app mounts whatever its viewer folder
LABELS = sorted(operations(schemathesis.openapi.from_asgi("/openapi.json", local_app(config(None), FuzzLM()))))


class Fuzz:
    """One app with its schema, its live sessions and a raw ASGI client for mutated requests. ``lm``: the
    served model, :class:`FuzzLM` or a real engine; ``vocab``: its number of token ids; ``encodes_nothing``:
    whether its tokenizer encodes a text to no token (never, for :class:`FuzzLM`, whose words are tokens)."""

    def __init__(self, viewer_dir: Path, lm: Any, vocab: int,
                 encodes_nothing: Callable[[str], bool] = lambda text: False) -> None:
        (viewer_dir / RUN).mkdir(parents=True, exist_ok=True)
        (viewer_dir / RUN / "traces.jsonl").write_text("")
        self.model, self.vocab, self.encodes_nothing = lm.name, vocab, encodes_nothing
        self.app = local_app(config(str(viewer_dir)), lm, token=TOKEN)
        self.schema = schemathesis.openapi.from_asgi("/openapi.json", self.app)
        self.schema.config.generation.update(with_security_parameters=False)  # the token is this test's to send
        checks = self.schema.config.checks_config_for()
        # a body over limits.max_body_bytes is refused with 413 before it is parsed: a rejection too
        checks.negative_data_rejection.expected_statuses = [*checks.negative_data_rejection.expected_statuses, "413"]
        # a valid request may still be refused by the server's state (404, 409, 410: sessions, tasks, sweeps;
        # 413: the body limit; 429), never with 400 or 422: the schema is this server's (its names and limits)
        checks.positive_data_acceptance.expected_statuses = ["2xx", "401", "403", "404", "409", "410", "413", "429"]
        self.ops = operations(self.schema)
        self.client = TestClient(self.app, raise_server_exceptions=False).__enter__()  # one event loop for all
        self.sessions = [self.fresh_session() for _ in range(8)]

    def close(self) -> None:
        self.client.__exit__(None, None, None)

    def send(self, case: Any) -> Any:
        """``case`` as Schemathesis would send it, through this fuzz's client (an in-process ASGI call)."""
        kwargs = case.as_transport_kwargs(headers=dict(AUTH))
        kwargs.pop("cookies", None)
        if isinstance(kwargs.get("data"), (bytes, str)):
            kwargs["content"] = kwargs.pop("data")
        return self.client.request(**kwargs)

    def fresh_session(self) -> str:
        return self.client.post("/v1/sessions", json={"instruction": "bring me a coke can"},
                                headers=AUTH).json()["session_id"]

    def steered(self, data: st.DataObject, case: Any) -> Any:
        """Half the time, point a valid case at what this server holds (a live session, the env's task ids, a
        sweep) and at small values, so requests reach the handlers' work rather than a 404; the other half
        stay as generated."""
        if not data.draw(st.booleans(), label="steer"):
            return case
        if isinstance(case.body, dict):
            for key, values in _STEER.get(case.operation.path, {}).items():
                if key in case.body:
                    values = [self.model] if values is _SERVED_MODEL else values
                    case.body[key] = data.draw(st.sampled_from(values), label=key)
        params = case.path_parameters or {}
        if "session_id" in params:
            fresh = data.draw(st.booleans(), label="fresh session")
            params["session_id"] = self.fresh_session() if fresh else data.draw(st.sampled_from(self.sessions))
        for key in ("run", "run_a", "run_b"):
            if key in params:
                params[key] = RUN
        return case


_INSTRUCTIONS = ["bring me a coke can", "throw away the apple"]
#: steering's stand-in for the served model's name (the fixture's)
_SERVED_MODEL: list[str] = []
#: per route, what steering draws a body field from: served names, and values within this server's limits
_STEER: dict[str, dict[str, list[Any]]] = {
    "/v1/score": {"prompt": ["Robot: 1."], "options": [[" find a coke can", " done"]]},
    "/v1/plan": {"planner": PLANNERS, "env": ENVS, "task_id": TASK_IDS, "instruction": _INSTRUCTIONS,
                 "max_steps": [None, 1, 2]},
    "/v1/sessions": {"planner": PLANNERS, "env": ENVS, "instruction": _INSTRUCTIONS, "skills": [None, PLAN]},
    "/v1/sessions/{session_id}/step": {"observation": [{}, {"skills": PLAN, "affordances": {"done": 0.1}}]},
    "/v1/completions": {
        "model": _SERVED_MODEL, "max_tokens": [0, 1, 4], "n": [1, 2], "logprobs": [None, 0, 1, 5], "echo": [True, False],
        "best_of": [None], "presence_penalty": [0.0], "frequency_penalty": [0.0], "logit_bias": [None],
        "suffix": [None], "stream": [False], "stop": [None, "\n", [",", "."]],
        "prompt": ["Robot: 1.", ["Robot: 1. find", "Robot: 1. done"], [1, 2, 3], [[5, 6], [7]]]},
}


# ------------------------------------------------------------------------------------ wire mutations
_LITERALS = ["NaN", "Infinity", "-Infinity", "1e400", "-1e400", "1" + "0" * 5000, "-0", "1e-400", "0.1",
             '"\\ud800"', '"\\udfff x"', '"\\u0000"', "true", "null", "[]", "{}", '""', "[" * 3000 + "]" * 3000]
_CONTENT_TYPES = ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
                  "application/json; charset=latin-1", "application/json; charset=utf-16", "application/xml", "",
                  "application/json;;", "*/*"]
_PLACEHOLDER = "\x00gp-fuzz-literal\x00"
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12)


def _nodes(value: Any, path: tuple = ()) -> list[tuple]:
    """Paths to every node of a JSON value (the root first)."""
    out = [path]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _nodes(v, path + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _nodes(v, path + (i,))
    return out


def _replace(value: Any, path: tuple, new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    copy = dict(value) if isinstance(value, dict) else list(value)
    copy[head] = _replace(value[head], rest, new)
    return copy


def _delete(value: Any, path: tuple) -> Any:
    if not path:
        return value
    if len(path) == 1:
        copy = dict(value) if isinstance(value, dict) else list(value)
        del copy[path[0]]
        return copy
    return _replace(value, path[:1], _delete(value[path[0]], path[1:]))


def mutate(data: st.DataObject, body: Any) -> tuple[bytes, str | None]:
    """A JSON body mutated as a client bug or an attacker would send it: (raw bytes, content type)."""
    kind = data.draw(st.sampled_from(["truncate", "replace", "delete", "extra", "literal", "raw", "duplicate",
                                      "top", "encoding", "empty", "surrogate key"]), label="mutation")
    text = json.dumps(body)
    content_type: str | None = "application/json"
    if kind == "truncate":
        cut = data.draw(st.integers(0, max(len(text) - 1, 0)), label="cut")
        return text[:cut].encode(), content_type
    if kind == "raw":
        return data.draw(st.binary(max_size=64), label="raw"), content_type
    if kind == "empty":
        return b"", data.draw(st.sampled_from(["application/json", None]), label="ctype")
    if kind == "top":
        return data.draw(st.sampled_from([b"[]", b"null", b'"x"', b"0", b"[{}]", b"true"]), label="top"), content_type
    if kind == "encoding":
        return text.replace('"', '"\u00e9', 1).encode("latin-1", "replace"), data.draw(st.sampled_from(_CONTENT_TYPES))
    if kind == "surrogate key" and isinstance(body, dict):
        return (text[:-1] + (", " if body else "") + '"\\ud800x": 1}').encode(), content_type
    if kind == "duplicate" and isinstance(body, dict) and body:
        key = data.draw(st.sampled_from(sorted(body)), label="dup")
        extra = json.dumps(data.draw(json_values, label="dup value"))
        return (text[:-1] + f", {json.dumps(key)}: {extra}}}").encode(), content_type
    paths = _nodes(body)
    path = data.draw(st.sampled_from(paths), label="path")
    if kind == "replace":
        body = _replace(body, path, data.draw(json_values, label="value"))
    elif kind == "delete" and path:
        body = _delete(body, path)
    elif kind == "extra":
        parents = [p for p in paths if isinstance(_at(body, p), dict)] or [()]
        parent = data.draw(st.sampled_from(parents), label="parent")
        node = _at(body, parent)
        if isinstance(node, dict):
            key = data.draw(st.text(max_size=10), label="key")
            body = _replace(body, parent, {**node, key: data.draw(json_values, label="extra value")})
    elif kind == "literal":
        body = _replace(body, path, _PLACEHOLDER)
        literal = data.draw(st.sampled_from(_LITERALS), label="literal")
        return json.dumps(body).replace(json.dumps(_PLACEHOLDER), literal).encode(), content_type
    return json.dumps(body).encode(), content_type


def _at(value: Any, path: tuple) -> Any:
    for p in path:
        value = value[p]
    return value


_HOSTILE_SEGMENTS = ["..", "%2e%2e", "..%2F..%2Fetc%2Fpasswd", "a" * 300, "%00", "%ff", "\u00e9", "%20", ".", "~",
                     "0" * 64, "$(id)", "%2F"]


def send_mutated(fuzz: Fuzz, data: st.DataObject, case: Any) -> tuple[Any, bool]:
    """Send ``case`` (a valid, steered request) with one part damaged: the response, as the app gave it,
    and whether it still went to ``case``'s route (a damaged path may reach another route or none)."""
    kwargs = case.as_transport_kwargs(headers=dict(AUTH))
    method, url = kwargs["method"], kwargs["url"]
    path = re.sub(r"^https?://[^/]+", "", url)
    headers = {k: v for k, v in (kwargs.get("headers") or {}).items() if k.lower() not in ("content-length",)}
    params = dict(kwargs.get("params") or {})
    content: bytes | None = None
    if "json" in kwargs:
        content = json.dumps(kwargs["json"]).encode()
        headers["Content-Type"] = "application/json"
    where = data.draw(st.sampled_from(["body", "body", "body", "query", "header", "auth", "path"]), label="where")
    if where == "body":
        body = kwargs.get("json", {})
        content, content_type = mutate(data, body)
        headers.pop("Content-Type", None)
        if content_type:
            headers["Content-Type"] = content_type
    elif where == "query":
        params.update(data.draw(st.dictionaries(st.text(min_size=1, max_size=10), st.text(max_size=20), min_size=1,
                                                max_size=3), label="query"))
    elif where == "header":
        name = data.draw(st.sampled_from(["Content-Type", "Accept", "Accept-Encoding", "X-Request-Id", "Origin",
                                          "Expect"]), label="header")
        value = data.draw(st.sampled_from(_CONTENT_TYPES + ["gzip", "100-continue", "x" * 500]), label="header value")
        headers[name] = value
    elif where == "auth":
        auth = data.draw(st.sampled_from(["", "Bearer", "Bearer ", "Bearer wrong", "Basic dDBrOg==", f"bearer {TOKEN}",
                                          f"Bearer {TOKEN}x", "Bearer " + "t" * 2000]), label="auth")
        headers["Authorization"] = auth
    else:
        segments = path.split("/")
        i = data.draw(st.integers(1, len(segments) - 1), label="segment")
        segments[i] = data.draw(st.sampled_from(_HOSTILE_SEGMENTS) | st.text(min_size=1, max_size=12).map(
            lambda t: quote(t, safe="")), label="path segment")
        path = "/".join(segments)
    return fuzz.client.request(method, path, params=params, headers=headers, content=content), where != "path"


# ------------------------------------------------------------------------------------ the runs
def run_route(fuzz: Fuzz, label: str, target: int) -> dict[str, collections.Counter]:
    """Positive, negative and mutated examples of one route, at least ``target`` in all; every response
    is checked (no 5xx, conformance to the schema). Returns the status codes seen per kind."""
    op = fuzz.ops[label]
    per_mode = target // 3
    seen: dict[str, collections.Counter] = {k: collections.Counter() for k in ("positive", "negative", "mutated")}

    def hypothesis_run(kind: str, n: int, body: Callable[[st.DataObject], None]) -> None:
        @settings(max_examples=n, derandomize=True, database=None, deadline=None,
                  suppress_health_check=list(HealthCheck))
        @given(data=st.data())
        def run(data: st.DataObject) -> None:
            body(data)

        started = time.monotonic()
        run()
        log.info("%s %s: %d examples in %.1f s, statuses %s", label, kind, sum(seen[kind].values()),
                 time.monotonic() - started, dict(seen[kind]))

    def positive(data: st.DataObject) -> None:
        case = fuzz.steered(data, data.draw(op.as_strategy(GenerationMode.POSITIVE), label="case"))
        response = fuzz.send(case)
        seen["positive"][response.status_code] += 1
        refused_by_model = models_refusal(case.body, response, fuzz)
        case.validate_response(response, checks=CHECKS + ([] if refused_by_model else [positive_data_acceptance]),
                               headers=AUTH)

    def negative(data: st.DataObject) -> None:
        case = data.draw(op.as_strategy(GenerationMode.NEGATIVE), label="case")
        response = fuzz.send(case)
        seen["negative"][response.status_code] += 1
        case.validate_response(response, checks=CHECKS + [negative_data_rejection], headers=AUTH)

    def mutated(data: st.DataObject) -> None:
        case = fuzz.steered(data, data.draw(op.as_strategy(GenerationMode.POSITIVE), label="case"))
        response, same_route = send_mutated(fuzz, data, case)
        seen["mutated"][response.status_code] += 1
        request = response.request
        assert response.status_code < 500, f"{response.status_code} {request.method} {request.url}: {response.text[:500]}"
        if same_route:
            case.validate_response(response, checks=CHECKS, headers=AUTH)

    hypothesis_run("positive", per_mode, positive)
    if len(op.body):
        hypothesis_run("negative", per_mode, negative)
    else:  # nothing to negate: every parameter of these routes is a path segment any text satisfies
        plain = [p.definition["schema"] for p in op.path_parameters]
        assert not len(op.query) and not len(op.headers) and all(
            s["type"] == "string" and set(s) <= {"type", "title"} for s in plain), f"{label}: negative mode skipped"
        log.info("%s: no invalid request can be generated from the schema", label)
    done = sum(sum(c.values()) for c in seen.values())
    hypothesis_run("mutated", max(per_mode, target - done), mutated)
    total = sum(sum(c.values()) for c in seen.values())
    assert total >= target, f"{label}: only {total} examples ({ {k: sum(c.values()) for k, c in seen.items()} })"
    assert not any(code >= 500 for c in seen.values() for code in c)
    return seen


@pytest.fixture(scope="module")
def fuzz(tmp_path_factory: pytest.TempPathFactory) -> Fuzz:
    fuzz = Fuzz(tmp_path_factory.mktemp("viewer"), FuzzLM(), FuzzLM.VOCAB)
    yield fuzz
    fuzz.close()


@pytest.fixture(scope="module", params=["fuzz-lm", "tiny-llama"])
def fuzz_long(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Fuzz:
    """The slow run's app: over :class:`FuzzLM`, and over the real model path (the embedded engine,
    ``HFLanguageModel``, on a 2-layer random Llama with SmolLM2's tokenizer: its tokenizer, batcher, KV cache
    and sampler answer every request)."""
    if request.param == "fuzz-lm":
        fuzz = Fuzz(tmp_path_factory.mktemp("viewer"), FuzzLM(), FuzzLM.VOCAB)
    else:
        lm = tiny_llama_lm(tmp_path_factory.mktemp("tiny-llama"), seed=0)
        fuzz = Fuzz(tmp_path_factory.mktemp("viewer"), lm, lm.model.config.vocab_size,
                    lambda text: not lm.tokenizer(text, add_special_tokens=False).input_ids)
    yield fuzz
    fuzz.close()


def test_every_route_is_in_the_schema(fuzz):
    """The routes fuzzed are all the app's routes: everything but the docs and the viewer's static page is
    in the OpenAPI schema, so a new route cannot go unfuzzed."""
    static = {"/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc", "/", "/viewer.js"}
    routes = {f"{m} {r.path}" for r in fuzz.app.routes if isinstance(r, APIRoute) and r.path not in static
              for m in r.methods if m != "HEAD"}
    assert routes == set(fuzz.ops) == set(LABELS)


@pytest.mark.parametrize("label", LABELS)
def test_route_fuzz(fuzz, label):
    run_route(fuzz, label, CI_EXAMPLES)


@pytest.mark.slow
@pytest.mark.parametrize("label", LABELS)
def test_route_fuzz_long(fuzz_long, label):
    run_route(fuzz_long, label, SLOW_EXAMPLES)
