"""The Ray Serve application: an LLM scorer deployment, one planner deployment per configured planner,
and the FastAPI ingress (:func:`build_app`).

- ``Scorer`` is the one scorer host, :class:`~groundplan.serve.service.ServeScorer` (eval's
  :class:`~groundplan.actors.scorer.LLMScorer` configured from the serve config), under
  ``serve.deployment`` and nothing else: it holds the model and batches concurrent score requests — from
  HTTP callers and from every planner replica — into one ``score_batch`` call with the host's batcher,
  so requests that share a prompt share its prefix, and the memo and stats are the eval actor's. It
  does not use ``@serve.batch``: that would be a second batching policy beside the host's, and the
  host's batcher already runs in the replica's event loop. The prompt log-probs of ``/v1/completions``
  (``echo`` + ``logprobs``) are batched the same way into one ``prompt_logprobs`` call, so the
  ``prompt + option`` texts of one SayCan step, sent concurrently, share their prompt.
- ``Planner-<label>`` replicas run :class:`~groundplan.serve.service.PlannerService` (the eval factory and
  episode runner) with a language model that forwards to the scorer (:class:`ServeLM`).
- Sessions live in one named detached actor (:mod:`groundplan.serve.sessions`); planner replicas only
  cache live planners and replay the session log when they do not hold one.

A replica that dies mid-request: the ingress retries an idempotent score up to ``_RETRIES`` times, else
answers 503 with ``Retry-After`` (the request had no effect), never a silent loss.
"""
from __future__ import annotations

import asyncio
import logging
import re
import signal
import time
from typing import Any, Callable

from ray import serve

from groundplan.actors.group import RunnerGroup
from groundplan.actors.pool import classify_ray_error
from groundplan.llm.base import LanguageModel, PromptLogprobs
from groundplan.llm.client import HostClient
from groundplan.serve.config import ServeConfig
from groundplan.serve.errors import RetryableError
from groundplan.serve.service import ServeScorer
from groundplan.serve.signals import StopSignals, ray_processes_in_own_session

log = logging.getLogger(__name__)
_RETRIES = 3


def _as_api_error(exc: BaseException) -> BaseException:
    """What a failed call on a deployment or the session store raises here, by the one reading of Ray's
    errors (:func:`~groundplan.actors.pool.classify_ray_error`): the error raised inside the replica, or a
    RetryableError (503, send it again) when the replica itself died or is unreachable."""
    failure = classify_ray_error(exc)
    if failure.kind == "actor":
        return RetryableError(f"a replica died while serving this request ({type(exc).__name__}); send it again")
    return failure.cause


#: the scorer host (eval's scorer class, configured from the serve config) as Serve's deployment: a
#: decoration only, so batching, the memo and the stats are the eval actor's and ``--local``'s
Scorer = serve.deployment(name="Scorer")(ServeScorer)


class ServeLM(HostClient):
    """A synchronous :class:`~groundplan.llm.base.LanguageModel` over the scorer deployment (used from
    worker threads of a planner replica; each request of a ``score_batch`` joins the scorer's batches,
    without the per-caller limits: a planner asks for its whole skill set)."""

    def __init__(self, handle: Any, name: str) -> None:
        self.handle, self.name = handle, name

    def _submit(self, method: str, *args: Any) -> Any:
        return getattr(self.handle, method).remote(*args)

    def _result(self, pending: Any) -> Any:
        try:
            return pending.result()
        except Exception as exc:
            raise _as_api_error(exc) from None


class _StoreProxy:
    """Synchronous calls on the session store actor, with its errors unwrapped."""

    def __init__(self, actor: Any) -> None:
        self._actor = actor

    def __getattr__(self, name: str) -> Callable[..., Any]:
        import ray

        def call(*args: Any) -> Any:
            try:
                return ray.get(getattr(self._actor, name).remote(*args))
            except Exception as exc:
                raise _as_api_error(exc) from None

        return call


@serve.deployment
class PlannerDeployment:
    """One configured planner: whole episodes and session steps, in worker threads."""

    def __init__(self, config: dict[str, Any], label: str, scorer: Any) -> None:
        from groundplan.actors.scorer import import_plugins
        from groundplan.serve.service import PlannerService
        from groundplan.serve.sessions import session_store_handle

        import_plugins()  # the config names the backend, and validating it needs the backend registered
        cfg = ServeConfig.model_validate(config)
        lim = cfg.limits
        store = _StoreProxy(session_store_handle(cfg.name, lim.max_sessions, lim.session_idle_s, lim.max_session_steps))
        self.service = PlannerService(cfg, ServeLM(scorer, cfg.llm.model), store, labels=[label])

    async def plan(self, job: Any) -> dict[str, Any]:
        return await asyncio.to_thread(self.service.plan, job)

    async def create_session(self, request: dict[str, Any]) -> dict[str, Any]:
        return await asyncio.to_thread(self.service.create_session, request)

    async def step_session(self, session_id: str, request: dict[str, Any]) -> dict[str, Any]:
        return await asyncio.to_thread(self.service.step_session, session_id, request)

    async def delete_session(self, session_id: str) -> None:
        await asyncio.to_thread(self.service.delete_session, session_id)

    async def owner(self, session_id: str) -> str:
        return (await asyncio.to_thread(self.service.store.get, session_id)).planner


#: handles of this process's ingress replica, set in its constructor (the app is pickled into the
#: replica, so the backend finds them here rather than in a closure)
_HANDLES: dict[str, Any] = {}


class HandleBackend:
    """The API's backend in the ingress replica: calls the deployments through their handles."""

    async def _call(self, handle: Any, method: str, *args: Any, retries: int = 0) -> Any:
        for attempt in range(retries + 1):
            try:
                return await getattr(handle, method).remote(*args)
            except Exception as exc:
                err = _as_api_error(exc)
                if isinstance(err, RetryableError) and attempt < retries:
                    log.warning("retrying %s after %s (attempt %d)", method, type(exc).__name__, attempt + 1)
                    await asyncio.sleep(0.2 * (attempt + 1))
                    continue
                raise err from None

    async def score(self, prompt: str, options: list[str]) -> dict[str, Any]:
        return await self._call(_HANDLES["scorer"], "score_request", prompt, options, retries=_RETRIES)

    async def prompt_logprobs(self, prompts: list[Any], top_k: int, keep_next: bool = False) -> list[PromptLogprobs]:
        return await self._call(_HANDLES["scorer"], "prompt_logprobs", prompts, top_k, keep_next, retries=_RETRIES)

    async def count_tokens(self, texts: list[str]) -> list[int]:
        return await self._call(_HANDLES["scorer"], "count_tokens", texts, retries=_RETRIES)

    async def generate(self, prompt: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        return await self._call(_HANDLES["scorer"], "generate_request", prompt, params, retries=1)

    async def plan(self, job: Any) -> dict[str, Any]:
        return await self._call(_HANDLES["planners"][job.planner.display], "plan", job, retries=1)

    async def create_session(self, planner: str, request: dict[str, Any]) -> dict[str, Any]:
        return await self._call(_HANDLES["planners"][planner], "create_session", {**request, "planner": planner})

    async def _owner(self, session_id: str) -> Any:
        first = next(iter(_HANDLES["planners"].values()))
        label = await self._call(first, "owner", session_id, retries=1)
        return _HANDLES["planners"][label]

    async def step_session(self, session_id: str, request: dict[str, Any]) -> dict[str, Any]:
        return await self._call(await self._owner(session_id), "step_session", session_id, request)

    async def delete_session(self, session_id: str) -> None:
        await self._call(await self._owner(session_id), "delete_session", session_id)


def _slug(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", label).strip("-") or "planner"


def build_app(config: ServeConfig, lm_factory: Callable[[], LanguageModel] | None = None) -> Any:
    """The bound application (``serve.run(build_app(cfg))``); ``lm_factory`` replaces ``config.llm`` in
    the scorer (tests pass fakes)."""
    from groundplan.serve.api import build_api

    data = config.model_dump()

    def opts(spec: Any, name: str) -> dict[str, Any]:
        return {"name": name, "max_ongoing_requests": spec.max_ongoing_requests,
                "autoscaling_config": spec.autoscaling.to_serve(), "ray_actor_options": spec.placement.to_serve()}

    scorer = Scorer.options(**opts(config.scorer, "Scorer")).bind(data, lm_factory)
    planners = {p.display: PlannerDeployment.options(**opts(config.planner, f"Planner-{_slug(p.display)}"))
                .bind(data, p.display, scorer) for p in config.planners}
    api = build_api(config, HandleBackend())

    class IngressBase:
        def __init__(self, scorer: Any, planners: dict[str, Any]) -> None:
            # this class is pickled by value: reach the module's dict through an import, not a global
            from groundplan.serve import app as module

            module._HANDLES.update(scorer=scorer, planners=planners)

    ingress = serve.deployment(serve.ingress(api)(IngressBase), name="Ingress")
    return ingress.options(**opts(config.ingress, "Ingress")).bind(scorer, planners)


def app_builder(args: dict[str, str]) -> Any:
    """``serve run groundplan.serve.app:app_builder config=configs/serve_kitchen.yaml`` on a cluster."""
    from groundplan.serve.config import load_serve_config

    return build_app(load_serve_config(args["config"]))


def run_server(config: ServeConfig, address: str | None = None, blocking: bool = True,
               lm_factory: Callable[[], LanguageModel] | None = None, stop: StopSignals | None = None) -> int:
    """Start Ray (or join ``address``), Serve's HTTP proxy on ``config.host:config.port``, and the app.

    ``blocking`` (``groundplan serve``): serve until SIGINT or SIGTERM, then shut Serve down, stop Ray if
    it was started here (never a cluster joined at ``address``), and return the exit status 128 + the
    signal's number (130, 143); a signal during start-up stops it the same way. ``stop``: handlers the
    caller installed earlier (the CLI does, before importing Ray). Not blocking (tests): return 0 once
    the app is running; the caller shuts down.

    The Ray session is a :class:`~groundplan.actors.group.RunnerGroup`'s, as every job's is: it joins or
    starts Ray (letting Ray pick where an address-less session goes, in Serve's namespace) unless this
    process has one, and its ``close`` takes down only a session it began."""
    group = RunnerGroup(address=address, namespace="groundplan-serve", own_local=False)
    if not blocking:
        group.connect()
        _deploy(config, lm_factory)
        _await_running(config.name, StopSignals())
        return 0

    stop = stop or StopSignals()
    stop.install()
    try:
        if stop.received is None:
            try:
                with ray_processes_in_own_session():
                    group.connect()
            except SystemExit as exc:  # SIGTERM during ray.init reached Ray's handler, which exits
                if exc.code != signal.SIGTERM:
                    raise
                stop.record(signal.SIGTERM)
        stop.install()  # again: ray.init replaced the SIGTERM handler (and its core worker added a native one)
        if stop.received is None:
            _deploy(config, lm_factory)
            if _await_running(config.name, stop):
                log.info("groundplan serve: http://%s:%d%s (docs at /docs)", config.host, config.port,
                         config.route_prefix)
                stop.wait()
    finally:
        if stop.received is not None:
            log.warning("groundplan serve: shutting down (%s)", stop.received.name)
        _shutdown(config.name, group)
    return stop.exit_status


def _deploy(config: ServeConfig, lm_factory: Callable[[], LanguageModel] | None) -> None:
    """Start Serve's proxy and submit the application, without waiting for it (:func:`_await_running`
    waits in a loop that notices stop signals; Serve's own wait would have to be interrupted)."""
    serve.start(http_options={"host": config.host, "port": config.port})
    target = serve.RunTarget(target=build_app(config, lm_factory), name=config.name, route_prefix=config.route_prefix)
    serve.run_many([target], wait_for_ingress_deployment_creation=False, wait_for_applications_running=False)


def _await_running(name: str, stop: StopSignals) -> bool:
    """Wait until application ``name`` runs (True) or a stop signal arrives (False); a failed deploy
    (a replica that cannot start, e.g. a model that does not load) raises with Serve's message, which
    the CLI prints as an error."""
    from groundplan.core.errors import GroundplanError

    def running() -> bool:
        app = serve.status().applications.get(name)
        if app is not None and app.status == "DEPLOY_FAILED":
            why = [f"{dep}: {_last_line(d.message)}" for dep, d in app.deployments.items()
                   if d.status != "HEALTHY" and d.message]
            raise GroundplanError(f"deploying application '{name}' failed: {'; '.join(why) or app.message}")
        return app is not None and app.status == "RUNNING"

    return not stop.wait(until=running)


def _last_line(message: str) -> str:
    """The error itself out of a replica's failure message (which ends with the traceback)."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    return lines[-1] if lines else message


def _shutdown(name: str, group: RunnerGroup) -> None:
    """Serve, then the Ray session of ``group`` (the server's :class:`~groundplan.actors.group.RunnerGroup`,
    which shuts down only a session it began); failures are logged, not raised, so each step is
    tried. Serve is shut down whole unless the cluster runs other applications too (then only
    application ``name`` is deleted). It is skipped when the Ray started here is already going down:
    a stop signal sent to every process of a cgroup (systemd's default) reaches Ray's own processes too
    (a process-group signal does not: they have a session of their own),
    and waiting on Serve's dead controller would only run into its 30 s timeout."""
    import ray

    if ray.is_initialized() and not (group.started and _ray_going_down()):
        try:
            others = sorted(app for app in serve.status().applications if app != name)
            if others:
                log.info("deleting application %s only: the cluster also runs %s", name, ", ".join(others))
                serve.delete(name)
            else:
                serve.shutdown()
        except Exception as exc:
            log.warning("Serve did not shut down cleanly: %s", exc)
    try:
        group.close()
    except Exception as exc:
        log.warning("Ray did not shut down cleanly: %s", exc)


def _ray_going_down(settle_s: float = 1.0, poll_s: float = 0.1) -> bool:
    """Whether a process of the Ray this driver started (GCS, raylet, dashboard, log monitor) has
    exited, or does within ``settle_s`` of the signal (they exit on SIGTERM within a fraction of a
    second; on SIGINT, which Ray's processes block, none does)."""
    from ray._private import worker

    node = worker._global_node
    if node is None:
        return False
    for _ in range(max(1, round(settle_s / poll_s))):
        dead = node.dead_processes()
        if dead:
            log.info("Ray is already stopping (%s exited): skipping Serve's graceful shutdown",
                     ", ".join(sorted({kind for kind, _ in dead})))
            return True
        time.sleep(poll_s)
    return False
