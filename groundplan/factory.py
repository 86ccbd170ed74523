"""Specs → objects: the one place that turns config specs into an env, a language model, an
affordance source and a planner (docs/architecture.md, "Layers").

The sweep driver, the episode workers, ``groundplan plan``, ``groundplan collect``, the LLM scorer
actor, the affordance server and the Serve deployments all build their parts here, so a plugin is
constructed the same way everywhere; ``tests/test_factory_builds.py`` fails when another module
instantiates one straight from its registry.

The experts that collect trajectories are built here too (``build_expert``). ``make_env``, ``make_llm``
and ``make_affordance`` each have a ``build_*`` twin taking the plugin's name and
options, for a caller that holds those rather than a spec (an actor's constructor arguments, one split of
an env): the ``make_*`` function calls it, so both build alike. Options are validated where a spec is
loaded (``groundplan.config``), before anything is built; here only an unknown name fails, with the
registry's error listing the valid names.
"""
from __future__ import annotations

from typing import Any, Mapping

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
    return build_env(spec.name, spec.options)


def build_env(name: str, options: Mapping[str, Any] | None = None) -> Env:
    """The registered env ``name`` with ``options`` (its defaults when None): :func:`make_env` for a caller
    holding an env's name and options rather than an :class:`EnvSpec`, e.g. one split
    of a collect config's env, ``groundplan plan --env``. An unknown name raises the registry's error,
    listing the valid names."""
    return ENVS.get(name)(**dict(options or {}))


def build_expert(name: str, env: Env) -> Any:
    """The registered expert ``name`` acting on the live ``env`` (an episode worker collecting expert
    trajectories). An unknown name raises the registry's error, listing the valid names."""
    from groundplan.envs.experts import EXPERTS

    return EXPERTS.get(name)(env)


def make_llm(spec: LLMSpec) -> LanguageModel:
    """The language model of ``spec`` (loads weights: call it once per process)."""
    return build_llm(spec.backend, spec.model, spec.options)


def build_llm(backend: str, model: str | None = None, options: Mapping[str, Any] | None = None) -> LanguageModel:
    """The language model of backend ``backend`` with ``model`` and the backend's ``options``:
    :func:`make_llm` for a caller holding the parts of an :class:`LLMSpec` (the LLM scorer actor). A
    ``model`` of None leaves the backend's own default (loads weights: call it once per process)."""
    return load_llm(backend, **dict(options or {}), **({} if model is None else {"model": model}))


def make_affordance(spec: PlannerSpec) -> AffordanceSource | None:
    """The affordance source a planner spec names, or None."""
    if not spec.affordance:
        return None
    return build_affordance(spec.affordance, spec.affordance_options)


def build_affordance(name: str, options: Mapping[str, Any] | None = None) -> AffordanceSource:
    """The registered affordance source ``name`` with ``options``: :func:`make_affordance` for a caller
    holding a source's name and options rather than a :class:`PlannerSpec` (the affordance server, which
    hosts one instance per episode and source)."""
    return AFFORDANCES.get(name)(**dict(options or {}))


def make_planner(spec: PlannerSpec, lm: LanguageModel, max_steps: int, affordance: Any = None) -> Planner:
    """The planner of ``spec``; its affordance source is built from the registry unless one is given
    (the Ray runtime passes a client of its affordance-server actor)."""
    if affordance is None:
        affordance = make_affordance(spec)
    options = {"max_steps": max_steps, **spec.options}
    planner = PLANNERS.get(spec.name)(lm=lm, affordance=affordance, **options)
    planner.name = spec.display
    return planner
