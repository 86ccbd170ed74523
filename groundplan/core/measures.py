"""Episode measures, registered by name (habitat-lab's measure registry, for planners).

A measure is a per-episode number computed from a trace: the two success notions every env has
(``execution_success``, ``plan_success``) plus whatever an env declares in
:attr:`groundplan.envs.base.EnvCapabilities.measures` and returns from ``Env.episode_metrics``. Tables,
``select_by`` and MLflow use these names, so a misspelled name is caught when a config is loaded,
with the valid names in the message.
"""
from __future__ import annotations

from dataclasses import dataclass

from groundplan.core.registry import Registry


@dataclass(frozen=True)
class Measure:
    """What a measure means, for tables and ``groundplan list --options``."""

    name: str
    description: str
    higher_is_better: bool = True
    #: 0/1 per episode: tables give it as a rate with a 95% Wilson interval
    proportion: bool = False
    #: defined for some episodes only (Kendall tau: successful ones); averaged over the episodes that have it
    partial: bool = False


MEASURES: Registry[Measure] = Registry("measure")


def register_measure(name: str, description: str, higher_is_better: bool = True, *, proportion: bool = False,
                     partial: bool = False) -> Measure:
    """Declare a measure (idempotent for the same declaration)."""
    measure = Measure(name, description, higher_is_better, proportion, partial)
    if name in MEASURES and MEASURES.get(name) == measure:
        return measure
    return MEASURES.register(name)(measure)


#: measures every episode has, whatever the env (computed by the rollout from the goal check)
register_measure("execution_success", "the goal holds in the final executed state (SayCan Sec. 5.1)", proportion=True)
register_measure("plan_success", "the goal holds when the chosen skills are replayed noise-free (SayCan Sec. 5.1); "
                 "only for envs that can replay plans", proportion=True)
register_measure("mean_steps", "decisions per episode, the done decision included", higher_is_better=False)
#: VirtualHome (Zero-Shot Planners, Sec. 2.2 and 5.5)
register_measure("executability", "a non-empty plan whose every step the simulator executed", proportion=True)
register_measure("step_success", "fraction of a plan's steps the simulator executed (not in the paper)")
register_measure("goal_success", "the task's goal holds in the simulator's final graph", proportion=True)
register_measure("lcs", "longest common subsequence with the nearest human program, normalised by the longer")
register_measure("length", "plan length in steps", higher_is_better=False)
#: SayCanPay (Hazra et al., Table 4), computed from the expert's plan length by its tables
register_measure("cost_effective", "success with a plan no longer than the expert's, done not counted "
                 "(SayCanPay Sec. 7.3, Table 4)", proportion=True)
#: tabletop (Inner Monologue's sim): counts from the physics
register_measure("picks", "pick-and-place attempts", higher_is_better=False)
register_measure("grasp_failures", "picks whose grasp failed", higher_is_better=False)
register_measure("disturbances", "placed blocks knocked off by the disturbance", higher_is_better=False)
register_measure("detected_successes", "pick-and-places the success detector judged successful")
register_measure("sim_steps", "PyBullet simulation steps", higher_is_better=False)


def measure_info(name: str) -> Measure | None:
    """The registered measure of that name, or None (an env-specific name whose env is not imported)."""
    return MEASURES.get(name) if name in MEASURES else None
