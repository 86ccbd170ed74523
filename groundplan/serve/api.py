"""The HTTP API: one FastAPI app over a :class:`Backend` (Ray Serve handles in production, the plain
services in-process in tests), so the routes, limits, auth and error mapping exist once.

Bad input never gets a 5xx: the request models are this server's (:func:`~groundplan.serve.schemas.served_models`:
its env, planner and model names as enums, its configured limits as bounds), so a body the OpenAPI schema
calls invalid is a 422 naming the field (malformed JSON, a ``start_state`` that does not fit its env's
``start_state_schema`` included) and one it calls valid is never refused for its shape; what only the
server's state can tell answers 404 (no such session, task or sweep), 409, 410 or 429, and what only the
model or an env's data can tell (a token id past the vocabulary, a start state the env's data rules out)
400; bodies over ``limits.max_body_bytes`` get 413 (by Content-Length, or once a chunked body passes it)
before they are parsed. Every status a route can
answer is declared in the OpenAPI schema with its body (:data:`_ERRORS`), which the Schemathesis runs of
``tests/test_serve_schema.py`` hold the app to. A replica that died mid-request, or a model server behind
it that kept failing, gives 503 with ``Retry-After`` (the request had no effect; send it again). The
OpenAI-compatible routes (``/v1/completions``, ``/v1/models``) are added by
:mod:`groundplan.serve.openai_api` under the same rules. Nothing from a request or from the LLM is
evaluated: text only ever goes to the tokenizer, string comparison and JSON.
"""
from __future__ import annotations

import hmac
import json
import logging
import os
import re
from typing import Any, Protocol

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from groundplan.core.errors import (
    ConflictError,
    GroundplanError,
    InfrastructureError,
    InvalidInputError,
    UnknownNameError,
)
from groundplan.envs import ENVS
from groundplan.envs.base import Env, StartStateError
from groundplan.llm.base import PromptLogprobs
from groundplan.serve import schemas as S
from groundplan.serve.config import ServeConfig
from groundplan.serve.errors import (
    NotFoundError,
    RetryableError,
    SessionConflictError,
    SessionExpiredError,
    SessionLimitError,
    SessionNotFoundError,
)
from groundplan.serve.service import PlanJob, resolve_plan

log = logging.getLogger(__name__)


class Backend(Protocol):
    async def score(self, prompt: str, options: list[str]) -> dict[str, Any]: ...
    async def prompt_logprobs(self, prompts: list[str | list[int]], top_k: int,
                              keep_next: bool = False) -> list[PromptLogprobs]: ...
    async def count_tokens(self, texts: list[str]) -> list[int]: ...
    async def generate(self, prompt: str, params: dict[str, Any]) -> list[dict[str, Any]]: ...
    async def plan(self, job: PlanJob) -> dict[str, Any]: ...
    async def create_session(self, planner: str, request: dict[str, Any]) -> dict[str, Any]: ...
    async def step_session(self, session_id: str, request: dict[str, Any]) -> dict[str, Any]: ...
    async def delete_session(self, session_id: str) -> None: ...


_STATUS: list[tuple[type[Exception], int]] = [
    (NotFoundError, 404), (SessionExpiredError, 410), (SessionLimitError, 429), (SessionConflictError, 409),
    (RetryableError, 503), (InfrastructureError, 503), (ConflictError, 409), (UnknownNameError, 400),
    (InvalidInputError, 400), (GroundplanError, 400),
]

_ERRORS = {code: {"model": S.ErrorOut} for code in (400, 401, 403, 404, 409, 410, 413, 422, 429, 503)}
#: what any route may answer before its handler runs: the body limit's 413 and its 400 for a malformed
#: Content-Length (:class:`BodyLimit`), and 422 for a request the route cannot parse
_ANY_ROUTE = {code: {"model": S.ErrorOut} for code in (400, 413, 422)}


def status_of(exc: Exception) -> int | None:
    for cls, code in _STATUS:
        if isinstance(exc, cls):
            return code
    return None


class BodyLimit:
    """ASGI middleware: 413 for a body over ``limit`` bytes, whether it declares its size
    (Content-Length) or streams in chunks (Transfer-Encoding: chunked, no length).

    The body is read here, up to the limit, before the app sees any of it, then handed on whole:
    FastAPI turns any error raised while it reads a body into a 400 "error parsing the body", so the
    limit cannot be enforced from inside its read. At most ``limit`` bytes are ever held.

    A whole body is also refused (422) when its JSON escapes a lone UTF-16 surrogate (``"\\ud800"``), text
    no UTF-8 response can carry: pydantic lets such a string through inside lists and unions, and fails
    with ``UnicodeEncodeError`` (a 500) on one used as a key, or when a response echoes it. It is looked for
    only in bodies whose bytes hold a surrogate escape at all, so other requests pay one byte search.

    A body over the limit is read on and thrown away, up to ``drain`` bytes, before the 413 is sent.
    Many clients (Python's ``urllib``, most HTTP/1.1 libraries without ``Expect: 100-continue``) send the
    whole body before they read any answer; a server that answers and closes while body bytes are still
    arriving makes the kernel reset the connection, and such a client sees ``ConnectionResetError``
    instead of the 413. Draining costs reading, never holding, the bytes. A body longer than ``drain``
    (declared, or sent) gets the 413 at once with ``Connection: close``: bounding what a client can make the
    server read matters more than how it learns of the refusal."""

    def __init__(self, app: Any, limit: int, drain: int = 0) -> None:
        self.app, self.limit, self.drain = app, limit, max(drain, limit)

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and not declared.strip().isdigit():
            return await _error(400, f"invalid Content-Length {declared[:32]!r}", close=True)(scope, receive, send)
        if declared is not None and int(declared) > self.limit:
            drained = int(declared) <= self.drain and await self._discard(receive, 0)
            return await self._too_big(scope, receive, send, drained)
        chunks: list[bytes] = []
        seen = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away before sending it all
                return
            chunk = message.get("body", b"")
            seen += len(chunk)
            if seen > self.limit:
                chunks.clear()
                drained = not message.get("more_body", False) or await self._discard(receive, seen)
                return await self._too_big(scope, receive, send, drained)
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        bad = _lone_surrogate(body)
        if bad is not None:
            return await _error(422, f"invalid request: {bad} holds a lone surrogate (U+D800-U+DFFF): not valid "
                                     "Unicode text")(scope, receive, send)
        pending = [{"type": "http.request", "body": body, "more_body": False}]

        async def replay() -> dict:
            return pending.pop() if pending else await receive()

        await self.app(scope, replay, send)

    async def _discard(self, receive: Any, seen: int) -> bool:
        """Read the rest of the body and throw it away; False when it runs past ``drain`` bytes in all
        (or the client left), so the connection is to be closed."""
        while seen <= self.drain:
            message = await receive()
            if message["type"] != "http.request":
                return False
            seen += len(message.get("body", b""))
            if not message.get("more_body", False):
                return seen <= self.drain
        return False

    async def _too_big(self, scope: dict, receive: Any, send: Any, drained: bool) -> None:
        await _error(413, f"request body over {self.limit} bytes (limits.max_body_bytes)",
                     close=not drained)(scope, receive, send)


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def _lone_surrogate(body: bytes) -> str | None:
    """Where a JSON body's text holds a lone surrogate (``"skills.1"``, ``"body"`` for the whole), or None
    (also for a body that is not JSON: parsing it is the route's business)."""
    if not _SURROGATE_ESCAPE.search(body):
        return None
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        return None
    stack: list[tuple[tuple[Any, ...], Any]] = [((), value)]  # iterative: deep nesting must not exhaust the stack
    while stack:
        path, node = stack.pop()
        if isinstance(node, str):
            try:
                node.encode("utf-8")
            except UnicodeEncodeError:
                return ".".join(str(p).encode("utf-8", "backslashreplace").decode() for p in path) or "body"
        elif isinstance(node, dict):
            stack.extend(((*path, k), k) for k in node)
            stack.extend(((*path, k), v) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend(((*path, i), v) for i, v in enumerate(node))
    return None


def _error(code: int, detail: str, close: bool = False, headers: dict[str, str] | None = None) -> JSONResponse:
    """An error answer, ``{"detail": ...}``. The detail may quote the request (a field name, a value), which
    may hold a lone surrogate no UTF-8 response can carry: such characters are written as ``\\udXXX``
    escapes, so a message never turns a 4xx into a 500."""
    text = detail.encode("utf-8", "backslashreplace").decode("utf-8")
    return JSONResponse({"detail": text}, status_code=code,
                        headers={**(headers or {}), **({"Connection": "close"} if close else {})} or None)


def build_api(config: ServeConfig, backend: Backend, llm_name: str | None = None,
              token: str | None = None) -> FastAPI:
    """The app. ``token`` (tests) or else the environment variable named by ``config.token_env``, read at
    each request in the serving process (the ingress replica), never from the config file."""
    fixed_token = token
    envs: dict[str, type[Env]] = {e.name: ENVS.get(e.name) for e in config.envs}
    served = S.served_models(config, {name: cls.start_state_schema for name, cls in envs.items()
                                      if cls.start_state_schema})
    app = FastAPI(title="groundplan", version="1",
                  description="Grounded LLM planning as a service: score options, run episodes, closed-loop sessions.")
    bearer = HTTPBearer(auto_error=False)

    async def auth(creds: HTTPAuthorizationCredentials | None = Depends(bearer)) -> None:
        token = fixed_token or os.environ.get(config.token_env) or None
        if token is None:
            return
        if creds is None:
            raise _HTTP(401, "missing bearer token (Authorization: Bearer <token>)", {"WWW-Authenticate": "Bearer"})
        if not hmac.compare_digest(creds.credentials.encode(), token.encode()):
            raise _HTTP(403, "wrong bearer token")

    secured = [Depends(auth)]

    @app.exception_handler(_HTTP)
    async def _http(_: Request, exc: _HTTP) -> JSONResponse:
        return _error(exc.code, exc.detail, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        parts = []
        for err in exc.errors():
            if err.get("type") == "json_invalid":
                pos = err.get("loc", ("body", "?"))[-1]
                parts.append(f"malformed JSON at character {pos}: {err.get('ctx', {}).get('error', err.get('msg'))}")
                continue
            loc = err.get("loc", ())
            if err.get("type") == S.ENV_TAG_ERROR:  # the per-env plan variants' tag: the body's env
                loc = ("body", "env")
            elif len(loc) > 1 and loc[0] == "body" and loc[1] in envs and len(envs) > 1:
                loc = loc[:1] + loc[2:]  # the variant's tag (the env's name) is not a field of the request
            where = ".".join(str(p) for p in loc if p != "body") or "body"
            parts.append(f"{where}: {str(err.get('msg')).removeprefix('Value error, ')}")
        return _error(422, "invalid request: " + "; ".join(parts))

    def resolve(request: dict[str, Any]) -> PlanJob:
        """The request checked once (:func:`resolve_plan`), before any env is built or the backend called;
        a start state that does not fit its env's schema is a 422 naming each bad field, as for any other
        malformed field."""
        try:
            return resolve_plan(config, request)
        except StartStateError as exc:
            raise RequestValidationError([{"type": "start_state", "msg": msg,
                                           "loc": ("body", "start_state", *(field.split(".") if field else ()))}
                                          for _, field, msg in exc.errors]) from None

    @app.exception_handler(GroundplanError)
    async def _known(_: Request, exc: GroundplanError) -> JSONResponse:
        code = status_of(exc) or 400
        headers = {"Retry-After": "1"} if code == 503 else None
        return _error(code, str(exc), headers=headers)

    @app.get("/v1/healthz", response_model=S.Health, responses=_ANY_ROUTE, tags=["meta"])
    async def healthz() -> S.Health:
        return S.Health(status="ok")

    @app.get("/v1/planners", response_model=S.PlannersResponse, dependencies=secured, responses=_ERRORS, tags=["meta"])
    async def planners() -> S.PlannersResponse:
        return S.PlannersResponse(
            llm=llm_name or config.llm.model, envs=[e.name for e in config.envs],
            planners=[S.PlannerInfo(label=p.display, name=p.name, affordance=p.affordance, options=p.options)
                      for p in config.planners])

    # the request models are this server's (its names as enums, its limits as bounds), so each route is added
    # once its annotation names its model rather than by the decorator
    async def score(req: S.ScoreRequest) -> dict[str, Any]:
        """Log-probability of each option as the continuation of the prompt (batched across callers)."""
        out = await backend.score(req.prompt, req.options)
        return {**out, "request_id": req.request_id}

    def label(name: str | None) -> str:
        return config.planner_spec(config.planners[0].display if name is None else name).display

    async def plan(req: S.PlanRequest) -> dict[str, Any]:
        """Run a whole episode in the simulator and return its trace, with the plan it executed."""
        return await backend.plan(resolve(req.model_dump()))

    async def create_session(req: S.SessionCreate) -> dict[str, Any]:
        """Open a closed-loop session: then POST its steps with what the robot observed."""
        return await backend.create_session(label(req.planner), req.model_dump())

    async def step_session(session_id: str, req: S.SessionStep) -> dict[str, Any]:
        """Send the observation (and the last skill's feedback); get the next skill and its scores."""
        return await backend.step_session(_sid(session_id), req.model_dump())

    for route, model in ((score, served.score), (plan, served.plan), (create_session, served.session),
                         (step_session, served.step)):
        route.__annotations__["req"] = model
    app.post("/v1/score", response_model=S.ScoreResponse, dependencies=secured, responses=_ERRORS, tags=["llm"])(score)
    app.post("/v1/plan", response_model=S.PlanResponse, dependencies=secured, responses=_ERRORS, tags=["plan"])(plan)
    app.post("/v1/sessions", response_model=S.SessionInfo, status_code=201, dependencies=secured, responses=_ERRORS,
             tags=["sessions"])(create_session)
    app.post("/v1/sessions/{session_id}/step", response_model=S.SessionStepResponse, dependencies=secured,
             responses=_ERRORS, tags=["sessions"])(step_session)

    @app.delete("/v1/sessions/{session_id}", status_code=204, dependencies=secured, responses=_ERRORS,
                tags=["sessions"])
    async def delete_session(session_id: str) -> Response:
        await backend.delete_session(_sid(session_id))
        return Response(status_code=204)

    from groundplan.serve.openai_api import mount_openai

    mount_openai(app, config, backend, secured, _ERRORS, llm_name)
    _mount_viewer(app, config, secured, _ERRORS)
    app.add_middleware(BodyLimit, limit=config.limits.max_body_bytes, drain=config.limits.max_drain_bytes)
    return app


def _sid(session_id: str) -> str:
    if not (0 < len(session_id) <= 64) or not session_id.isalnum():
        raise SessionNotFoundError(f"no session {session_id[:64]!r}; session ids are 32 hex characters")
    return session_id


class _HTTP(Exception):
    def __init__(self, code: int, detail: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(detail)
        self.code, self.detail, self.headers = code, detail, headers


def _json_body(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


_OBJECT: dict[str, Any] = {"type": "object"}
#: the viewer's data, as :class:`~groundplan.viewer.data.ViewerData` builds it (traces as in traces.jsonl)
_VIEWER_RUNS = _json_body({"type": "array", "items": {
    "type": "object", "required": ["name", "has_summary"],
    "properties": {"name": {"type": "string"}, "has_summary": {"type": "boolean"}}}}, "the sweeps under viewer_dir")
_VIEWER_RUN = _json_body({"type": "object", "required": ["name", "traces", "summary", "table"], "properties": {
    "name": {"type": "string"}, "traces": {"type": "array", "items": _OBJECT},
    "summary": {"anyOf": [_OBJECT, {"type": "null"}]}, "table": {"type": "array", "items": _OBJECT}}},
    "one sweep: its traces, summary and table")
_VIEWER_COMPARE = _json_body({"type": "object", "required": ["run_a", "run_b"], "properties": {
    "run_a": {"type": "string"}, "run_b": {"type": "string"}}}, "two sweeps compared on their shared episodes")
_PNG = {"description": "a camera frame", "content": {"image/png": {"schema": {"type": "string", "format": "binary"}}}}


def _mount_viewer(app: FastAPI, config: ServeConfig, secured: list[Any], errors: dict[int, Any]) -> None:
    """The trace viewer at ``/``: the static page is public (it holds no data); its data routes are
    behind the token like every other endpoint (the page sends the token it is given in ``#token=``), and
    are in the OpenAPI schema with what they answer, so they are fuzzed like the rest."""
    from groundplan.viewer import STATIC
    from groundplan.viewer.data import ViewerData

    data = ViewerData(config.viewer_dir) if config.viewer_dir else None

    @app.get("/", include_in_schema=False)
    async def index() -> FileResponse:
        return FileResponse(STATIC / "viewer.html")

    @app.get("/viewer.js", include_in_schema=False)
    async def script() -> FileResponse:
        return FileResponse(STATIC / "viewer.js", media_type="text/javascript")

    def need() -> Any:
        if data is None:
            raise NotFoundError("this server has no viewer_dir")
        return data

    @app.get("/viewer/api/runs", dependencies=secured, responses={200: _VIEWER_RUNS, **errors}, tags=["viewer"])
    async def runs() -> JSONResponse:
        return JSONResponse(need().runs())

    @app.get("/viewer/api/runs/{run}", dependencies=secured, responses={200: _VIEWER_RUN, **errors}, tags=["viewer"])
    async def run(run: str) -> Response:
        return Response(need().run_json(run), media_type="application/json")

    @app.get("/viewer/api/compare/{run_a}/{run_b}", dependencies=secured, responses={200: _VIEWER_COMPARE, **errors},
             tags=["viewer"])
    async def compare(run_a: str, run_b: str) -> Response:
        return Response(need().compare_json(run_a, run_b), media_type="application/json")

    @app.get("/viewer/frames/{run}/{sid}/{name}", dependencies=secured, responses={200: _PNG, **errors},
             response_class=FileResponse, tags=["viewer"])
    async def frame(run: str, sid: str, name: str) -> FileResponse:
        return FileResponse(need().frame_path(run, sid, name), media_type="image/png")
