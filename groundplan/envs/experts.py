"""Expert oracles per env, for SayCanPay's data collection (Sec. 4: "we collect N expert trajectories
for each environment using an oracle planner") and its prompt examples.

An expert is built as ``EXPERTS.get(env_name)(env)`` on a live env and asked ``act(task, obs)`` for
the next high-level action after each step (closed loop, so physics outcomes are taken into account);
it returns the env's done skill when the goal holds. Experts read simulator state and the task's goal:
they are oracles, never planners. Where the env's own task carries a reference plan that solves it
noise-free (the kitchen's, VirtualHome's programs), :class:`ReferencePlanExpert` plays it.
"""
from __future__ import annotations

from typing import Any, Protocol

from groundplan.core.registry import Registry
from groundplan.core.types import Observation, Task
from groundplan.envs.base import Env


class Expert(Protocol):
    #: label recorded as the trajectory's ``source`` (an expert that falls back to another one per
    #: episode also sets ``source`` after its first ``act`` of an episode)
    name: str

    def act(self, task: Task, obs: Observation) -> str:
        """The next action label (the env's done skill when finished)."""


class ReferencePlanExpert:
    """Expert: the task's ``reference_plan``, one step per :meth:`act`, then the env's done skill.

    Open loop, so it fits envs whose execution has no noise to react to (the kitchen's language mode,
    SayCan App. C.2; VirtualHome's programs): SayCanPay's expert trajectories (Sec. 4) are then the
    reference plans themselves. A plan that ends with the done skill ends there. The position in the plan
    starts over for a new task and after the done skill was given (every episode of an expert ends with
    it), so several seeds of one task each replay the whole plan.
    """

    #: the ``source`` label of the rows it produces (a per-env label is passed to the constructor)
    name = "reference_plan"

    def __init__(self, env: Env, name: str | None = None) -> None:
        self.env = env
        if name is not None:
            self.name = name
        self._task: str | None = None
        self._i = 0

    def act(self, task: Task, obs: Observation) -> str:
        """The plan's next step, or the done skill once it is used up."""
        if task.task_id != self._task:
            self._task, self._i = task.task_id, 0
        plan = task.reference_plan or ()
        action = plan[self._i] if self._i < len(plan) else self.env.done_skill
        self._i += 1
        if action == self.env.done_skill:
            self._i = 0
        return action


EXPERTS: Registry[Any] = Registry("expert")
EXPERTS.register_lazy("babyai", "groundplan.envs.babyai.oracle:BabyAIOracle")
# minigrid's BabyAIBot lifted to high-level actions, with the oracle as fallback (opt-in: source.expert)
EXPERTS.register_lazy("babyai_bot", "groundplan.envs.babyai.bot:BabyAIBotExpert")
EXPERTS.register_lazy("hanoi", "groundplan.envs.tabletop.hanoi:HanoiOracle")
EXPERTS.register_lazy("blocks_bowls", "groundplan.envs.tabletop.blocks_bowls:BlocksBowlsOracle")
EXPERTS.register_lazy("virtualhome_scp", "groundplan.envs.virtualhome.saycanpay:reference_program_expert")
EXPERTS.register_lazy("kitchen", "groundplan.envs.experts:ReferencePlanExpert")
