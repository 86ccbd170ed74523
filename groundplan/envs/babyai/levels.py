"""The minigrid levels behind each family and split, and the deterministic task splits.

train/test use the four SayCanPay levels as minigrid defines them, except ``pickup``, which is a small
two-room version of minigrid's ``Pickup`` (3x3 rooms, 18 distractors) so that train/test plans stay
short; test-generalize (SayCanPay Sec. 6: "distractors in BabyAI, more rooms") uses
``Pickup`` on 2x2 rooms and the other three levels with distractor objects added. Layouts whose
action names would be ambiguous (two "grey ball"s, two yellow doors) are skipped: the paper's actions
carry no indices.

Layouts are drawn by minigrid from a seed, and splits use disjoint seed ranges; within a split, layouts
are unique (grid, agent pose and mission). A test or test-generalize task that equals a train task in
what the models read before acting, its mission and first observation text
(:func:`~groundplan.envs.splits.visible_signature`), is skipped for the next seed: many layouts differ
only in cells the observation text does not describe (31 of the 100 test tasks were train tasks to the
models when only layouts were compared).
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
from functools import lru_cache
from typing import Any, Callable, Iterator

from minigrid.envs.babyai.core.roomgrid_level import RoomGridLevel
from minigrid.envs.babyai.core.verifier import ObjDesc, PickupInstr
from minigrid.envs.babyai.unlock import BlockedUnlockPickup, UnlockPickup, UnlockToUnlock

from groundplan.core.types import Task
from groundplan.envs.babyai.options import FAMILIES
from groundplan.envs.splits import check_split, draw_tasks, visible_signature

#: first seed of each split (ranges never overlap for any sensible split size)
SEED_BASE = {"train": 0, "test": 1_000_000, "test-generalize": 2_000_000}
MAX_STEPS = 100_000  # minigrid's own truncation is not used: the env counts primitive steps itself


class SmallPickup(RoomGridLevel):
    """minigrid's ``Pickup`` on two connected rooms with 4 distractors (train/test ``pickup``)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(num_rows=1, num_cols=2, room_size=6, **kwargs)

    def gen_mission(self) -> None:
        self.place_agent()
        self.connect_all()
        objs = self.add_distractors(num_distractors=4, all_unique=False)
        self.check_objs_reachable()
        obj = self._rand_elem(objs)
        self.instrs = PickupInstr(ObjDesc(obj.type, obj.color))


class MultiRoomPickup(SmallPickup):
    """minigrid's ``Pickup`` on 2x2 rooms with 8 unique distractors (test-generalize ``pickup``: more
    rooms, more distractors). minigrid's own 3x3-room, 18-distractor ``Pickup`` almost always repeats
    door colours, which makes "toggle <colour> door" ambiguous."""

    def __init__(self, **kwargs: Any) -> None:
        RoomGridLevel.__init__(self, num_rows=2, num_cols=2, room_size=6, **kwargs)

    def gen_mission(self) -> None:
        self.place_agent()
        self.connect_all()
        objs = self.add_distractors(num_distractors=8, all_unique=True)
        self.check_objs_reachable()
        obj = self._rand_elem(objs)
        self.instrs = PickupInstr(ObjDesc(obj.type, obj.color))


def _with_distractors(base: type, n: int) -> type:
    """``base`` with ``n`` distractor objects added after its own mission (test-generalize)."""

    class WithDistractors(base):  # type: ignore[misc, valid-type]
        def gen_mission(self) -> None:
            super().gen_mission()
            self.add_distractors(num_distractors=n, all_unique=False)

    WithDistractors.__name__ = f"{base.__name__}Distractors"
    return WithDistractors


def level_class(family: str, split: str) -> tuple[type, dict[str, Any]]:
    """The minigrid level class and its kwargs for ``family`` in ``split``."""
    gen = split == "test-generalize"
    if family == "pickup":
        return (MultiRoomPickup, {}) if gen else (SmallPickup, {})
    if family == "unlock_pickup":
        return UnlockPickup, {"distractors": gen}
    if family == "blocked_unlock_pickup":
        return (_with_distractors(BlockedUnlockPickup, 3), {}) if gen else (BlockedUnlockPickup, {})
    if family == "unlock_to_unlock":
        return (_with_distractors(UnlockToUnlock, 3), {}) if gen else (UnlockToUnlock, {})
    raise ValueError(f"unknown BabyAI family '{family}'; valid: {', '.join(FAMILIES)}")


def make_level(family: str, split: str) -> RoomGridLevel:
    cls, kwargs = level_class(family, split)
    return cls(max_steps=MAX_STEPS, **kwargs)


def unambiguous(env: RoomGridLevel) -> bool:
    """Every floor object has a distinct "<colour> <type>" and every door a distinct colour, so each
    high-level action names one thing (the paper's actions carry no indices)."""
    from groundplan.envs.babyai.grid import doors, name, objects

    names = [name(o) for _, o in objects(env)]
    colours = [d.color for _, d in doors(env)]
    return len(set(names)) == len(names) and len(set(colours)) == len(colours)


#: a task's expert plan (the env's reference plan), given by the env, which owns the expert
PlanOf = Callable[[Task], tuple[str, ...]]


def layout_signature(env: RoomGridLevel) -> str:
    """Content hash of a layout: the grid encoding, the agent pose and the mission."""
    h = hashlib.sha1(env.grid.encode().tobytes())
    h.update(f"{tuple(env.agent_pos)}|{env.agent_dir}|{env.mission}".encode())
    return h.hexdigest()[:16]


def _candidates(family: str, split: str, plan_of: PlanOf) -> Iterator[Task]:
    """Every unambiguous layout of ``family`` in ``split``, seed after seed, as a task with its expert plan
    and its model-visible signature (mission, first observation text, plan)."""
    from groundplan.envs.babyai.grid import describe

    env = make_level(family, split)
    seed = SEED_BASE[split]
    while True:
        with contextlib.redirect_stdout(io.StringIO()):  # minigrid prints its rejection sampling
            env.reset(seed=seed)
        if unambiguous(env):
            desc = env.instrs.desc
            task = Task(
                task_id=f"babyai/{split}/{family}/{seed}", instruction=env.mission, family=family,
                goal={"type": desc.type, "color": desc.color},
                start_state={"level_seed": seed, "split": split},
                metadata={"split": split, "layout_signature": layout_signature(env)},
            )
            observation = describe(env)  # the env's first observation text (BabyAIEnv.reset)
            plan = plan_of(task)
            task.metadata["signature"] = visible_signature(task.instruction, observation)
            yield dataclasses.replace(task, reference_plan=plan)
        seed += 1


@lru_cache(maxsize=64)
def _family_tasks(family: str, split: str, n: int, train_n: int, plan_of: PlanOf) -> tuple[Task, ...]:
    """``n`` tasks of ``family`` in ``split``, unique by layout; outside train none repeats one of the first
    ``train_n`` train tasks in what the models read (see the module docstring)."""
    train = () if split == "train" else _family_tasks(family, "train", train_n, train_n, plan_of)
    return tuple(draw_tasks(_candidates(family, split, plan_of), n, "layout_signature",
                            exclude={t.metadata["signature"] for t in train}))


def split_tasks(split: str, sizes: dict[str, int], families: tuple[str, ...] = FAMILIES, *,
                plan_of: PlanOf) -> list[Task]:
    """The deterministic tasks of ``split``, with their expert plans; ``sizes`` maps split → tasks per
    family; ``plan_of`` gives a task's expert plan (the reference plan; not part of the signature, which
    holds only what a model reads before it acts)."""
    check_split(split)
    out: list[Task] = []
    for fam in families:
        out.extend(_family_tasks(fam, split, sizes[split], sizes["train"], plan_of))
    return out
