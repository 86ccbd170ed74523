"""Generated kitchen tasks: training instructions disjoint from the 84 evaluation instructions.

SayCan's kitchen has one task set, the 84 instructions of :mod:`groundplan.envs.kitchen.tasks`, and a Say model
fine-tuned for it must learn from other tasks, or it is trained on its test set (SayCan Sec. 5.2: the
instructions are the evaluation). These tasks are templated from the same 15 objects and 5 locations (fetch one
or two objects, move one to a surface, throw one away, pick one up where it lies), each in a few phrasings, with
the goal predicates and reference plans of the 84 (Listing 1's delivery pattern). A generated task is dropped
when a model could meet it again among the 84:

* its instruction, normalised as splits normalise it (:func:`groundplan.envs.splits.instruction_key`), is one of
  the 84's;
* or its goal and start pins are those of one of the 84 (the same task in other words).

So the 84 stay a test set by what the model reads before acting, and by what it must achieve. Objects, skills and
plan shapes are shared: that is what fine-tuning is meant to teach. (A prompt's example queries are checked
against the test tasks by the evaluation's lineage check, as for every env.)
"""
from __future__ import annotations

import random
from functools import lru_cache
from itertools import combinations
from typing import Any, Sequence

from groundplan.core.types import Task
from groundplan.envs.kitchen.skills import DONE_LABEL, find_label, pick_label
from groundplan.envs.kitchen.tasks import (
    TASKS,
    at,
    delivered,
    fetch,
    holding,
    move,
    of_families,
    throw,
    thrown,
    validate_goal,
)
from groundplan.envs.kitchen.world import LOCATION_BY_NAME, OBJECT_NAMES, SURFACES
from groundplan.envs.splits import instruction_key

#: the generated families, one per template (task ids ``kitchen/<family>/<NNN>``)
GENERATED_FAMILIES: tuple[str, ...] = ("gen_fetch", "gen_fetch_two", "gen_move", "gen_throw", "gen_pick")
_SEED = 0
_PAIRS = 40


def _fetch_phrasings(obj: str) -> list[str]:
    return [f"How would you get me the {obj}?", f"How would you hand me the {obj}?",
            f"How would you fetch the {obj} for me?"]


def _move_phrasings(obj: str, loc: str) -> list[str]:
    phrase = LOCATION_BY_NAME[loc].phrase
    return [f"How would you place the {obj} {phrase}?", f"How would you take the {obj} over to the {loc}?"]


def _throw_phrasings(obj: str) -> list[str]:
    return [f"How would you get rid of the {obj}?", f"How would you dispose of the {obj}?"]


def _specs(rng: random.Random) -> list[tuple[str, str, tuple, tuple[str, ...], dict[str, Any]]]:
    """(family, instruction, goal, plan without done, start pins), in a fixed order."""
    out: list[tuple[str, str, tuple, tuple[str, ...], dict[str, Any]]] = []
    for obj in OBJECT_NAMES:
        for text in _fetch_phrasings(obj):
            out.append(("gen_fetch", text, ((delivered(obj),),), tuple(fetch(obj)), {}))
    pairs = sorted(combinations(OBJECT_NAMES, 2))
    for a, b in rng.sample(pairs, _PAIRS):
        out.append(("gen_fetch_two", f"How would you bring me the {a} and the {b}?",
                    ((delivered(a),), (delivered(b),)), tuple(fetch(a) + fetch(b)), {}))
    for obj in OBJECT_NAMES:
        for loc in SURFACES:
            start = {"placement": {obj: rng.choice([s for s in SURFACES if s != loc])}}
            for text in _move_phrasings(obj, loc):
                out.append(("gen_move", text, ((at(obj, loc),),), tuple(move(obj, loc)), start))
        for text in _throw_phrasings(obj):
            out.append(("gen_throw", text, ((thrown(obj),),), tuple(throw(obj)), {}))
        where = rng.choice(list(SURFACES))
        out.append(("gen_pick", f"How would you go and pick up the {obj} from the {where}?", ((holding(obj),),),
                    (find_label(obj), pick_label(obj)), {"placement": {obj: where}}))
    return out


def _key(goal: tuple, start: dict[str, Any] | None) -> tuple:
    """What a task asks for, whatever its words: its goal clauses and start pins, order-free."""
    pins = start or {}
    return (tuple(sorted(tuple(sorted(c)) for c in goal)), pins.get("robot"), pins.get("holding"),
            tuple(sorted((pins.get("placement") or {}).items())))


def build_generated_tasks(evaluation: Sequence[Task] = TASKS) -> tuple[list[Task], dict[str, int]]:
    """The generated tasks, less those a model could meet among ``evaluation`` (module doc), and how many
    each rule dropped (``instruction``, ``goal``)."""
    held_out_text = {instruction_key(t.instruction) for t in evaluation}
    held_out_goal = {_key(t.goal, t.start_state) for t in evaluation}
    tasks: list[Task] = []
    dropped = {"instruction": 0, "goal": 0}
    counters = {f: 0 for f in GENERATED_FAMILIES}
    for family, text, goal, plan, start in _specs(random.Random(_SEED)):
        if instruction_key(text) in held_out_text:
            dropped["instruction"] += 1
            continue
        if _key(goal, start) in held_out_goal:
            dropped["goal"] += 1
            continue
        validate_goal(goal)
        tasks.append(Task(task_id=f"kitchen/{family}/{counters[family]:03d}", instruction=text, family=family,
                          goal=goal, start_state=start or None, reference_plan=plan + (DONE_LABEL,),
                          metadata={"generated": True}))
        counters[family] += 1
    return tasks, dropped


@lru_cache(maxsize=1)
def _generated() -> tuple[Task, ...]:
    return tuple(build_generated_tasks()[0])


def generated_tasks(families: Sequence[str] | str | None = None) -> list[Task]:
    """The generated tasks of the given families (all when None); an unknown family raises
    :class:`InvalidInputError`."""
    return of_families(_generated(), families, GENERATED_FAMILIES, "generated kitchen task")
