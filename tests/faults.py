"""Fault injection for the runtime's tests, kept out of the package: an env plugin whose process dies.

``babyai_crash_once`` is the BabyAI env with three more options: the process that resets task
``crash_task`` with seed ``crash_seed`` exits at once (``os._exit``: no cleanup, no exception, as a
killed worker process ends), the first time only, which the file ``marker`` records. Collected on Ray
workers, that is a worker dying in the middle of one chosen trajectory, exactly once. Never use it with
``runtime.executor: local``: the process that exits would be the test's.

The ``ray_crash_once`` fixture (``tests/conftest.py``) calls :func:`register` in the test's process (the
config names the env, and the driver lists its tasks) and has Ray call it in every worker process it
starts (``worker_process_setup_hook``), so an episode worker builds the env from its name like any other.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import Field

from groundplan.core.types import Observation, Task
from groundplan.envs import ENVS
from groundplan.envs.babyai.env import BabyAIEnv
from groundplan.envs.babyai.options import BabyAIConfig

NAME = "babyai_crash_once"


class CrashOnceOptions(BabyAIConfig):
    """The BabyAI env's options and where its process dies."""

    crash_task: str = Field(..., description="task id whose reset ends the process")
    crash_seed: int = Field(0, description="the episode seed of that reset")
    marker: str = Field(..., description="file written just before the process exits; while it exists, no reset exits")


def register() -> None:
    """Register ``babyai_crash_once`` (once per process)."""
    if NAME not in ENVS.names():
        ENVS.register_lazy(NAME, "tests.faults:CrashOnceBabyAI", config="tests.faults:CrashOnceOptions")


class CrashOnceBabyAI(BabyAIEnv):
    """A BabyAI env whose ``reset`` of the chosen task ends the process the first time."""

    def __init__(self, **options: Any) -> None:
        self.fault = CrashOnceOptions.model_validate(options)
        super().__init__(**{k: v for k, v in options.items() if k in BabyAIConfig.model_fields})

    def reset(self, task: Task, seed: int) -> Observation:
        marker = Path(self.fault.marker)
        if task.task_id == self.fault.crash_task and seed == self.fault.crash_seed and not marker.exists():
            marker.write_text(f"process {os.getpid()} exited on {task.task_id} seed {seed}")
            os._exit(1)
        return super().reset(task, seed)
