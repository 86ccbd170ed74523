"""SayCanPay's Tower of Hanoi (sequence) on the PyBullet tabletop (Sec. 6: Ravens "Tower of Hanoi
(sequence)": move a given disk to a given rod while keeping the puzzle's rules; Table 2's example
"Move the gray disk in rod 2").

Three rods on the table and 3 disks of different sizes and colours (4 in test-generalize, with colours
never seen in train/test). Actions ``"put the <colour> disk in rod <n>"`` run the Panda's scripted
pick-and-place (:meth:`TabletopWorld.pick_and_place`) under physics; rules are checked on the physical
state before moving: only a top disk moves, never onto a smaller disk, never to its own rod — an
illegal action is a failed step with the reason and moves nothing. Which disk sits on which rod is
always read back from the physics (nearest rod within :data:`ROD_RADIUS`, ordered by height), so a
dropped disk shows.

Modelling choice: a disk is a solid cylinder and a rod is a static base pad with a visual-only pole,
so disks stack on the pad rather than slide down a peg (Ravens' meshes with holes are not available
offline). Goals: one disk on a rod, or the full tower on a rod. The expert is an optimal BFS solver
over rod assignments, replanned from the physical state after every move.
"""
from __future__ import annotations

import dataclasses
import hashlib
import math
import re
from collections import deque
from functools import lru_cache
from typing import Any, Iterator, Sequence

import numpy as np
import pybullet as pb

from groundplan.core.types import GoalResult, Observation, StepResult, Task
from groundplan.core.validation import validate_options
from groundplan.envs.base import EnvCapabilities
from groundplan.envs.splits import check_split, draw_tasks, visible_signature
from groundplan.envs.tabletop.ravens import RavensTaskEnv, normalise_skill
from groundplan.envs.tabletop.ravens_options import HanoiConfig
from groundplan.envs.tabletop.start_state import HanoiStartState
from groundplan.envs.tabletop.world import COLOURS, TabletopWorld

DONE = "done"
FAMILIES: tuple[str, ...] = ("move_disk", "move_tower")
#: colours of train/test disks, and the novel ones of test-generalize (SayCanPay Sec. 6: "unseen colors")
SEEN_COLOURS: tuple[str, ...] = ("blue", "red", "green", "yellow", "gray", "orange")
NOVEL_COLOURS: tuple[str, ...] = ("purple", "pink", "cyan", "brown")
RODS: tuple[tuple[float, float], ...] = ((0.45, 0.17), (0.45, 0.0), (0.45, -0.17))
DISK_HALF = 0.0125  # 2.5 cm thick
PAD_HEIGHT = 0.004
ROD_RADIUS = 0.045  # a disk whose centre is within this of a rod's axis is on that rod
DISK_RADII = (0.018, 0.024, 0.030, 0.036)  # smallest first; the widest (7.2 cm) fits the 8 cm gripper
_ACTION = re.compile(r"^(?:put|move) (?:the )?(\w+) disk (?:in|on|to|onto) (?:the )?rod (\d+)$")

State = tuple[int, ...]  # rod index (0-based) of each disk, smallest disk first


def action_label(colour: str, rod: int) -> str:
    return f"put the {colour} disk in rod {rod + 1}"


def skill_labels(colours: Sequence[str]) -> list[str]:
    """Every action the env lists (in every state: legal or not), then done."""
    return [action_label(c, r) for c in colours for r in range(len(RODS))] + [DONE]


# ------------------------------------------------------------------------------------ the puzzle
def legal_moves(state: State, n_rods: int = 3) -> list[tuple[int, int]]:
    """(disk, rod) moves allowed by the rules in ``state`` (disks indexed smallest first)."""
    tops = {}
    for d, r in enumerate(state):  # the smallest disk on a rod is its top
        tops.setdefault(r, d)
    return [(d, r) for r0, d in tops.items() for r in range(n_rods) if r != r0 and (r not in tops or tops[r] > d)]


def goal_holds(goal: dict[str, Any], state: State) -> bool:
    if goal["kind"] == "tower":
        return all(r == goal["rod"] for r in state)
    return state[goal["disk"]] == goal["rod"]


def solve(state: State, goal: dict[str, Any]) -> list[tuple[int, int]]:
    """Optimal move sequence by BFS over the 3^n rod assignments (a fewest-moves plan)."""
    prev: dict[State, tuple[State, tuple[int, int]] | None] = {state: None}
    queue = deque([state])
    while queue:
        s = queue.popleft()
        if goal_holds(goal, s):
            plan = []
            while prev[s] is not None:
                s, move = prev[s]  # type: ignore[misc]
                plan.append(move)
            return plan[::-1]
        for d, r in legal_moves(s):
            t = tuple(r if i == d else x for i, x in enumerate(s))
            if t not in prev:
                prev[t] = (s, (d, r))
                queue.append(t)
    raise ValueError(f"no plan from {state} to {goal}")


def describe(colours: Sequence[str], stacks: list[list[int]]) -> str:
    """SayCanPay's text (Table 2): "Blue disk on top of gray disk. Gray disk in rod 1. ... The disks
    can be moved in rod 1, rod 2, rod 3." ``stacks[r]`` lists disk indices bottom first."""
    parts = []
    for r, stack in enumerate(stacks):
        for below, above in zip(stack[::-1][1:], stack[::-1][:-1]):
            parts.append(f"{colours[above].capitalize()} disk on top of {colours[below]} disk.")
        if stack:
            parts.append(f"{colours[stack[0]].capitalize()} disk in rod {r + 1}.")
    rods = ", ".join(f"rod {r + 1}" for r in range(len(stacks)))
    return " ".join(parts + [f"The disks can be moved in {rods}."])


def instruction(goal: dict[str, Any], colours: Sequence[str]) -> str:
    if goal["kind"] == "tower":
        return f"move all the disks to rod {goal['rod'] + 1}"
    return f"move the {colours[goal['disk']]} disk in rod {goal['rod'] + 1}"


def start_stacks(start: State, n_rods: int = len(RODS)) -> list[list[int]]:
    """Disk indices per rod, bottom first, of a rod assignment (the largest disk is the bottom one), as
    :meth:`HanoiEnv.stacks` reads them from the physics after :meth:`HanoiWorld.build_hanoi`."""
    return [[d for d in reversed(range(len(start))) if start[d] == r] for r in range(n_rods)]


def _candidates(split: str, tower_goal_prob: float) -> Iterator[Task]:
    """Tasks of ``split`` drawn one after another from the split's seed, each with its state signature
    (``state_signature``: colours, start, goal) and its model-visible one (``signature``: instruction,
    first observation text); their ids are given when they are picked."""
    gen = split == "test-generalize"
    n_disks, palette = (4, NOVEL_COLOURS) if gen else (3, SEEN_COLOURS)
    rng = np.random.default_rng(zlib_seed(split))
    while True:
        colours = [str(c) for c in rng.permutation(palette)[:n_disks]]
        if rng.random() < 0.5:
            start: State = (int(rng.integers(3)),) * n_disks
        else:
            start = tuple(int(v) for v in rng.integers(0, 3, n_disks))
        if rng.random() < tower_goal_prob:
            goal = {"kind": "tower", "rod": int(rng.integers(3))}
        else:
            goal = {"kind": "disk", "disk": int(rng.integers(n_disks)), "rod": int(rng.integers(3))}
        if goal_holds(goal, start):
            continue
        state = hashlib.sha1(repr((colours, start, goal)).encode()).hexdigest()[:16]
        family = "move_tower" if goal["kind"] == "tower" else "move_disk"
        goal = {**goal, "colours": colours}
        text = instruction(goal, colours)
        plan = tuple(action_label(colours[d], r) for d, r in solve(start, goal)) + (DONE,)
        observation = describe(colours, start_stacks(start))
        yield Task(
            task_id="", instruction=text, family=family, goal=goal,
            start_state={"colours": colours, "rods": list(start), "split": split}, reference_plan=plan,
            metadata={"split": split, "state_signature": state,
                      "signature": visible_signature(text, observation)},
        )


@lru_cache(maxsize=16)
def split_tasks(split: str, n: int, n_train: int, tower_goal_prob: float) -> tuple[Task, ...]:
    """Deterministic tasks of ``split``: train/test have 3 disks in seen colours, test-generalize 4 disks
    in novel colours, unique by (colours, start, goal) within a split. A test or test-generalize task
    that repeats a train task in what the models read (:func:`~groundplan.envs.splits.visible_signature`)
    is skipped for the next draw: the text does not always tell the disks' sizes apart (three disks on
    three rods), so different states can read the same."""
    check_split(split)
    train = () if split == "train" else split_tasks("train", n_train, n_train, tower_goal_prob)
    picked = draw_tasks(_candidates(split, tower_goal_prob), n, "state_signature",
                        exclude={t.metadata["signature"] for t in train})
    return tuple(dataclasses.replace(t, task_id=f"hanoi/{split}/{i:04d}") for i, t in enumerate(picked))


def zlib_seed(text: str) -> int:
    return int(hashlib.sha1(f"hanoi|{text}".encode()).hexdigest()[:8], 16)


# ------------------------------------------------------------------------------------ the world
class HanoiWorld(TabletopWorld):
    """The tabletop world with rod pads and disks instead of blocks and bowls."""

    def build_hanoi(self, colours: Sequence[str], start: State) -> None:
        from groundplan.envs.tabletop.world import Layout

        self.build(Layout((), (), {}))  # plane, Panda, nothing else
        c = self.cid
        for rx, ry in RODS:
            pad_col = pb.createCollisionShape(pb.GEOM_CYLINDER, radius=0.05, height=PAD_HEIGHT, physicsClientId=c)
            pad_vis = pb.createVisualShape(pb.GEOM_CYLINDER, radius=0.05, length=PAD_HEIGHT,
                                           rgbaColor=[0.45, 0.35, 0.25, 1], physicsClientId=c)
            pb.createMultiBody(0, pad_col, pad_vis, [rx, ry, PAD_HEIGHT / 2], physicsClientId=c)
            pole_vis = pb.createVisualShape(pb.GEOM_CYLINDER, radius=0.004, length=0.12,
                                            rgbaColor=[0.45, 0.35, 0.25, 1], physicsClientId=c)
            pb.createMultiBody(0, -1, pole_vis, [rx, ry, 0.06], physicsClientId=c)  # visual only
        n = len(colours)
        heights = [0] * len(RODS)
        for d in reversed(range(n)):  # largest first, so each rod's stack is built bottom up
            r = start[d]
            z = PAD_HEIGHT + DISK_HALF * (2 * heights[r] + 1)
            heights[r] += 1
            radius = DISK_RADII[d]
            col = pb.createCollisionShape(pb.GEOM_CYLINDER, radius=radius, height=2 * DISK_HALF, physicsClientId=c)
            vis = pb.createVisualShape(pb.GEOM_CYLINDER, radius=radius, length=2 * DISK_HALF,
                                       rgbaColor=[*COLOURS[colours[d]], 1], physicsClientId=c)
            body = pb.createMultiBody(0.05, col, vis, [RODS[r][0], RODS[r][1], z], physicsClientId=c)
            pb.changeDynamics(body, -1, lateralFriction=0.9, physicsClientId=c)
            self._add(f"{colours[d]} disk", body)
        self.step(60)


class HanoiEnv(RavensTaskEnv):
    """Tower of Hanoi on the tabletop; one PyBullet DIRECT client per instance."""

    name = "hanoi"
    families = FAMILIES
    done_skill = DONE
    start_state_schema = HanoiStartState
    capabilities = EnvCapabilities(measures=("picks", "sim_steps", "illegal_moves"), symbolic_model=True,
                                   fixed_actions=True)

    def __init__(self, **options: Any) -> None:
        self.config: HanoiConfig = validate_options(HanoiConfig, options, "hanoi env options")
        self.world = HanoiWorld()
        self._task: Task | None = None
        self.colours: list[str] = []
        self._rng = np.random.default_rng(0)
        self._stats: dict[str, float] = {}

    def tasks(self, families: Sequence[str] | None = None) -> list[Task]:
        self._check_families(families)
        c = self.config
        tasks = split_tasks(c.split, c.split_size, c.train_size, c.tower_goal_prob)
        return [t for t in tasks if families is None or t.family in families]

    def reset(self, task: Task, seed: int) -> Observation:
        st = task.start_state or {}
        self.colours = list(st["colours"])
        self.world.build_hanoi(self.colours, tuple(st["rods"]))
        self._task = task
        self._rng = np.random.default_rng([seed, zlib_seed(task.task_id)])
        self._stats = {"picks": 0, "sim_steps": 0, "illegal_moves": 0}
        return self._observe()

    # ------------------------------------------------------------------------------------ state
    def stacks(self) -> list[list[int]]:
        """Disk indices per rod, bottom first, read from the physics; a disk on no rod is left out."""
        pos = self.world.positions()
        stacks: list[list[tuple[float, int]]] = [[] for _ in RODS]
        for d, colour in enumerate(self.colours):
            x, y, z = pos[f"{colour} disk"]
            dists = [math.dist((x, y), rod) for rod in RODS]
            r = int(np.argmin(dists))
            if dists[r] < ROD_RADIUS:
                stacks[r].append((z, d))
        return [[d for _, d in sorted(s)] for s in stacks]

    def rod_state(self) -> State | None:
        """The rod of each disk, or None when a disk is on no rod."""
        where = {d: r for r, s in enumerate(self.stacks()) for d in s}
        return tuple(where[d] for d in range(len(self.colours))) if len(where) == len(self.colours) else None

    def skills(self) -> list[str]:
        return skill_labels(self.colours)

    # ------------------------------------------------------------------------------------ Env API
    def execute(self, skill: str) -> StepResult:
        if self._task is None:
            raise RuntimeError("call reset(task, seed) first")
        s = normalise_skill(skill)
        if s == DONE:
            return StepResult(True, "done", self._observe())
        m = _ACTION.match(s)
        if m is None or m.group(1) not in self.colours or not 1 <= int(m.group(2)) <= len(RODS):
            return self._fail(skill, "not an action here (put the <colour> disk in rod <1-3>)", admissible=False)
        d, r = self.colours.index(m.group(1)), int(m.group(2)) - 1
        stacks = self.stacks()
        src = next((i for i, st in enumerate(stacks) if d in st), None)
        colour = self.colours[d]
        if src is None:
            return self._fail(skill, f"the {colour} disk is on no rod")
        if src == r:
            return self._fail(skill, f"the {colour} disk is already in rod {r + 1}")
        if stacks[src][-1] != d:
            return self._fail(skill, f"the {colour} disk is under the {self.colours[stacks[src][-1]]} disk")
        if stacks[r] and stacks[r][-1] < d:
            return self._fail(skill, f"the {colour} disk cannot go on the smaller {self.colours[stacks[r][-1]]} disk")
        name = f"{colour} disk"
        tz = PAD_HEIGHT + DISK_HALF * (2 * len(stacks[r]) + 1)
        grasp_z = self.world.position(name)[2] + 0.003  # fingertips on this disk only, not the one below
        result = self._pick_and_place(name, self.world.position(name), RODS[r], tz, grasp_z=grasp_z)
        after = self.stacks()
        ok = bool(after[r]) and after[r][-1] == d
        info = {"disk": colour, "rod": r + 1, "grasped": result.grasped, "sim_steps": result.sim_steps,
                "final_xyz": [round(v, 4) for v in self.world.position(name)]}
        return StepResult(ok, self._landed(name, f"rod {r + 1}", ok, result.grasped), self._observe(), info=info)

    def symbolic_model(self, task: Task) -> "HanoiRules":
        return HanoiRules(task)

    def check_goal(self) -> GoalResult:
        if self._task is None:
            raise RuntimeError("call reset(task, seed) first")
        goal = self._task.goal
        text = instruction(goal, self.colours)
        state = self.rod_state()
        ok = state is not None and goal_holds(goal, state)
        return GoalResult(ok, [text] if ok else [], [] if ok else [text])

    def _fail(self, skill: str, reason: str, admissible: bool = True) -> StepResult:
        self._stats["illegal_moves"] += 1
        return super()._fail(skill, reason, admissible)

    def _observe(self) -> Observation:
        stacks = self.stacks()
        return Observation(skills=self.skills(), state={"stacks": stacks, "colours": list(self.colours)},
                           text=describe(self.colours, stacks), images=self._images())


class HanoiRules:
    """The puzzle's rules for one task (:class:`~groundplan.envs.base.SymbolicModel`): the state is the rod
    of each disk, a move is legal as in :func:`legal_moves` (top disk only, never onto a smaller disk or
    its own rod), the same checks :meth:`HanoiEnv.execute` makes on the physical state."""

    def __init__(self, task: Task) -> None:
        st = task.start_state or {}
        self.colours: list[str] = list(st["colours"])
        self.start: State = tuple(int(r) for r in st["rods"])
        self.goal = task.goal

    def initial(self) -> State:
        return self.start

    def step(self, state: State, action: str) -> State | None:
        s = normalise_skill(action)
        if s == DONE:
            return state
        m = _ACTION.match(s)
        if m is None or m.group(1) not in self.colours:
            return None
        disk, rod = self.colours.index(m.group(1)), int(m.group(2)) - 1
        if (disk, rod) not in legal_moves(state, len(RODS)):
            return None
        return tuple(rod if i == disk else r for i, r in enumerate(state))

    def actions(self, state: State) -> list[str]:
        """The env lists every disk-rod move in every state (:meth:`HanoiEnv.skills`), legal or not."""
        return skill_labels(self.colours)

    def goal_holds(self, state: State) -> bool:
        return goal_holds(self.goal, state)


class HanoiOracle:
    """Optimal expert: BFS from the physical rod state after every move (so a slipped disk is replanned)."""

    name = "hanoi_optimal"

    def __init__(self, env: HanoiEnv) -> None:
        self.env = env

    def act(self, task: Task, obs: Observation) -> str:
        state = self.env.rod_state()
        if state is None or goal_holds(task.goal, state):
            return DONE
        d, r = solve(state, task.goal)[0]
        return action_label(self.env.colours[d], r)
