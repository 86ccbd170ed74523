"""Planner grids chosen on other tasks than the ones they are measured on.

Zero-Shot Planners (Sec. 3.5, A.1) search each method's hyperparameters and report it at its best variant;
chosen on the very tasks a table reports, that is a selection on test. With ``select_on`` (env options of the
tasks to choose on, e.g. VirtualHome's ``split: validation``) a sweep runs every variant there first, in a run
folder of its own (``<name>-selection``), keeps each grid's best variant by ``select_by`` (a tie by
``select_tie_break``), and runs only those
on its own tasks; ``grid_selection.json`` of the final run says where they were chosen.
"""
from __future__ import annotations

import json
from typing import Any, Callable

from groundplan.config import EvalConfig
from groundplan.core.errors import InvalidInputError
from groundplan.core.paths import atomic_write_text
from groundplan.evaluation.summary import SummaryRow


def selection_rule(cfg: EvalConfig) -> dict[str, Any]:
    """How a grid's variant is chosen, as ``grid_selection.json`` records it (the tie-break only where set)."""
    return {"select_by": cfg.select_by, **({"select_tie_break": cfg.select_tie_break} if cfg.select_tie_break else {})}


def needs_selection(cfg: EvalConfig) -> bool:
    """Whether ``cfg`` chooses among grid variants on other tasks first (a grid with one variant left, as
    after the choice, has nothing to choose)."""
    return cfg.select_on is not None and any(len(v) > 1 for v in cfg.grids.values())


def selection_config(cfg: EvalConfig) -> EvalConfig:
    """The sweep every variant runs in: the same config's grid variants (planners outside a grid have nothing to
    choose) on the ``select_on`` tasks, in its own run folder."""
    env = cfg.env.model_copy(update={"options": {**cfg.env.options, **(cfg.select_on or {})}})
    return cfg.model_copy(update={"name": f"{cfg.name}-selection", "env": env, "select_on": None,
                                  "planners": [p for p in cfg.planners if p.group is not None]})


def chosen_config(cfg: EvalConfig, best: dict[str, SummaryRow]) -> EvalConfig:
    """``cfg`` with each grid reduced to its chosen variant (planners outside a grid kept)."""
    if missing := sorted(set(cfg.grids) - set(best)):
        raise InvalidInputError(f"no variant of grid(s) {', '.join(missing)} ran on the selection tasks "
                                f"{cfg.select_on}: nothing to choose from")
    chosen = {row.planner for row in best.values()}
    return cfg.model_copy(update={"planners": [p for p in cfg.planners if p.group is None or p.display in chosen]})


def run_selected(cfg: EvalConfig, run: Callable[[EvalConfig, bool], Any]) -> Any:
    """``run`` (a sweep, returning its ``EvalResult``; its second argument says whether it is the selection
    sweep) on the selection tasks, then on ``cfg``'s own tasks with the chosen variants; returns the final
    sweep's result, whose ``grid_selection.json`` names the selection run and what it chose."""
    selected = run(selection_config(cfg), True)
    best = selected.best
    final = run(chosen_config(cfg, best), False)
    record = {**selection_rule(cfg), "selected_on": cfg.select_on,
              "selection_run": str(selected.run_dir),
              "best": {g: r.planner for g, r in best.items()}}
    atomic_write_text(final.run_dir / "grid_selection.json", json.dumps(record, indent=2))
    return final
