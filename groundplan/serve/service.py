"""The planning logic behind the API, with no Ray and no HTTP: the same episode worker as ``groundplan eval``
(:class:`~groundplan.actors.worker.EpisodeWorker`, its envs and planners kept between requests) and the same
factory for session planners (:func:`groundplan.factory.make_planner`).

:func:`resolve_plan` checks a ``/v1/plan`` request once, before it is routed; :class:`PlannerService` runs
whole episodes (``/v1/plan``) and closed-loop sessions (``/v1/sessions``);
:class:`ServeScorer` is the one scorer host (:class:`~groundplan.actors.scorer.LLMScorer`, eval's scorer
too) configured from the serve config, with the API's limits and response shapes. The Serve deployments
and the in-process backend (``--local``, tests) both wrap these classes, so there is one copy of the logic.
"""
from __future__ import annotations

import dataclasses
import logging
import math
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from groundplan.actors.scorer import LLMScorer, import_plugins
from groundplan.actors.worker import EpisodeWorker, WorkerSpec
from groundplan.config import PlannerSpec
from groundplan.core.errors import InvalidInputError, NotFoundError
from groundplan.core.types import Decision, Observation, StepResult, Task
from groundplan.core.validation import some, validate_instruction
from groundplan.envs import ENVS
from groundplan.envs.base import StartStateError
from groundplan.factory import make_planner
from groundplan.grounding.base import Affordance
from groundplan.llm.base import GenerationParams, LanguageModel
from groundplan.planners.base import Planner
from groundplan.rollout.runner import EpisodeSpec
from groundplan.serve.config import ServeConfig
from groundplan.serve.errors import SessionConflictError
from groundplan.serve.sessions import SessionRecord, SessionStore

log = logging.getLogger(__name__)

#: live planners a replica keeps for sessions (a miss costs one replay, never correctness)
_LIVE_CACHE = 128


def _finite(x: float | None) -> float | None:
    """JSON has no infinities: an affordance of 0 gives log 0 = -inf, reported as null."""
    return None if x is None or not math.isfinite(x) else float(x)


def candidates_out(decision_candidates: Sequence[Any]) -> list[dict[str, Any]]:
    return [{"skill": c.skill, "llm": _finite(c.llm), "affordance": _finite(c.affordance), "combined": _finite(c.combined)}
            for c in decision_candidates]


class ClientAffordance(Affordance):
    """Affordances the client measured (the robot's own value functions, SayCan Sec. 3): read from
    ``observation.state["affordances"]``; a skill without a value gets ``default``."""

    def __init__(self, default: float = 1.0) -> None:
        self.default = default

    def __call__(self, observation: Observation, skills: Sequence[str], history: Sequence[str]) -> np.ndarray:
        given = (observation.state or {}).get("affordances", {}) if isinstance(observation.state, dict) else {}
        return np.array([float(given.get(s, self.default)) for s in skills], dtype=np.float64)


class ServeScorer(LLMScorer):
    """The scorer host configured by a serve config: ``scorer.max_batch_size`` and
    ``scorer.batch_wait_timeout_s`` are its batching window, ``scorer.memo_size`` its memo. Serve deploys
    this class as it is, and ``--local`` calls it in its own event loop, so both batch, memoize and count
    alike. A batch closes when full, when the wait is over, or (``scorer.adaptive_batching``, as eval's
    scorer) when as many requests are in as were outstanding at once since the last batch: an HTTP client
    with k concurrent slots keeps k requests in play, and a lone one is not held for the window. Torch's
    threads are left as the process has them.

    What it adds to the host is the API's side: a caller's request is checked against ``limits`` and
    answered as the JSON the endpoints return."""

    def __init__(self, config: ServeConfig | dict[str, Any], lm_factory: Callable[[], LanguageModel] | None = None) -> None:
        import_plugins()  # before validating: the config names the backend, which may be a module of one's own
        cfg = config if isinstance(config, ServeConfig) else ServeConfig.model_validate(config)
        sc = cfg.scorer
        super().__init__(cfg.llm.backend, cfg.llm.model, dict(cfg.llm.options), lm_factory=lm_factory,
                         batch_window_ms=1000 * sc.batch_wait_timeout_s, max_batch=sc.max_batch_size,
                         memo_size=sc.memo_size, adaptive_batching=sc.adaptive_batching, num_threads=0)
        self.config = cfg

    async def score_request(self, prompt: str, options: list[str]) -> dict[str, Any]:
        """A caller's request: checked against the limits, then batched; the scores with the batch's size."""
        self.check(prompt, options)
        scores, size = await self.score_sized(prompt, options)
        return {"model": self.name, "options": [dataclasses.asdict(s) for s in scores], "batch_size": size}

    async def generate_request(self, prompt: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        return [dataclasses.asdict(g) for g in await self.generate(prompt, GenerationParams(**params))]

    def check(self, prompt: str, options: Sequence[str]) -> None:
        """Refuse a request over the configured limits before it reaches a batch (a planner's own
        requests, a whole skill set, skip this: the limits bound callers, not the planners served)."""
        lim = self.config.limits
        if not options:
            raise InvalidInputError("options is empty: give at least one option to score")
        if len(options) > lim.max_options:
            raise InvalidInputError(f"{len(options)} options; the limit is {lim.max_options} per request")
        if len(prompt) > lim.max_prompt_chars:
            raise InvalidInputError(f"the prompt is {len(prompt)} characters; the limit is {lim.max_prompt_chars}")
        for o in options:
            if not o.strip():
                raise InvalidInputError("an option is empty")
            if len(o) > lim.max_option_chars:
                raise InvalidInputError(f"an option is {len(o)} characters; the limit is {lim.max_option_chars}")


class PlannerService:
    """Episodes and sessions for the planners this replica serves (``labels``; default all)."""

    def __init__(self, config: ServeConfig, lm: LanguageModel, store: Any, labels: Sequence[str] | None = None) -> None:
        self.config = config
        self.lm = lm
        self.store = store  # a SessionStore, or a synchronous proxy of the store actor
        self.labels = list(labels) if labels else [p.display for p in config.planners]
        for label in self.labels:
            config.planner_spec(label)
        self._skills: dict[str, list[str]] = {}
        self._workers: dict[str, EpisodeWorker] = {}
        self._tasks: dict[str, dict[str, Task]] = {}
        self._build_lock = threading.Lock()
        self._live: OrderedDict[str, tuple[int, Planner, threading.Lock]] = OrderedDict()
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ shared
    def _label(self, planner: str | None) -> str:
        label = self.labels[0] if planner is None else planner  # only None means the default; "" is unknown
        self.config.planner_spec(label)  # unknown → UnknownNameError naming the served ones
        self._serves(label)
        return label

    def _serves(self, label: str) -> None:
        if label not in self.labels:
            raise InvalidInputError(f"planner '{label}' is served by another deployment, not this one")

    def _check_skills(self, skills: Sequence[str], where: str) -> list[str]:
        """A skill set from a client (session creation or a step's observation): within
        ``limits.max_skills``, every label non-empty."""
        limit = self.config.limits.max_skills
        if len(skills) > limit:
            raise InvalidInputError(f"{where}: {len(skills)} skills; the limit is {limit}")
        if not skills:
            raise InvalidInputError(f"{where}: the list is empty; give at least one skill, or leave it out (null) for "
                                    "the default")
        if any(not s.strip() for s in skills):
            raise InvalidInputError(f"{where}: skills must be non-empty labels")
        return list(skills)

    def _worker(self, env_name: str) -> EpisodeWorker:
        """The episode worker of an env: its envs are built as concurrent requests need them, up to the
        deployment's ``max_ongoing_requests``, and reused, as are the planners each env's runner builds."""
        with self._build_lock:
            worker = self._workers.get(env_name)
            if worker is None:
                cfg = self.config
                spec = WorkerSpec(env=cfg.env_spec(env_name), max_steps=cfg.limits.max_steps,
                                  envs=cfg.planner.max_ongoing_requests, lm=lambda: self.lm, llm_name=cfg.llm.model,
                                  envs_on_demand=True, record_frames=False, record_setup_errors=False)
                worker = self._workers[env_name] = EpisodeWorker(spec)
            return worker

    def env_skills(self, env_name: str) -> list[str]:
        """The env's skill set at reset (cached per env)."""
        if env_name not in self._skills:
            # the scene's own task (its goal included) only lists the actions the scene offers
            task = self._scene(env_name) or Task(task_id="serve-skills", instruction="list skills", family="serve",
                                                 goal=None)
            with self._worker(env_name).borrow() as slot:
                self._skills[env_name] = list(slot.env.reset(task, 0).skills)
        return self._skills[env_name]

    def _env_tasks(self, env_name: str) -> dict[str, Task]:
        """The env's own tasks by id (cached per env), listed where the env lives."""
        if env_name not in self._tasks:
            with self._worker(env_name).borrow() as slot:
                self._tasks[env_name] = {t.task_id: t for t in slot.env.tasks()}
        return self._tasks[env_name]

    def _scene(self, env_name: str) -> Task | None:
        """The task whose scene an instruction of one's own runs in (the env declares it,
        :attr:`~groundplan.envs.base.EnvCapabilities.adhoc_scene`): None for the env's default scene, else
        its first task."""
        if ENVS.get(self.config.env_spec(env_name).name).capabilities.adhoc_scene == "default":
            return None
        scene = next(iter(self._env_tasks(env_name).values()), None)
        if scene is None:
            raise NotFoundError(f"env '{env_name}' has no task whose scene an instruction of one's own could run in")
        return scene

    def _adhoc_task(self, env_name: str, instruction: str, start_state: dict[str, Any] | None) -> Task:
        """A task of one's own instruction, without a goal: in the env's default scene, or with its scene
        task's family, start state and metadata (the request's start state, when given, replaces the
        scene's). The metadata is what lays the scene out (a VirtualHome program id); a planner reads it
        only through the truth gate, as it reads any task's."""
        scene = self._scene(env_name)
        if scene is None:
            return Task(task_id="serve", instruction=instruction, family="serve", goal=None, start_state=start_state)
        return Task(task_id="serve", instruction=instruction, family=scene.family, goal=None,
                    start_state=scene.start_state if start_state is None else start_state,
                    metadata=dict(scene.metadata))  # the scene's data (a VirtualHome program id), truth-gated

    def _task(self, job: PlanJob) -> Task:
        """The episode's task: the env's task ``job.task_id`` (with the request's instruction and start state
        when given), or an ad-hoc instruction without a goal."""
        if not job.task_id:
            return self._adhoc_task(job.env, job.instruction or "", job.start_state)
        tasks = self._env_tasks(job.env)
        task = tasks.get(job.task_id)
        if task is None:  # the env's task set is its data, looked up where the env lives, as a session is
            raise NotFoundError(f"env '{job.env}' has no task '{job.task_id}'; it has: "
                                f"{some(list(tasks), 3) or 'none'}")
        return Task(task.task_id, job.instruction or task.instruction, task.family, task.goal,
                    task.start_state if job.start_state is None else job.start_state, task.reference_plan,
                    task.metadata)

    # ------------------------------------------------------------------ /v1/plan
    def plan(self, job: PlanJob | Mapping[str, Any]) -> dict[str, Any]:
        """Run one whole episode in the simulator on a pooled env and planner; returns the trace as a dict,
        with the plan. A request is checked once, by :func:`resolve_plan` (the API does it before routing
        the job here; a mapping is resolved here), so bad input is an error, never a failed trace."""
        if not isinstance(job, PlanJob):
            job = resolve_plan(self.config, job)
        self._serves(job.planner.display)
        task = self._task(job)
        spec = EpisodeSpec(job.planner, task, job.seed, episode_id="", max_steps=job.max_steps)
        trace = self._worker(job.env).run(spec).trace
        out = trace.to_dict()
        for step in out["steps"]:
            step["candidates"] = [{k: _finite(v) if isinstance(v, float) else v for k, v in c.items()}
                                  for c in step["candidates"]]
        if task.goal is None:
            out["execution_success"] = None
        out["plan"] = trace.plan
        return out

    # ------------------------------------------------------------------ sessions
    def _build_planner(self, rec: SessionRecord) -> Planner:
        spec = self.config.planner_spec(rec.planner)
        affordance = ClientAffordance(self.config.default_affordance) if spec.affordance else None
        planner = make_planner(spec, self.lm, self.config.limits.max_session_steps, affordance=affordance)
        task = Task(task_id=f"session-{rec.session_id}", instruction=rec.instruction, family="session", goal=None)
        planner.reset(task, self._observation(rec, {}), seed=rec.seed)
        return planner

    def _check_observation(self, obs: dict[str, Any]) -> None:
        """A step's observation, checked before anything runs: its skills (when given) like a session's,
        its affordances probabilities."""
        if obs.get("skills") is not None:
            self._check_skills(obs["skills"], "observation.skills")
        for skill, p in (obs.get("affordances") or {}).items():
            if not (0.0 <= float(p) <= 1.0) or not math.isfinite(float(p)):
                raise InvalidInputError(f"observation.affordances: affordance of '{skill}' is {p}; "
                                        "it must be a probability in [0, 1]")

    def _observation(self, rec: SessionRecord, obs: dict[str, Any]) -> Observation:
        """The planner's observation of a step (checked by :meth:`_check_observation` when it arrived)."""
        skills = obs.get("skills")
        return Observation(skills=list(rec.skills if skills is None else skills),
                           state={"affordances": dict(obs.get("affordances") or {})}, text=obs.get("text", ""))

    def _replay_step(self, planner: Planner, rec: SessionRecord, event: dict[str, Any]) -> Decision:
        obs = self._observation(rec, event.get("observation") or {})
        fb = event.get("feedback")
        last = None if fb is None else StepResult(bool(fb.get("success", True)), fb.get("text", ""), obs)
        return planner.next_step(obs, last)

    def create_session(self, request: dict[str, Any]) -> dict[str, Any]:
        label = self._label(request.get("planner"))
        instruction = validate_instruction(request.get("instruction", ""), self.config.limits.max_instruction_chars)
        env_name = self.config.env_spec(_given(request, "env", self.config.envs[0].name)).name
        given = request.get("skills")  # [] is refused by _check_skills, never read as "the env's"
        skills = self._check_skills(self.env_skills(env_name) if given is None else given, "skills")
        rec = self.store.create(label, env_name, instruction, int(request.get("seed", 0)), list(skills))
        return self.session_info(rec)

    def session_info(self, rec: SessionRecord) -> dict[str, Any]:
        return {"session_id": rec.session_id, "planner": rec.planner, "env": rec.env, "instruction": rec.instruction,
                "skills": rec.skills, "steps": len(rec.events), "done": rec.done,
                "idle_expiry_s": self.config.limits.session_idle_s}

    def step_session(self, session_id: str, request: dict[str, Any]) -> dict[str, Any]:
        self._check_observation(request.get("observation") or {})
        rec = self.store.get(session_id)
        if rec.planner not in self.labels:
            raise InvalidInputError(f"session {session_id} belongs to planner '{rec.planner}'")
        if rec.done:
            raise SessionConflictError(f"session {session_id} is finished (the planner chose done); start a new one")
        if len(rec.events) >= self.config.limits.max_session_steps:
            raise SessionConflictError(f"session {session_id} reached its cap of "
                                       f"{self.config.limits.max_session_steps} steps")
        index = len(rec.events)
        event = {"observation": request.get("observation") or {}, "feedback": request.get("feedback")}
        with self._lock:
            cached = self._live.pop(session_id, None)
        replayed = cached is None or cached[0] != index
        if replayed:
            planner, lock = self._build_planner(rec), threading.Lock()
            with lock:
                for k, past in enumerate(rec.events):
                    got = self._replay_step(planner, rec, past)
                    if got.skill != rec.decisions[k]["skill"]:
                        log.warning("session %s: replay of step %d chose %r, logged %r", session_id, k, got.skill,
                                    rec.decisions[k]["skill"])
        else:
            _, planner, lock = cached
        with lock:
            decision = self._replay_step(planner, rec, event)
            self.store.append(session_id, index, event, {"skill": decision.skill, "done": decision.done})
        with self._lock:
            self._live[session_id] = (index + 1, planner, lock)
            while len(self._live) > _LIVE_CACHE:
                self._live.popitem(last=False)
        return {"session_id": session_id, "step": index, "skill": decision.skill, "done": decision.done,
                "prompt_delta": decision.prompt_delta, "candidates": candidates_out(decision.candidates),
                "replayed": replayed and index > 0}

    def delete_session(self, session_id: str) -> None:
        self.store.delete(session_id)
        with self._lock:
            self._live.pop(session_id, None)

    def forget(self) -> None:
        """Drop every live planner (tests use it to simulate a replica restart)."""
        with self._lock:
            self._live.clear()


@dataclass(frozen=True)
class PlanJob:
    """A ``/v1/plan`` request that :func:`resolve_plan` checked: what a planner replica runs."""

    planner: PlannerSpec
    env: str
    max_steps: int
    seed: int = 0
    task_id: str | None = None
    instruction: str | None = None
    start_state: dict[str, Any] | None = None


def resolve_plan(config: ServeConfig, request: Mapping[str, Any]) -> PlanJob:
    """Every check of a ``/v1/plan`` request that needs no env, once, before anything runs: the planner
    label, the step cap, the env, the start state and the instruction (the task id needs the env's task
    list and is looked up where the env lives: a :class:`NotFoundError` there). The API's request model
    (:func:`~groundplan.serve.schemas.served_models`) already holds a body to all of these but the start
    state's env data; they are checked here again for callers that pass a mapping. A name or task id
    left out (or null) is the default, the server's first env or planner or an instruction of one's own;
    an empty one is refused, never read as the default.

    ``max_steps`` may lower the server's ``limits.max_steps``, never raise it (refused rather than clamped,
    so the caller knows it got fewer steps than asked). The start state goes through its env's own parser
    (the one task files use: the schema, then what needs the env's data) from the env class alone; a
    schema error is a :class:`StartStateError` naming each field (the API answers 422 with their paths)."""
    spec = config.planner_spec(_given(request, "planner", config.planners[0].display))
    limit = config.limits.max_steps
    requested = request.get("max_steps")
    if requested is not None and requested > limit:
        raise InvalidInputError(f"max_steps is {requested}; this server's limit is {limit} (limits.max_steps): "
                                f"ask for at most {limit}, or omit max_steps to get {limit}")
    env = config.env_spec(_given(request, "env", config.envs[0].name)).name
    start_state = None
    if request.get("start_state") is not None:
        try:
            start_state = ENVS.get(env).parse_start_state(request["start_state"])
        except StartStateError:
            raise
        except InvalidInputError as exc:
            raise InvalidInputError(f"start_state: {exc}") from None
    task_id = request.get("task_id")
    if task_id is not None and not task_id.strip():
        raise InvalidInputError("task_id is empty: name one of the env's tasks, or leave task_id out to run an "
                                "instruction of your own")
    instruction = request.get("instruction")
    if instruction is not None or task_id is None:
        instruction = validate_instruction(instruction or "", config.limits.max_instruction_chars)
    return PlanJob(spec, env, limit if requested is None else int(requested), int(request.get("seed", 0)), task_id,
                   instruction, start_state)


def _given(request: Mapping[str, Any], key: str, default: str) -> str:
    """``request[key]``, or ``default`` when it is left out or null: an empty name is looked up (and refused
    as unknown), never read as the default."""
    value = request.get(key)
    return default if value is None else value


def local_store(config: ServeConfig) -> SessionStore:
    lim = config.limits
    return SessionStore(lim.max_sessions, lim.session_idle_s, lim.max_session_steps)
