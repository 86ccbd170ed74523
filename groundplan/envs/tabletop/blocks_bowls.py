"""SayCanPay's "put blocks in bowls" (Ravens) on the PyBullet tabletop (Sec. 6; Table 2's example goal
"Put the yellow blocks in gray bowls" with observation "There is a gray bowl 1, gray bowl 2, ...").

Several blocks and bowls may share a colour, so objects carry an index ("yellow block 2"). Actions
``"put the <colour> block <i> in the <colour> bowl <j>"`` run the Panda's scripted pick-and-place
(:meth:`TabletopWorld.pick_and_place`) under physics, into a free slot of the bowl (4 slots 6 cm apart;
a full bowl refuses). A block already in that bowl, an unknown object or a full bowl is a failed step
with the reason. The goal holds when every block of the goal's colour lies in some bowl of the goal's
colour (``in_bowl`` of the Inner Monologue checkers, read from the physics).

Sizes scaled to the table (objects must not overlap): train/test scenes have 1-3 goal blocks, 1-2 goal
bowls and one distractor block and bowl in seen colours; test-generalize has 3-4 goal blocks and novel
colours (SayCanPay Sec. 6: "unseen colors of blocks and bowls", "more blocks"), with at most 3 goal blocks
per goal bowl. The paper's scenes
hold up to 6 blocks and 5 bowls, which do not fit this workspace with bowls 17 cm wide.
"""
from __future__ import annotations

import dataclasses
import hashlib
import math
import re
from functools import lru_cache
from typing import Any, Iterator, Sequence

import numpy as np

from groundplan.core.types import GoalResult, Observation, StepResult, Task
from groundplan.core.validation import validate_options
from groundplan.envs.base import EnvCapabilities
from groundplan.envs.splits import check_split, draw_tasks, visible_signature
from groundplan.envs.tabletop.ravens import RavensTaskEnv, normalise_skill
from groundplan.envs.tabletop.ravens_options import BlocksBowlsConfig
from groundplan.envs.tabletop.start_state import BlocksBowlsStartState
from groundplan.envs.tabletop.tasks import Geometry, in_bowl
from groundplan.envs.tabletop.world import BLOCK_HALF, BOWL_FLOOR, Layout, TabletopWorld

DONE = "done"
FAMILIES: tuple[str, ...] = ("put_blocks_in_bowls",)
SEEN_COLOURS: tuple[str, ...] = ("blue", "red", "green", "yellow", "gray", "orange")
NOVEL_COLOURS: tuple[str, ...] = ("purple", "pink", "cyan", "brown")
#: place points inside a bowl, relative to its centre (a 2x2 grid of 6 cm pitch)
SLOTS: tuple[tuple[float, float], ...] = ((0.03, 0.03), (-0.03, -0.03), (0.03, -0.03), (-0.03, 0.03))
X_LIM, Y_LIM = (0.26, 0.64), (-0.25, 0.25)
_ACTION = re.compile(r"^(?:put|place|move) (?:the )?(\w+ block \d+) (?:in|into|on) (?:the )?(\w+ bowl \d+)$")


def action_label(block: str, bowl: str) -> str:
    return f"put the {block} in the {bowl}"


def skill_labels(blocks: Sequence[str], bowls: Sequence[str]) -> list[str]:
    """Every action the env lists (in every state: feasible or not), then done."""
    return [action_label(b, w) for b in blocks for w in bowls] + [DONE]


def instruction(block_colour: str, bowl_colour: str, n_blocks: int, n_bowls: int) -> str:
    blocks = f"{block_colour} blocks" if n_blocks > 1 else f"{block_colour} block"
    bowls = f"{bowl_colour} bowls" if n_bowls > 1 else f"{bowl_colour} bowl"
    return f"put the {blocks} in the {bowls}"


def sample_scene(rng: np.random.Generator, palette: Sequence[str], n_goal_blocks: int, n_goal_bowls: int) -> dict:
    """Colours, names and table positions of one scene (rejection sampling with restarts)."""
    cb, cw, cd_block, cd_bowl = (str(c) for c in rng.choice(palette, 4, replace=False))
    blocks = [f"{cb} block {i + 1}" for i in range(n_goal_blocks)] + [f"{cd_block} block 1"]
    bowls = [f"{cw} bowl {i + 1}" for i in range(n_goal_bowls)] + [f"{cd_bowl} bowl 1"]
    for _ in range(500):
        xy: dict[str, tuple[float, float]] = {}
        for name in bowls + blocks:
            bowl = "bowl" in name
            for _ in range(200):
                m = 0.09 if bowl else 0.03
                p = (float(rng.uniform(X_LIM[0] + m - 0.03, X_LIM[1] - m + 0.03)),
                     float(rng.uniform(Y_LIM[0] + m - 0.03, Y_LIM[1] - m + 0.03)))
                if all(math.dist(p, q) >= (0.19 if bowl and "bowl" in o else 0.13 if bowl or "bowl" in o else 0.08)
                       for o, q in xy.items()):
                    xy[name] = p
                    break
            else:
                break
        if len(xy) == len(blocks) + len(bowls):
            return {"blocks": blocks, "bowls": bowls, "xy": xy, "block_colour": cb, "bowl_colour": cw}
    raise RuntimeError("could not lay out the scene")


def expert_plan(blocks: list[str], bowls: list[str], goal: dict[str, str]) -> tuple[str, ...]:
    """:class:`BlocksBowlsOracle`'s plan from a task's start (every block on the table), each placement
    assumed to land: the task's reference plan, for cost-effectiveness (SayCanPay Table 4) and Perfect-Say."""
    targets = [w for w in bowls if w.startswith(goal["bowl_colour"] + " ")]
    counts = dict.fromkeys(targets, 0)
    plan = []
    for block in [b for b in blocks if b.startswith(goal["block_colour"] + " ")]:
        bowl = min(targets, key=lambda w: (counts[w], targets.index(w)))
        counts[bowl] += 1
        plan.append(action_label(block, bowl))
    return (*plan, DONE)


def scene_text(bowls: Sequence[str], blocks: Sequence[str], contents: dict[str, list[str]]) -> str:
    """The observation text (Table 2): "There is a gray bowl 1, ..., yellow block 1. The yellow block 1 is
    in the gray bowl 1." ``contents`` maps each bowl to the blocks inside it (none at a task's start)."""
    inside = [f"The {b} is in the {w}." for w, bs in contents.items() for b in bs]
    return " ".join(["There is a " + ", ".join([*bowls, *blocks]) + ".", *inside])


def _candidates(split: str) -> Iterator[Task]:
    """Tasks of ``split`` drawn one after another from the split's seed, each with its position signature
    (``layout_signature``) and its model-visible one (``signature``: goal, first observation text, expert
    plan); their ids are given when they are picked."""
    gen = split == "test-generalize"
    palette = NOVEL_COLOURS if gen else SEEN_COLOURS
    rng = np.random.default_rng(int(hashlib.sha1(f"blocks_bowls|{split}".encode()).hexdigest()[:8], 16))
    while True:
        nb = int(rng.integers(3, 5)) if gen else int(rng.integers(1, 4))
        nw = int(rng.integers(1, 3))
        if nb > 3 * nw:  # at most 3 goal blocks per goal bowl, so no bowl needs all 4 of its slots
            nw += 1
        scene = sample_scene(rng, palette, nb, nw)
        layout = hashlib.sha1(repr(sorted((k, round(x, 3), round(y, 3)) for k, (x, y) in scene["xy"].items()))
                              .encode()).hexdigest()[:16]
        goal = {"block_colour": scene["block_colour"], "bowl_colour": scene["bowl_colour"]}
        plan = expert_plan(scene["blocks"], scene["bowls"], goal)
        text = instruction(goal["block_colour"], goal["bowl_colour"], nb, nw)
        observation = scene_text(scene["bowls"], scene["blocks"], {})  # every block starts on the table
        yield Task(
            task_id="", instruction=text, family=FAMILIES[0], goal=goal, reference_plan=plan,
            start_state={"blocks": scene["blocks"], "bowls": scene["bowls"],
                         "xy": {k: list(v) for k, v in scene["xy"].items()}, "split": split},
            metadata={"split": split, "layout_signature": layout,
                      "signature": visible_signature(text, observation)},
        )


@lru_cache(maxsize=16)
def split_tasks(split: str, n: int, n_train: int) -> tuple[Task, ...]:
    """Deterministic tasks of ``split``, unique by scene (object positions) within it. A test or
    test-generalize task that repeats a train task in what the models read
    (:func:`~groundplan.envs.splits.visible_signature`) is skipped for the next draw: scenes at other
    millimetre positions read the same (4 of the first 50 test tasks were train tasks to the models when
    only positions were compared)."""
    check_split(split)
    train = () if split == "train" else split_tasks("train", n_train, n_train)
    picked = draw_tasks(_candidates(split), n, "layout_signature", exclude={t.metadata["signature"] for t in train})
    return tuple(dataclasses.replace(t, task_id=f"blocks_bowls/{split}/{i:04d}") for i, t in enumerate(picked))


class BlocksBowlsEnv(RavensTaskEnv):
    """Put blocks in bowls on the tabletop; one PyBullet DIRECT client per instance."""

    name = "blocks_bowls"
    families = FAMILIES
    done_skill = DONE
    start_state_schema = BlocksBowlsStartState
    capabilities = EnvCapabilities(measures=("picks", "sim_steps"), symbolic_model=True, fixed_actions=True)

    def __init__(self, **options: Any) -> None:
        self.config: BlocksBowlsConfig = validate_options(BlocksBowlsConfig, options, "blocks_bowls env options")
        self.world = TabletopWorld()
        self.geometry = Geometry()
        self._task: Task | None = None
        self.blocks: list[str] = []
        self.bowls: list[str] = []
        self._rng = np.random.default_rng(0)
        self._stats: dict[str, float] = {}

    def tasks(self, families: Sequence[str] | None = None) -> list[Task]:
        self._check_families(families)
        c = self.config
        return list(split_tasks(c.split, c.split_size, c.train_size))

    def reset(self, task: Task, seed: int) -> Observation:
        st = task.start_state or {}
        self.blocks, self.bowls = list(st["blocks"]), list(st["bowls"])
        xy = {k: (float(v[0]), float(v[1])) for k, v in st["xy"].items()}
        self.world.build(Layout(tuple(self.blocks), tuple(self.bowls), xy))
        self._task = task
        self._rng = np.random.default_rng([seed, int(hashlib.sha1(task.task_id.encode()).hexdigest()[:8], 16)])
        self._stats = {"picks": 0, "sim_steps": 0}
        return self._observe()

    # ------------------------------------------------------------------------------------ state
    def contents(self) -> dict[str, list[str]]:
        """Blocks inside each bowl, read from the physics."""
        pos = self.world.positions()
        return {w: [b for b in self.blocks if in_bowl(pos[b], pos[w], self.geometry)] for w in self.bowls}

    def skills(self) -> list[str]:
        return skill_labels(self.blocks, self.bowls)

    def execute(self, skill: str) -> StepResult:
        if self._task is None:
            raise RuntimeError("call reset(task, seed) first")
        s = normalise_skill(skill)
        if s == DONE:
            return StepResult(True, "done", self._observe())
        m = _ACTION.match(s)
        if m is None or m.group(1) not in self.blocks or m.group(2) not in self.bowls:
            return self._fail(skill, "not an action here (put the <colour> block <i> in the <colour> bowl <j>)",
                              admissible=False)
        block, bowl = m.groups()
        contents = self.contents()
        if block in contents[bowl]:
            return self._fail(skill, f"the {block} is already in the {bowl}")
        pos = self.world.positions()
        taken = [pos[b][:2] for b in contents[bowl]]
        bx, by, bz = pos[bowl]
        free = [(bx + dx, by + dy) for dx, dy in SLOTS
                if all(math.dist((bx + dx, by + dy), q) > 0.04 for q in taken)]
        if not free:
            return self._fail(skill, f"the {bowl} is full")
        result = self._pick_and_place(block, pos[block], free[0], bz + BOWL_FLOOR + BLOCK_HALF)
        ok = block in self.contents()[bowl]
        info = {"block": block, "bowl": bowl, "grasped": result.grasped, "sim_steps": result.sim_steps}
        return StepResult(ok, self._landed(block, f"the {bowl}", ok, result.grasped), self._observe(), info=info)

    def symbolic_model(self, task: Task) -> "BlocksBowlsRules":
        return BlocksBowlsRules(task)

    def check_goal(self) -> GoalResult:
        if self._task is None:
            raise RuntimeError("call reset(task, seed) first")
        g = self._task.goal
        targets = [w for w in self.bowls if w.startswith(g["bowl_colour"] + " ")]
        contents = self.contents()
        sat, unsat = [], []
        for b in self.blocks:
            if b.startswith(g["block_colour"] + " "):
                (sat if any(b in contents[w] for w in targets) else unsat).append(f"{b} is in a {g['bowl_colour']} bowl")
        return GoalResult(not unsat, sat, unsat)

    def _observe(self) -> Observation:
        contents = self.contents()
        return Observation(skills=self.skills(), state={"contents": contents},
                           text=scene_text(self.bowls, self.blocks, contents), images=self._images())


class BlocksBowlsRules:
    """The rules of one blocks-in-bowls task (:class:`~groundplan.envs.base.SymbolicModel`): the state is the bowl
    each block is in (-1: on the table, as every block starts); a placement needs a known block and bowl,
    the block not already in that bowl and a free slot there, as :meth:`BlocksBowlsEnv.execute` checks."""

    def __init__(self, task: Task) -> None:
        st = task.start_state or {}
        self.blocks: list[str] = list(st["blocks"])
        self.bowls: list[str] = list(st["bowls"])
        self.goal = task.goal

    def initial(self) -> tuple[int, ...]:
        return (-1,) * len(self.blocks)

    def step(self, state: tuple[int, ...], action: str) -> tuple[int, ...] | None:
        s = normalise_skill(action)
        if s == DONE:
            return state
        m = _ACTION.match(s)
        if m is None or m.group(1) not in self.blocks or m.group(2) not in self.bowls:
            return None
        block, bowl = self.blocks.index(m.group(1)), self.bowls.index(m.group(2))
        if state[block] == bowl or state.count(bowl) >= len(SLOTS):
            return None
        return tuple(bowl if i == block else w for i, w in enumerate(state))

    def actions(self, state: tuple[int, ...]) -> list[str]:
        """The env lists every block-bowl placement in every state (:meth:`BlocksBowlsEnv.skills`)."""
        return skill_labels(self.blocks, self.bowls)

    def goal_holds(self, state: tuple[int, ...]) -> bool:
        g = self.goal
        return all(w >= 0 and self.bowls[w].startswith(g["bowl_colour"] + " ")
                   for b, w in zip(self.blocks, state) if b.startswith(g["block_colour"] + " "))


class BlocksBowlsOracle:
    """Expert: each goal block not yet in a goal bowl goes to the goal bowl holding the fewest blocks
    (closed loop on the physical state)."""

    name = "blocks_bowls_oracle"

    def __init__(self, env: BlocksBowlsEnv) -> None:
        self.env = env

    def act(self, task: Task, obs: Observation) -> str:
        g = task.goal
        contents = self.env.contents()
        targets = [w for w in self.env.bowls if w.startswith(g["bowl_colour"] + " ")]
        placed = {b for w in targets for b in contents[w]}
        todo = [b for b in self.env.blocks if b.startswith(g["block_colour"] + " ") and b not in placed]
        if not todo:
            return DONE
        bowl = min(targets, key=lambda w: (len(contents[w]), targets.index(w)))
        return action_label(todo[0], bowl)
