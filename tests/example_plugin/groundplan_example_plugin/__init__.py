"""An example groundplan plugin, installed as its own package: one env (``pantry``), one planner
(``example_greedy``), one affordance source (``pantry_preconditions``) and one LLM backend
(``example_scripted``), with one measure (``pantry_moves``).

groundplan finds :func:`register` through the ``groundplan.plugins`` entry point in ``pyproject.toml``
and calls it once, at the first lookup of any of its registries (in the driver, in every Ray worker and in
a Serve replica alike). Nothing here is special to being a plugin: each part subclasses groundplan's base
class and registers a typed options class, exactly as the built-ins do.
"""
from __future__ import annotations

__all__ = ["register"]


def register() -> None:
    """Register the plugin's parts into groundplan's registries.

    Lazily, as ``"module:attribute"`` strings: ``groundplan list`` then imports nothing of the plugin but
    its options classes (``--options``), and a sweep imports each module only in the processes that build
    that part. The registries are imported here, not at module level, so that importing this package alone
    (as the entry point's loader does) costs nothing until groundplan asks."""
    from groundplan.core.measures import register_measure
    from groundplan.envs import ENVS
    from groundplan.grounding import AFFORDANCES
    from groundplan.llm import LLM_BACKENDS
    from groundplan.planners import PLANNERS

    here = __name__
    ENVS.register_lazy("pantry", f"{here}.env:PantryEnv", config=f"{here}.env:PantryConfig")
    PLANNERS.register_lazy("example_greedy", f"{here}.planner:make_greedy", config=f"{here}.planner:GreedyConfig")
    AFFORDANCES.register_lazy("pantry_preconditions", f"{here}.affordance:PantryPreconditions",
                              config=f"{here}.affordance:PantryPreconditionsConfig")
    LLM_BACKENDS.register_lazy("example_scripted", f"{here}.backend:ScriptedLM", config=f"{here}.backend:ScriptedOptions")
    # the env declares this measure in its capabilities; tables and ``select_by`` look it up by name
    register_measure("pantry_moves", "moves between the pantry's places (go to steps that succeeded)",
                     higher_is_better=False)
