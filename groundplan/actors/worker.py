"""The episode worker: envs that play ``run_episode`` and hand back what the job asks for.

Sweeps want an episode's trace, collection wants its trajectory row; both play the same loop on an env
that lives as long as the worker (building it once is what makes a pool pay off: PyBullet clients,
minigrid levels, VirtualHome graphs), so one class serves both, in this process or as a Ray actor
(:class:`~groundplan.actors.group.RunnerGroup` decides which). A job that is an
:class:`~groundplan.rollout.runner.EpisodeSpec` returns an
:class:`~groundplan.rollout.runner.EpisodeResult` (the trace and its frames); a :class:`CollectItem`
returns the trajectory row of :func:`~groundplan.rollout.trajectory.run_trajectory`. Env, language
model, planners and experts are built through :mod:`groundplan.factory`, as everywhere else.

With ``envs`` > 1 the worker owns that many envs, each with its own language model (so a scorer death is
charged to the right episode), and each concurrent call takes a free one: episodes mostly wait on the
scorer, so a threaded actor suffices and many cheap sims share one process (RLlib's
``num_envs_per_env_runner``).

An episode during which a scorer call failed for good raises :class:`InfrastructureError` instead of
returning its result: an infrastructure fault must be rerun by the driver from reset, never recorded as
the planner's failure.
"""
from __future__ import annotations

import logging
import os
import queue
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from groundplan.actors.remote import ActorGuard
from groundplan.config import EnvSpec, LLMSpec, PlannerSpec
from groundplan.core.errors import InfrastructureError
from groundplan.core.types import Task
from groundplan.factory import build_expert, make_env, make_llm, make_planner
from groundplan.llm.base import LanguageModel
from groundplan.planners.base import Planner
from groundplan.rollout.runner import EpisodeResult, EpisodeRunner, EpisodeSpec
from groundplan.rollout.trajectory import ExpertPlanner, run_trajectory

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CollectItem:
    """One trajectory to collect: the job whose answer is a trajectory row."""

    traj_id: str
    split: str
    task: Task
    seed: int


@dataclass(frozen=True)
class TrajectorySource:
    """Who acts in a collected trajectory: a registered expert (``expert``, default the env's own) or a
    registered planner (``planner`` with the model ``llm``)."""

    expert: str | None = None
    planner: PlannerSpec | None = None
    llm: LLMSpec | None = None


@dataclass(frozen=True)
class WorkerSpec:
    """Everything an :class:`EpisodeWorker` is built from (picklable: it travels to the actor).

    ``lm`` builds one language model per env (a client of the scorer actors on Ray; the model itself in
    this process); None leaves the sweep without a model, which only a collection by an expert may.
    ``source`` says who acts in collected trajectories."""

    env: EnvSpec
    max_steps: int
    envs: int = 1
    lm: Callable[[], LanguageModel] | None = None
    llm_name: str = ""
    config_hash: str = ""
    affordance_server: Any = None
    source: TrajectorySource | None = None
    max_admissible: int | None = None
    #: label each listed action's feasibility in collected rows (``collect``'s ``label_listed``)
    label_listed: bool = False
    #: build envs as concurrent calls need them, up to ``envs`` (the serve API, whose concurrency is a
    #: ceiling), instead of all up front (sweeps, which use every env from the start)
    envs_on_demand: bool = False
    record_frames: bool = True
    #: a planner that refuses a task is a failed episode (sweeps), or the caller's bad input (the serve API)
    record_setup_errors: bool = True


class _Slot:
    """One env with its model; the runner (traces) and the trajectory planner (rows) are built on first use."""

    def __init__(self, spec: WorkerSpec, affordance_for: Any) -> None:
        self.spec = spec
        self.env = make_env(spec.env)
        self.lm = spec.lm() if spec.lm is not None else None
        self.affordance_for = affordance_for
        self._runner: EpisodeRunner | None = None
        self._planner: Planner | None = None
        self.label = ""
        self.expert: Any = None
        self.episodes = 0
        self.busy_s = 0.0

    def runner(self) -> EpisodeRunner:
        if self._runner is None:
            if self.lm is None:
                raise InfrastructureError("this episode worker has no language model: it was built for expert data")
            self._runner = EpisodeRunner(self.env, self.lm, self.spec.max_steps, llm_name=self.spec.llm_name,
                                         config_hash=self.spec.config_hash, affordance_for=self.affordance_for,
                                         record_frames=self.spec.record_frames,
                                         record_setup_errors=self.spec.record_setup_errors)
        return self._runner

    def trajectory_planner(self) -> Planner:
        if self._planner is None:
            source = self.spec.source or TrajectorySource()
            if source.planner is None:
                from groundplan.envs.experts import expert_declaration

                name = source.expert or self.env.name
                self.expert = build_expert(name, self.env)
                self._planner = ExpertPlanner(self.expert, self.env.done_skill, expert_declaration(name))
                self.label = self.expert.name
            else:
                lm = self.lm if self.lm is not None else make_llm(source.llm or LLMSpec())
                self._planner = make_planner(source.planner, lm, self.spec.max_steps)
                self.label = source.planner.display
        return self._planner


class EpisodeWorker:
    """Owns ``spec.envs`` envs; :meth:`run` plays one job on a free one (see the module docstring)."""

    def __init__(self, spec: WorkerSpec, worker_id: int = 0) -> None:
        self.spec = spec
        self.worker_id = worker_id
        self._affordance_for = _remote_affordance(spec.affordance_server) if spec.affordance_server is not None else None
        self.slots = [_Slot(spec, self._affordance_for) for _ in range(1 if spec.envs_on_demand else max(1, spec.envs))]
        self._free: queue.SimpleQueue[_Slot] = queue.SimpleQueue()
        self._grow = threading.Lock()
        for slot in self.slots:
            self._free.put(slot)

    @contextmanager
    def borrow(self) -> Iterator[_Slot]:
        """A free env slot for the duration of the block (built now when ``envs_on_demand`` allows one more)."""
        try:
            slot = self._free.get_nowait()
        except queue.Empty:
            with self._grow:
                built = _Slot(self.spec, self._affordance_for) if len(self.slots) < max(1, self.spec.envs) else None
                if built is not None:
                    self.slots.append(built)
            slot = built if built is not None else self._free.get()
        try:
            yield slot
        finally:
            self._free.put(slot)

    def run(self, job: EpisodeSpec | CollectItem) -> EpisodeResult | dict[str, Any]:
        """An :class:`EpisodeSpec`'s result (trace and frames), or a :class:`CollectItem`'s trajectory row;
        raises :class:`InfrastructureError` when a scorer died during the episode, and (rows only) when
        the env or the planner failed in it."""
        with self.borrow() as slot:
            died = None
            t0 = time.perf_counter()
            guard = slot.lm if isinstance(slot.lm, ActorGuard) else None  # a client of scorer actors
            if guard is not None:
                guard.actor_error = None
            try:
                out = self._row(slot, job) if isinstance(job, CollectItem) else slot.runner().run(job)
                died = guard.actor_error if guard is not None else None  # read before the env goes back to the pool
            finally:
                slot.episodes += 1
                slot.busy_s += time.perf_counter() - t0
                if self.spec.affordance_server is not None and isinstance(job, EpisodeSpec):
                    self.spec.affordance_server.release.remote(job.episode_id)
        if died is not None:
            raise InfrastructureError(f"a scorer died during the episode: {died}")
        return out

    def _row(self, slot: _Slot, item: CollectItem) -> dict[str, Any]:
        planner = slot.trajectory_planner()
        row = run_trajectory(slot.env, item.task, item.seed, planner, source=slot.label, split=item.split,
                             traj_id=item.traj_id, max_steps=self.spec.max_steps,
                             max_admissible=self.spec.max_admissible, label_listed=self.spec.label_listed)
        if slot.expert is not None:  # an expert with a per-episode fallback says which one acted
            row["source"] = getattr(slot.expert, "source", slot.label)
        return row

    def metrics(self) -> dict[str, float]:
        """Episodes played and seconds spent in them, over every env."""
        return {"episodes": sum(s.episodes for s in self.slots), "busy_s": sum(s.busy_s for s in self.slots)}

    def info(self) -> dict[str, Any]:
        """Who and where this worker is, with its metrics: the first call the group waits on, and the
        liveness probe of its pool."""
        return {"worker_id": self.worker_id, "pid": os.getpid(), "node_id": _node_id(), "envs": len(self.slots),
                **self.metrics()}

    def healthy(self) -> bool:
        return True


def _remote_affordance(server: Any) -> Callable[[PlannerSpec, str], Any]:
    """``affordance_for``: a client of the affordance-server actor per planner and episode."""
    from groundplan.actors.affordance_server import RemoteAffordance
    from groundplan.grounding import AFFORDANCES

    def affordance_for(planner: PlannerSpec, episode_id: str) -> Any:
        declaration = AFFORDANCES.get(planner.affordance).declaration  # what the hosted source reads
        return RemoteAffordance(server, planner.display, episode_id, declaration)

    return affordance_for


def _node_id() -> str | None:
    """The Ray node this worker runs on; None in a process without Ray."""
    try:
        import ray

        return ray.get_runtime_context().get_node_id() if ray.is_initialized() else None
    except ImportError:
        return None
