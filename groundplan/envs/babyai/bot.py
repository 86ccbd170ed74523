"""minigrid's own BabyAI bot as the expert, lifted to SayCanPay's high-level actions.

The bot (``minigrid.utils.baby_ai_bot.BabyAIBot``) solves a level with primitive actions from partial
views. Running it on a private copy of the level and cutting its primitive stream at the events that
change the world — a pickup that fills the hands ("pick up <colour> <type>"), a toggle that changes a
door ("toggle <colour> door"), a drop that empties them ("drop <type> in void") — gives a high-level
plan. The bot's plan fits when it replays through this env's own compiler to the goal (the env's
"drop in void" removes the object, so a bot plan that picks a dropped object up again does not fit);
otherwise the planner-based oracle (:mod:`.oracle`) is used. ``source`` says which one an episode used.
"""
from __future__ import annotations

import contextlib
import io

from groundplan.core.types import Observation, Task
from groundplan.envs.babyai import grid as G
from groundplan.envs.babyai.env import BabyAIEnv
from groundplan.envs.babyai.rules import DONE
from groundplan.envs.babyai.levels import make_level
from groundplan.envs.babyai.oracle import next_action


def lifted_bot_plan(task: Task, max_primitives: int = 1000) -> list[str] | None:
    """The bot's high-level plan for ``task`` (ending with done), or None when it does not finish."""
    from minigrid.utils.baby_ai_bot import BabyAIBot

    st = task.start_state or {}
    level = make_level(task.family, st.get("split", "train"))
    with contextlib.redirect_stdout(io.StringIO()):
        level.reset(seed=int(st["level_seed"]))
    bot = BabyAIBot(level)
    acts = level.actions
    plan: list[str] = []
    action = None
    for _ in range(max_primitives):
        action = bot.replan(action)
        if action == acts.done:
            return None
        held = level.carrying
        fx, fy = level.front_pos
        front = level.grid.get(int(fx), int(fy))
        door_before = (front.is_open, front.is_locked) if front is not None and front.type == "door" else None
        _, _, terminated, _, _ = level.step(action)
        if action == acts.pickup and held is None and level.carrying is not None:
            plan.append(f"pick up {G.name(level.carrying)}")
        elif action == acts.toggle and door_before is not None and (front.is_open, front.is_locked) != door_before:
            plan.append(f"toggle {front.color} door")
        elif action == acts.drop and held is not None and level.carrying is None:
            plan.append(f"drop {held.type} in void")
        if terminated:
            return plan + [DONE]
    return None


class BabyAIBotExpert:
    """Expert for :class:`~groundplan.envs.babyai.env.BabyAIEnv`: the lifted bot plan when it fits,
    else the planner-based oracle (closed loop)."""

    name = "babyai_bot"

    def __init__(self, env: BabyAIEnv) -> None:
        self.env = env
        self._checker = BabyAIEnv(**env.config.model_dump())
        self._task: str | None = None
        self._plan: list[str] | None = None
        self._i = 0
        self.source = self.name

    def _start(self, task: Task) -> None:
        self._task, self._i = task.task_id, 0
        plan = lifted_bot_plan(task)
        if plan is not None and not self._checker.check_plan(task, 0, plan).success:
            plan = None
        self._plan = plan
        self.source = "babyai_bot" if plan is not None else "babyai_oracle"

    def act(self, task: Task, obs: Observation) -> str:
        if task.task_id != self._task or obs.state.get("primitive_steps") == 0 and self._i and obs.state.get("carrying") is None:
            self._start(task)
        if self._plan is None:
            return next_action(self.env.level, task.goal)
        if self._i >= len(self._plan):
            return DONE
        self._i += 1
        return self._plan[self._i - 1]
