"""The perception actor: detectors and success detectors (DESIGN.md, "Runtime").

For simulators that expose their state (the kitchen) perception is a pass-through: ``detect`` returns
the observation's structured state and ``success`` the simulator's own step outcome. Real detectors
register a ``detector`` callable (observation -> state) and a ``success_detector`` callable
(observation, skill, step_result -> bool) and are hosted the same way.
"""
from __future__ import annotations

from typing import Any, Callable

from groundplan.core.types import Observation, StepResult

Detector = Callable[[Observation], Any]
SuccessDetector = Callable[[Observation, str, StepResult], bool]


class Perception:
    def __init__(self, detector: Detector | None = None, success_detector: SuccessDetector | None = None) -> None:
        self.detector = detector
        self.success_detector = success_detector
        self.calls = 0

    def detect(self, observation: Observation) -> Any:
        self.calls += 1
        return observation.state if self.detector is None else self.detector(observation)

    def detect_batch(self, observations: list[Observation]) -> list[Any]:
        return [self.detect(o) for o in observations]

    def success(self, observation: Observation, skill: str, result: StepResult) -> bool:
        self.calls += 1
        if self.success_detector is None:
            return bool(result.success)
        return bool(self.success_detector(observation, skill, result))


def make_perception_actor(*, num_gpus: float = 0, num_cpus: float = 0.5, max_restarts: int = -1, **kwargs: Any):
    import ray

    return ray.remote(Perception).options(num_gpus=num_gpus, num_cpus=num_cpus, max_restarts=max_restarts,
                                          max_task_retries=-1).remote(**kwargs)
