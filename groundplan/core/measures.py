"""Episode measures, registered by name (habitat-lab's measure registry, for planners).

A measure is a per-episode number computed from a trace: the two success notions every env has
(``execution_success``, ``plan_success``) plus whatever an env declares in
:attr:`groundplan.envs.base.EnvCapabilities.measures` and returns from ``Env.episode_metrics``. Tables,
``select_by`` and MLflow use these names, so a misspelled name is caught when a config is loaded,
with the valid names in the message.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from groundplan.core.registry import Registry
from groundplan.core.stats import mean_interval, wilson_interval


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


#: declared as groundplan's modules import (register_measure checks the name), so a lookup here must not load
#: the plugins, whose ``register`` imports those modules; a plugin declares its measures from its ``register``
MEASURES: Registry[Measure] = Registry("measure", plugins=False)


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


# ------------------------------------------------------------------------------------ navigation: SR and SPL
def spl(success: bool, shortest_m: float, path_m: float) -> float:
    """One episode's SPL, success weighted by (normalised inverse) path length (Anderson et al. 2018, "On
    Evaluation of Embodied Navigation Agents", arXiv:1807.06757; SayNav Sec. 4.2): S · L* / max(L, L*),
    with S the 0/1 success, L* the shortest path's length and L the length the agent walked. A success
    along the shortest path scores 1, a detour scores less, a failure 0, so SPL ranks agents that succeed
    equally often by how directly they did. The one definition of it: the house env's MultiON episodes
    (L* over every target order) and the point-goal trainer's episodes (L* to the goal radius) both call
    it. An infinite L* (no path to the goal) scores 0; the 1e-9 floor keeps L = L* = 0 defined."""
    if not success or not math.isfinite(shortest_m):
        return 0.0
    return float(shortest_m / max(path_m, shortest_m, 1e-9))


@dataclass(frozen=True)
class NavigationRates:
    """SR and SPL over n episodes, each with its 95% interval (:func:`navigation_rates`)."""

    n: int
    sr: float
    sr_ci: tuple[float, float]
    spl: float
    spl_ci: tuple[float, float]


def navigation_rates(successes: Sequence[float], spls: Sequence[float]) -> NavigationRates:
    """SR and SPL over episodes (SayNav Sec. 4.2; Anderson et al. 2018 average SPL over the test episodes),
    from each episode's 0/1 success and its :func:`spl`. SR is a proportion, so its interval is the 95%
    Wilson score interval (sound at a few episodes and never outside [0, 1]); SPL is a mean of values in
    [0, 1] that are not 0/1, so its interval is the normal one, mean ± 1.96 SE. SayNav's MultiON table and
    the point-goal trainer's reports both aggregate through here."""
    n = len(successes)
    hits = sum(float(s) for s in successes)
    lo, hi = wilson_interval(int(hits), n)
    mean, spl_lo, spl_hi = mean_interval([float(v) for v in spls])
    return NavigationRates(n=n, sr=hits / n, sr_ci=(lo, hi), spl=mean, spl_ci=(spl_lo, spl_hi))
