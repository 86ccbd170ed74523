"""Facts about VirtualHome's scene derived once from the installed dataset and cached on disk: its object
classes and their properties, every class a step may name, the admissible action space built from them
(Appendix A.4's templates, SayCan-style action bank), and the programs whose goal holds at the start.
The env, its goal language and the grounding read them; none of them needs the env itself."""
from __future__ import annotations

import collections
import functools
import json
import logging
from pathlib import Path
from typing import Any, Callable

from groundplan.envs.virtualhome import dataset
from groundplan.envs.virtualhome import simulator as sim
from groundplan.envs.virtualhome.actions import STRUCTURAL_CATEGORIES, ActionSpace

logger = logging.getLogger(__name__)


def _scene_cache_path(kind: str) -> Any:
    """A file of facts derived from the installed dataset, keyed by the package version."""
    from importlib.metadata import version

    from groundplan.core.paths import cache_dir

    return cache_dir() / "virtualhome" / f"{kind}-scene{dataset.SCENE}-{version('virtualhome_eval')}.json"


#: the same facts for the dataset versions they were derived from, shipped with the package so that a new
#: machine does not spend ~25 s of simulator runs on them (``python -m groundplan.envs.virtualhome.scene``
#: writes them for the installed version; a slow test checks they equal a fresh derivation)
SHIPPED = Path(__file__).resolve().parent / "derived"


def _cached_json(kind: str, build: Callable[[], Any]) -> Any:
    """``build()``'s result for the installed dataset: shipped with the package, or computed once and kept
    on disk (written atomically)."""
    path = _scene_cache_path(kind)
    for candidate in (SHIPPED / path.name, path):
        try:
            return json.loads(candidate.read_text())
        except (OSError, ValueError):
            pass
    out = build()
    try:
        from groundplan.core.paths import atomic_write_text

        atomic_write_text(path, json.dumps(out))
    except OSError as exc:
        logger.warning("could not cache the VirtualHome %s: %s", kind, exc)
    return out


def _objects_from_dataset() -> dict[str, list[str]]:
    objects: dict[str, set[str]] = collections.defaultdict(set)
    for program in dataset.load_programs():
        for node in dataset.load_init_graph(program.program_id)["nodes"]:
            if node["category"] not in STRUCTURAL_CATEGORIES:
                objects[node["class_name"]].update(node["properties"])
    return {k: sorted(v) for k, v in sorted(objects.items())}


def _classes_from_dataset() -> list[str]:
    classes: set[str] = set()
    for program in dataset.load_programs():
        classes.update(node["class_name"] for node in dataset.load_init_graph(program.program_id)["nodes"])
    return sorted(classes)


def _goals_met_from_simulator(goal_match: str) -> list[str]:
    met = []
    for program in dataset.load_programs():
        planner = sim.construct(program.program_id)
        planner.reset()
        if sim.check_goals(planner.env_state, program.goal, [], goal_match).success:
            met.append(program.program_id)
    return met


@functools.lru_cache(maxsize=1)
def scene_objects() -> dict[str, list[str]]:
    """Object class → properties, over the initial graphs of every program of the scene (the scene's
    furniture plus the objects programs add). Built once (~4 s) and cached on disk."""
    return _cached_json("objects", _objects_from_dataset)


@functools.lru_cache(maxsize=1)
def scene_classes() -> list[str]:
    """Every object class of the scene's initial graphs, the character, rooms, walls and floors
    included: what a step may name for the simulator to judge. Built once and cached on disk."""
    return _cached_json("classes", _classes_from_dataset)


@functools.lru_cache(maxsize=2)
def goals_met_at_start(goal_match: str = "class") -> frozenset[str]:
    """Ids of the programs whose goal already holds in their initial graph, with no action executed.
    37 of the 342 programs are (e.g. a "Turn on light" whose light is already on). Computed once
    through the simulator (~35 s) and cached on disk."""
    return frozenset(_cached_json(f"goals-met-at-start-{goal_match}",
                                  functools.partial(_goals_met_from_simulator, goal_match)))


@functools.lru_cache(maxsize=1)
def scene_action_space() -> ActionSpace:
    """The admissible steps of the scene (one set for every task, as the paper's action bank): the
    property-based combinations plus every step of the dataset's human programs as labels, and every
    class of the scene (:func:`scene_classes`) for steps the simulator is asked to judge."""
    extra = [ActionSpace.script_step(line) for p in dataset.load_programs() for line in p.class_script]
    return ActionSpace(scene_objects(), extra, executable_objects=scene_classes())


def derive_all() -> dict[str, Any]:
    """Every fact above derived afresh from the installed dataset (neither the shipped files nor the disk
    cache read), by the file name :func:`_cached_json` keeps it under."""
    facts = {"objects": _objects_from_dataset(), "classes": _classes_from_dataset(),
             **{f"goals-met-at-start-{m}": _goals_met_from_simulator(m) for m in ("class", "id")}}
    return {_scene_cache_path(kind).name: value for kind, value in facts.items()}


if __name__ == "__main__":
    for name, value in derive_all().items():
        (SHIPPED / name).write_text(json.dumps(value))
        logger.warning("wrote %s", SHIPPED / name)
