"""The data-collection worker: one env (and its expert or planner) per worker, one trajectory per call.

Used in-process by the local executor and as a Ray actor (``ray.remote(CollectWorker)``) by
:func:`groundplan.pipelines.collect.collect.run_collect`. Building the env once per worker and reusing it
across episodes is what makes a pool pay off (PyBullet clients, minigrid levels, VirtualHome graphs).
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from groundplan.core.types import Task
from groundplan.factory import build_env
from groundplan.planners.base import Planner
from groundplan.rollout.trajectory import ExpertPlanner, run_trajectory

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CollectItem:
    """One trajectory to collect."""

    traj_id: str
    split: str
    task: Task
    seed: int


class CollectWorker:
    """Holds one env and the action source; :meth:`run` returns one trajectory row."""

    def __init__(self, env_name: str, env_options: dict[str, Any], source: dict[str, Any], max_steps: int,
                 fault: dict[str, str] | None = None, max_admissible: int | None = None) -> None:
        self.env = build_env(env_name, env_options)
        self.max_steps = max_steps
        self.max_admissible = max_admissible
        self.kind = source.get("kind", "expert")
        self.fault = fault
        if self.kind == "expert":
            from groundplan.envs.experts import EXPERTS, expert_declaration

            name = source.get("expert") or env_name
            self.expert = EXPERTS.get(name)(self.env)
            self.planner: Planner = ExpertPlanner(self.expert, self.env.done_skill, expert_declaration(name))
            self.label = self.expert.name
        else:
            from groundplan.config import LLMSpec, PlannerSpec
            from groundplan.factory import make_llm, make_planner

            spec = PlannerSpec.model_validate(source["planner"])
            lm = make_llm(LLMSpec.model_validate(source.get("llm") or {}))
            self.planner = make_planner(spec, lm, max_steps)
            self.label = spec.display

    def ready(self) -> str:
        return self.label

    def run(self, item: CollectItem) -> dict[str, Any]:
        """The row of ``item``'s episode; raises when the env or the planner failed in it
        (:func:`~groundplan.rollout.trajectory.run_trajectory`)."""
        self._maybe_crash(item)
        row = run_trajectory(self.env, item.task, item.seed, self.planner, source=self.label, split=item.split,
                             traj_id=item.traj_id, max_steps=self.max_steps, max_admissible=self.max_admissible)
        if self.kind == "expert":  # an expert with a per-episode fallback says which one acted
            row["source"] = getattr(self.expert, "source", self.label)
        return row

    def _maybe_crash(self, item: CollectItem) -> None:
        """Fault injection for tests: ``fault={"traj_id": id, "marker": path}`` kills this worker process
        the first time it starts that trajectory (the marker file records that it happened)."""
        if not self.fault or item.traj_id != self.fault.get("traj_id"):
            return
        marker = Path(self.fault["marker"])
        if not marker.exists():
            marker.write_text("crashed")
            log.warning("fault injection: worker %d exits on %s", os.getpid(), item.traj_id)
            os._exit(1)
