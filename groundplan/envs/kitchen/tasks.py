"""The kitchen task set and its goal predicates (SayCan Sec. 5.2, Table 1).

The paper's 101 evaluation instructions (App. D.1) are not available, so these 84 are this
project's own, written in the spirit of Table 1's examples (the paper's own examples are included and
marked ``metadata["paper_example"] = True``), 12 per family:

``nl_single_primitive``, ``nl_nouns``, ``nl_verbs``, ``structured`` (mirrors ``nl_verbs`` one to
one), ``embodiment`` (the same instruction from different start states), ``crowd_sourced`` (informal,
with typos) and ``long_horizon``.

Goals are data: a tuple of *clauses*, all of which must hold; a clause is a tuple of *predicates*,
any of which may hold ("bring me a soda" accepts any soda). Predicates:

* ``("at", obj, loc)`` — obj placed at loc (loc may be "trash can" or "user");
* ``("delivered", obj)`` — obj put down at the user; ``("thrown_away", obj)`` — in the trash can;
* ``("holding", obj)`` — obj in the gripper; ``("gripper_empty",)``;
* ``("near", obj)`` — the robot is where obj is; ``("robot_at", loc)``;
* ``("count_at", category, loc, n)`` — at least n distinct objects of the category at loc.

Tasks whose instruction names where an object starts, or whose goal would otherwise hold by chance
at reset, pin that object in ``start_state`` (keys ``robot``, ``holding``, ``placement``).

SayCanPay's splits (Sec. 6: Can/Pay learn from train trajectories, plans are judged on test tasks):
in each family, tasks 00-07 are ``train`` (Can/Pay data and prompt examples) and 08-11 are ``test``
(:func:`kitchen_split`); SayCan's own evaluation uses all 84.
"""
from __future__ import annotations

from typing import Any, Iterable, Sequence, Union

from groundplan.core.errors import InvalidInputError, UnknownNameError
from groundplan.core.types import GoalResult, Task
from groundplan.envs.kitchen.skills import (
    BRING_LABEL,
    DONE_LABEL,
    find_label,
    go_to_label,
    pick_label,
    place_label,
)
from groundplan.envs.kitchen.world import (
    CATEGORIES,
    GRIPPER,
    LOCATION_BY_NAME,
    OBJECT_BY_NAME,
    TRASH,
    USER,
    KitchenState,
)
from groundplan.envs.splits import check_split

Predicate = tuple[Any, ...]
Clause = tuple[Predicate, ...]
Goal = tuple[Clause, ...]

FAMILIES: tuple[str, ...] = (
    "nl_single_primitive",
    "nl_nouns",
    "nl_verbs",
    "structured",
    "embodiment",
    "crowd_sourced",
    "long_horizon",
)
#: SayCanPay's kitchen splits (module doc)
SPLITS: tuple[str, ...] = ("train", "test")
#: tasks with an index below this in their family are train, the rest test
TRAIN_PER_FAMILY = 8
PREDICATES: tuple[str, ...] = ("at", "delivered", "thrown_away", "holding", "gripper_empty", "near", "robot_at", "count_at")


# ----------------------------------------------------------------------------------------- goals
def predicate_holds(pred: Predicate, state: KitchenState) -> bool:
    """Whether one predicate holds in ``state``."""
    kind = pred[0]
    if kind == "at":
        return state.placement[pred[1]] == pred[2]
    if kind == "delivered":
        return state.placement[pred[1]] == USER
    if kind == "thrown_away":
        return state.placement[pred[1]] == TRASH
    if kind == "holding":
        return state.placement[pred[1]] == GRIPPER
    if kind == "gripper_empty":
        return state.holding is None
    if kind == "near":
        return state.location_of(pred[1]) == state.robot
    if kind == "robot_at":
        return state.robot == pred[1]
    if kind == "count_at":
        _, cat, loc, n = pred
        return sum(1 for o in CATEGORIES[cat] if state.placement[o] == loc) >= n
    raise InvalidInputError(f"unknown goal predicate {kind!r}; valid: {', '.join(PREDICATES)}")


def describe_predicate(pred: Predicate) -> str:
    """Human-readable text for a predicate ("coke can delivered to the user")."""
    kind = pred[0]
    if kind == "at":
        return f"{pred[1]} {LOCATION_BY_NAME[pred[2]].phrase}"
    if kind == "delivered":
        return f"{pred[1]} delivered to the user"
    if kind == "thrown_away":
        return f"{pred[1]} thrown away"
    if kind == "holding":
        return f"robot holding the {pred[1]}"
    if kind == "gripper_empty":
        return "gripper empty"
    if kind == "near":
        return f"robot at the {pred[1]}"
    if kind == "robot_at":
        return f"robot at the {pred[1]}"
    if kind == "count_at":
        _, cat, loc, n = pred
        return f"at least {n} {cat} item(s) {LOCATION_BY_NAME[loc].phrase}"
    return repr(pred)


def describe_clause(clause: Clause) -> str:
    texts = [describe_predicate(p) for p in clause]
    return texts[0] if len(texts) == 1 else "any of: " + " | ".join(texts)


def evaluate_goal(goal: Goal, state: KitchenState) -> GoalResult:
    """Check every clause of ``goal`` on ``state``; the result lists satisfied and unsatisfied ones."""
    satisfied: list[str] = []
    unsatisfied: list[str] = []
    for clause in goal:
        ok = any(predicate_holds(p, state) for p in clause)
        (satisfied if ok else unsatisfied).append(describe_clause(clause))
    return GoalResult(success=not unsatisfied, satisfied=satisfied, unsatisfied=unsatisfied)


def validate_goal(goal: Goal) -> None:
    """Raise :class:`InvalidInputError` if a goal names an unknown predicate, object, place or category."""
    if not goal:
        raise InvalidInputError("a kitchen goal needs at least one clause")
    arity = {"at": 3, "delivered": 2, "thrown_away": 2, "holding": 2, "gripper_empty": 1, "near": 2,
             "robot_at": 2, "count_at": 4}
    for clause in goal:
        if not clause:
            raise InvalidInputError("a goal clause needs at least one predicate")
        for pred in clause:
            kind = pred[0] if pred else None
            if kind not in arity or len(pred) != arity[kind]:
                raise InvalidInputError(f"bad goal predicate {pred!r}; valid kinds: {', '.join(PREDICATES)}")
            if kind in ("at", "delivered", "thrown_away", "holding", "near") and pred[1] not in OBJECT_BY_NAME:
                raise InvalidInputError(f"goal predicate {pred!r} names an unknown object {pred[1]!r}")
            if kind == "at" and pred[2] not in LOCATION_BY_NAME:
                raise InvalidInputError(f"goal predicate {pred!r} names an unknown location {pred[2]!r}")
            if kind == "robot_at" and pred[1] not in LOCATION_BY_NAME:
                raise InvalidInputError(f"goal predicate {pred!r} names an unknown location {pred[1]!r}")
            if kind == "count_at" and (pred[1] not in CATEGORIES or pred[2] not in LOCATION_BY_NAME or pred[3] < 1):
                raise InvalidInputError(f"bad count_at predicate {pred!r}; categories: {', '.join(CATEGORIES)}")


# ------------------------------------------------------------------------------- task helpers
PredOrClause = Union[Predicate, Clause]


def _goal(*items: PredOrClause) -> Goal:
    """Each item is a predicate (a one-predicate clause) or a tuple of predicates (any of)."""
    return tuple(item if isinstance(item[0], tuple) else (item,) for item in items)  # type: ignore[misc]


def _any(*preds: Predicate) -> Clause:
    return tuple(preds)


def at(obj: str, loc: str) -> Predicate:
    return ("at", obj, loc)


def delivered(obj: str) -> Predicate:
    return ("delivered", obj)


def thrown(obj: str) -> Predicate:
    return ("thrown_away", obj)


def holding(obj: str) -> Predicate:
    return ("holding", obj)


def near(obj: str) -> Predicate:
    return ("near", obj)


def robot_at(loc: str) -> Predicate:
    return ("robot_at", loc)


def count_at(category: str, loc: str, n: int = 1) -> Predicate:
    return ("count_at", category, loc, n)


def fetch(obj: str) -> list[str]:
    """Listing 1's delivery pattern: find, pick up, bring it to you, put down."""
    return [find_label(obj), pick_label(obj), BRING_LABEL, place_label(obj)]


def move(obj: str, loc: str) -> list[str]:
    """Find, pick up, go to ``loc``, put down (``loc`` = "trash can" throws it away)."""
    return [find_label(obj), pick_label(obj), go_to_label(loc), place_label(obj)]


def throw(obj: str) -> list[str]:
    return move(obj, TRASH)


def _plan(*parts: Iterable[str] | str) -> tuple[str, ...]:
    steps: list[str] = []
    for part in parts:
        steps.extend([part] if isinstance(part, str) else part)
    return tuple(steps) + (DONE_LABEL,)


def _start(robot: str | None = None, hold: str | None = None, **placement: str) -> dict[str, Any]:
    """start_state; placement keys use underscores for spaces (``coke_can="table"``)."""
    out: dict[str, Any] = {}
    if robot is not None:
        out["robot"] = robot
    if hold is not None:
        out["holding"] = hold
    if placement:
        out["placement"] = {k.replace("_", " "): v for k, v in placement.items()}
    return out


Spec = tuple[str, Goal, tuple[str, ...], dict[str, Any], dict[str, Any]]


def _spec(instruction: str, goal: Goal, plan: tuple[str, ...], start: dict[str, Any] | None = None,
          **meta: Any) -> Spec:
    return (instruction, goal, plan, start or {}, meta)


# ---------------------------------------------------------------------------------- the tasks
def _single_primitive() -> list[Spec]:
    return [
        _spec("How would you let go of the coke can?", _goal(at("coke can", "table")),
              _plan(place_label("coke can")), _start("table", hold="coke can"), paper_example=True),
        _spec("How would you grab the apple?", _goal(holding("apple")), _plan(pick_label("apple")),
              _start("close counter", apple="close counter")),
        _spec("How would you hold the sponge?", _goal(holding("sponge")), _plan(pick_label("sponge")),
              _start("far counter", sponge="far counter")),
        _spec("How would you head over to the trash can?", _goal(robot_at(TRASH)), _plan(go_to_label(TRASH)),
              _start(USER)),
        _spec("How would you drop the energy bar?", _goal(at("energy bar", "close counter")),
              _plan(place_label("energy bar")), _start("close counter", hold="energy bar")),
        _spec("How would you walk over to the table?", _goal(robot_at("table")), _plan(go_to_label("table")),
              _start(USER)),
        _spec("How would you look for a water bottle?", _goal(near("water bottle")),
              _plan(find_label("water bottle")), _start(USER)),
        _spec("How would you pick up the redbull?", _goal(holding("redbull can")), _plan(pick_label("redbull can")),
              _start("table", redbull_can="table")),
        _spec("How would you release the grapefruit soda?", _goal(at("grapefruit soda", "far counter")),
              _plan(place_label("grapefruit soda")), _start("far counter", hold="grapefruit soda")),
        _spec("How would you locate the rice chips?", _goal(near("rice chips")), _plan(find_label("rice chips")),
              _start(USER)),
        _spec("How would you take the pepsi can in your hand?", _goal(holding("pepsi can")),
              _plan(pick_label("pepsi can")), _start("close counter", pepsi_can="close counter")),
        _spec("How would you move over to the far counter?", _goal(robot_at("far counter")),
              _plan(go_to_label("far counter")), _start(USER)),
    ]


def _nl_nouns() -> list[Spec]:
    no_caffeine_elsewhere = _start(**{"7up_can": "close counter", "lime_soda": "far counter",
                                      "grapefruit_soda": "close counter", "water_bottle": "far counter"})
    return [
        _spec("How would you bring me a fruit?", _goal(count_at("fruit", USER)), _plan(fetch("apple")),
              paper_example=True),
        _spec("How would you bring me a soda?", _goal(count_at("soda", USER)), _plan(fetch("coke can"))),
        _spec("How would you bring me something to clean with?", _goal(count_at("cleaning", USER)),
              _plan(fetch("sponge"))),
        _spec("How would you bring me a caffeinated drink?", _goal(count_at("caffeinated", USER)),
              _plan(fetch("redbull can"))),
        _spec("How would you bring me a bag of chips?", _goal(count_at("chips", USER)), _plan(fetch("rice chips"))),
        _spec("How would you bring me a healthy snack?", _goal(count_at("healthy snack", USER)),
              _plan(fetch("energy bar"))),
        _spec("How would you bring me an energy drink?", _goal(count_at("energy drink", USER)),
              _plan(fetch("redbull can"))),
        _spec("How would you put a drink without caffeine on the table?", _goal(count_at("caffeine free", "table")),
              _plan(move("water bottle", "table")), no_caffeine_elsewhere),
        _spec("How would you bring me a citrus soda?", _goal(count_at("citrus", USER)), _plan(fetch("lime soda"))),
        _spec("How would you move a bottle of water to the close counter?",
              _goal(at("water bottle", "close counter")), _plan(move("water bottle", "close counter")),
              _start(water_bottle="table")),
        _spec("How would you bring me a cola?", _goal(count_at("cola", USER)), _plan(fetch("pepsi can"))),
        _spec("How would you bring me some tea?", _goal(delivered("green tea")), _plan(fetch("green tea"))),
    ]


def _verbs_and_structured() -> tuple[list[Spec], list[Spec]]:
    """NL-verb instructions and their structured mirrors (Table 1: structured mirrors NL verbs)."""
    rows: list[tuple[str, str, Goal, tuple[str, ...], dict[str, Any]]] = [
        ("How would you restock the rice chips on the far counter?",
         "How would you move the rice chips to the far counter?",
         _goal(at("rice chips", "far counter")), _plan(move("rice chips", "far counter")),
         _start(rice_chips="table")),
        ("How would you dispose of the redbull?", "How would you put the redbull can in the trash can?",
         _goal(thrown("redbull can")), _plan(throw("redbull can")), {}),
        ("How would you fetch me the apple?", "How would you bring me the apple?",
         _goal(delivered("apple")), _plan(fetch("apple")), {}),
        ("How would you return the sponge to the close counter?", "How would you move the sponge to the close counter?",
         _goal(at("sponge", "close counter")), _plan(move("sponge", "close counter")), _start(sponge="table")),
        ("How would you discard the jalapeno chips?", "How would you put the jalapeno chips in the trash can?",
         _goal(thrown("jalapeno chips")), _plan(throw("jalapeno chips")), {}),
        ("How would you hand me the energy bar?", "How would you bring me the energy bar?",
         _goal(delivered("energy bar")), _plan(fetch("energy bar")), {}),
        ("How would you relocate the water bottle to the table?", "How would you move the water bottle to the table?",
         _goal(at("water bottle", "table")), _plan(move("water bottle", "table")), _start(water_bottle="far counter")),
        ("How would you serve me the green tea?", "How would you bring me the green tea?",
         _goal(delivered("green tea")), _plan(fetch("green tea")), {}),
        ("How would you get rid of the 7up can?", "How would you put the 7up can in the trash can?",
         _goal(thrown("7up can")), _plan(throw("7up can")), {}),
        ("How would you stash the multigrain chips on the close counter?",
         "How would you move the multigrain chips to the close counter?",
         _goal(at("multigrain chips", "close counter")), _plan(move("multigrain chips", "close counter")),
         _start(multigrain_chips="far counter")),
        ("How would you grab me the lime soda?", "How would you bring me the lime soda?",
         _goal(delivered("lime soda")), _plan(fetch("lime soda")), {}),
        ("How would you tidy the paper towel away onto the far counter?",
         "How would you move the paper towel from the table to the far counter?",
         _goal(at("paper towel", "far counter")), _plan(move("paper towel", "far counter")),
         _start(paper_towel="table")),
    ]
    verbs = [_spec(v, g, p, s, paper_example=i == 0) for i, (v, _, g, p, s) in enumerate(rows)]
    structured = [_spec(t, g, p, s, paper_example=i == 0, mirrors=f"kitchen/nl_verbs/{i:02d}")
                  for i, (_, t, g, p, s) in enumerate(rows)]
    return verbs, structured


def _embodiment() -> list[Spec]:
    coke = "How would you put the coke can down on the far counter?"
    coke_goal = _goal(at("coke can", "far counter"))
    apple = "How would you bring me the apple?"
    sponge = "How would you throw away the sponge?"
    chips = "How would you bring me the rice chips?"
    return [
        _spec(coke, coke_goal, _plan(move("coke can", "far counter")), _start(USER, coke_can="table"),
              paper_example=True, stage=0),
        _spec(coke, coke_goal, _plan(pick_label("coke can"), go_to_label("far counter"), place_label("coke can")),
              _start("table", coke_can="table"), paper_example=True, stage=1),
        _spec(coke, coke_goal, _plan(go_to_label("far counter"), place_label("coke can")),
              _start("table", hold="coke can"), paper_example=True, stage=2),
        _spec(coke, coke_goal, _plan(place_label("coke can")), _start("far counter", hold="coke can"),
              paper_example=True, stage=3),
        _spec(apple, _goal(delivered("apple")), _plan(fetch("apple")), _start(USER, apple="close counter"), stage=0),
        _spec(apple, _goal(delivered("apple")), _plan(pick_label("apple"), BRING_LABEL, place_label("apple")),
              _start("close counter", apple="close counter"), stage=1),
        _spec(apple, _goal(delivered("apple")), _plan(BRING_LABEL, place_label("apple")),
              _start("close counter", hold="apple"), stage=2),
        _spec(apple, _goal(delivered("apple")), _plan(place_label("apple")), _start(USER, hold="apple"), stage=3),
        _spec(sponge, _goal(thrown("sponge")), _plan(throw("sponge")), _start(USER, sponge="table"), stage=0),
        _spec(sponge, _goal(thrown("sponge")), _plan(pick_label("sponge"), go_to_label(TRASH), place_label("sponge")),
              _start("table", sponge="table"), stage=1),
        _spec(sponge, _goal(thrown("sponge")), _plan(place_label("sponge")), _start(TRASH, hold="sponge"), stage=3),
        _spec(chips, _goal(delivered("rice chips")), _plan(pick_label("rice chips"), BRING_LABEL,
                                                            place_label("rice chips")),
              _start("far counter", rice_chips="far counter"), stage=1),
    ]


def _crowd_sourced() -> list[Spec]:
    return [
        _spec("My favorite drink is redbull, bring one to me.", _goal(delivered("redbull can")),
              _plan(fetch("redbull can")), paper_example=True),
        _spec("Please, move the pepsi to the close counter.", _goal(at("pepsi can", "close counter")),
              _plan(move("pepsi can", "close counter")), _start(pepsi_can="table"), paper_example=True),
        _spec("can u brng me a 7up pls", _goal(delivered("7up can")), _plan(fetch("7up can"))),
        _spec("im thirsty, get me some water", _goal(delivered("water bottle")), _plan(fetch("water bottle"))),
        _spec("thorw away the coke can plz", _goal(thrown("coke can")), _plan(throw("coke can"))),
        _spec("An apple was moved in front of me, please put it back on the table",
              _goal(at("apple", "table")), _plan(move("apple", "table")), _start(apple=USER)),
        _spec("could you get me some chips? any kind is fine", _goal(count_at("chips", USER)),
              _plan(fetch("jalapeno chips"))),
        _spec("plz put the sponge on teh table", _goal(at("sponge", "table")), _plan(move("sponge", "table")),
              _start(sponge="close counter")),
        _spec("Im hungry, bring me smth to eat", _goal(count_at("snack", USER)), _plan(fetch("energy bar"))),
        _spec("can you take the grapefruit soda over to the far counter", _goal(at("grapefruit soda", "far counter")),
              _plan(move("grapefruit soda", "far counter")), _start(grapefruit_soda="close counter")),
        _spec("get me a energy bar please", _goal(delivered("energy bar")), _plan(fetch("energy bar"))),
        _spec("i need caffine, anything will do", _goal(count_at("caffeinated", USER)), _plan(fetch("coke can"))),
    ]


def _long_horizon() -> list[Spec]:
    return [
        _spec("How would you bring me two different sodas?", _goal(count_at("soda", USER, 2)),
              _plan(fetch("coke can"), fetch("pepsi can")), paper_example=True),
        _spec("I spilled my coke on the table, how would you throw it away and then bring me something to help clean?",
              _goal(thrown("coke can"), _any(count_at("cleaning", "table"), count_at("cleaning", USER))),
              _plan(throw("coke can"), move("sponge", "table")),
              _start(coke_can="table", sponge="close counter", paper_towel="far counter"), paper_example=True),
        _spec("I just worked out, can you bring me a drink and a snack to recover?",
              _goal(count_at("healthy drink", USER), count_at("healthy snack", USER)),
              _plan(fetch("water bottle"), fetch("apple")), paper_example=True),
        _spec("How would you throw away the coke can and the pepsi can?",
              _goal(thrown("coke can"), thrown("pepsi can")), _plan(throw("coke can"), throw("pepsi can"))),
        _spec("How would you put a water bottle and an apple on the table?",
              _goal(at("water bottle", "table"), at("apple", "table")),
              _plan(move("water bottle", "table"), move("apple", "table")),
              _start(water_bottle="close counter", apple="far counter")),
        _spec("How would you bring me all three bags of chips?", _goal(count_at("chips", USER, 3)),
              _plan(fetch("jalapeno chips"), fetch("rice chips"), fetch("multigrain chips"))),
        _spec("How would you restock the far counter with the rice chips and the multigrain chips?",
              _goal(at("rice chips", "far counter"), at("multigrain chips", "far counter")),
              _plan(move("rice chips", "far counter"), move("multigrain chips", "far counter")),
              _start(rice_chips="table", multigrain_chips="table")),
        _spec("I finished my 7up, how would you throw it away and bring me a lime soda?",
              _goal(thrown("7up can"), delivered("lime soda")), _plan(throw("7up can"), fetch("lime soda")),
              _start(**{"7up_can": USER})),
        _spec("How would you bring me an apple and then throw away the jalapeno chips?",
              _goal(delivered("apple"), thrown("jalapeno chips")), _plan(fetch("apple"), throw("jalapeno chips"))),
        _spec("How would you move the coke can, the redbull can and the pepsi can to the close counter?",
              _goal(at("coke can", "close counter"), at("redbull can", "close counter"), at("pepsi can", "close counter")),
              _plan(move("coke can", "close counter"), move("redbull can", "close counter"),
                    move("pepsi can", "close counter")),
              _start(coke_can="table", redbull_can="far counter", pepsi_can="table")),
        _spec("How would you bring me a fruit and a soda, and throw away the energy bar?",
              _goal(count_at("fruit", USER), count_at("soda", USER), thrown("energy bar")),
              _plan(fetch("apple"), fetch("grapefruit soda"), throw("energy bar"))),
        _spec("How would you clear the table by throwing away the jalapeno chips and the coke can on it, "
              "and then put a sponge there?",
              _goal(thrown("jalapeno chips"), thrown("coke can"), at("sponge", "table")),
              _plan(throw("jalapeno chips"), throw("coke can"), move("sponge", "table")),
              _start(jalapeno_chips="table", coke_can="table", sponge="close counter")),
    ]


def _build_tasks() -> list[Task]:
    verbs, structured = _verbs_and_structured()
    by_family: dict[str, list[Spec]] = {
        "nl_single_primitive": _single_primitive(),
        "nl_nouns": _nl_nouns(),
        "nl_verbs": verbs,
        "structured": structured,
        "embodiment": _embodiment(),
        "crowd_sourced": _crowd_sourced(),
        "long_horizon": _long_horizon(),
    }
    tasks: list[Task] = []
    for family in FAMILIES:
        for i, (instruction, goal, plan, start, meta) in enumerate(by_family[family]):
            validate_goal(goal)
            tasks.append(Task(
                task_id=f"kitchen/{family}/{i:02d}",
                instruction=instruction,
                family=family,
                goal=goal,
                start_state=start or None,
                reference_plan=plan,
                metadata={k: v for k, v in meta.items() if v is not False},
            ))
    return tasks


#: every kitchen task, in family order
TASKS: tuple[Task, ...] = tuple(_build_tasks())
_BY_ID: dict[str, Task] = {t.task_id: t for t in TASKS}


def task_by_id(task_id: str) -> Task:
    """The task with this id (e.g. "kitchen/nl_nouns/03"); unknown ids raise :class:`UnknownNameError`."""
    try:
        return _BY_ID[task_id]
    except KeyError:
        raise UnknownNameError(
            f"unknown kitchen task {task_id!r}; ids look like 'kitchen/<family>/<NN>' with families "
            f"{', '.join(FAMILIES)} (see KitchenEnv().tasks())"
        ) from None


def kitchen_split(task_id: str) -> str:
    """``train`` or ``test`` for a kitchen task id such as ``kitchen/nl_nouns/09`` (module doc)."""
    return "train" if int(task_id.rsplit("/", 1)[-1]) < TRAIN_PER_FAMILY else "test"


def tasks_for(families: Sequence[str] | None = None, split: str | None = None) -> list[Task]:
    """Tasks of the given families (all when None) and SayCanPay split (both when None); an unknown
    family or split raises :class:`InvalidInputError`."""
    if split is not None:
        check_split(split, SPLITS)
        return [t for t in tasks_for(families) if kitchen_split(t.task_id) == split]
    return of_families(TASKS, families, FAMILIES, "kitchen task")


def of_families(tasks: Sequence[Task], families: Sequence[str] | str | None, valid: Sequence[str],
                what: str) -> list[Task]:
    """``tasks`` of the given families (all when None); a family not in ``valid`` raises
    :class:`InvalidInputError` naming the valid ones (``what``: the task set, for the message)."""
    if families is None:
        return list(tasks)
    if isinstance(families, str):
        families = [families]
    unknown = [f for f in families if f not in valid]
    if unknown:
        raise InvalidInputError(f"unknown {what} famil{'y' if len(unknown) == 1 else 'ies'} "
                                f"{', '.join(map(repr, unknown))}; valid: {', '.join(valid)}")
    wanted = set(families)
    return [t for t in tasks if t.family in wanted]
