"""Specs → objects: the one place that turns config specs into an env, a language model, an
affordance source and a planner (docs/architecture.md, "Factory").

The sweep driver, the episode-runner actors, ``groundplan plan`` and the Serve deployments all build
their parts here, so a plugin is constructed the same way everywhere.
"""
from __future__ import annotations

from typing import Any

from groundplan.config import EnvSpec, LLMSpec, PlannerSpec
from groundplan.envs import ENVS
from groundplan.envs.base import Env
from groundplan.grounding import AFFORDANCES
from groundplan.grounding.base import AffordanceSource
from groundplan.llm import LanguageModel, load_llm
from groundplan.planners import PLANNERS
from groundplan.planners.base import Planner


def make_env(spec: EnvSpec) -> Env:
    """The registered env of ``spec`` with its options."""
    return ENVS.get(spec.name)(**spec.options)


def make_llm(spec: LLMSpec) -> LanguageModel:
    """The language model of ``spec`` (loads weights: call it once per process)."""
    return load_llm(spec.backend, model=spec.model, **spec.options)


def make_affordance(spec: PlannerSpec) -> AffordanceSource | None:
    """The affordance source a planner spec names, or None."""
    if not spec.affordance:
        return None
    return AFFORDANCES.get(spec.affordance)(**spec.affordance_options)


def make_planner(spec: PlannerSpec, lm: LanguageModel, max_steps: int, affordance: Any = None) -> Planner:
    """The planner of ``spec``; its affordance source is built from the registry unless one is given
    (the Ray runtime passes a client of its affordance-server actor)."""
    if affordance is None:
        affordance = make_affordance(spec)
    options = {"max_steps": max_steps, **spec.options}
    planner = PLANNERS.get(spec.name)(lm=lm, affordance=affordance, **options)
    planner.name = spec.display
    return planner
