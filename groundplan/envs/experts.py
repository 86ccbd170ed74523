"""Expert oracles per env, for SayCanPay's data collection (Sec. 4: "we collect N expert trajectories
for each environment using an oracle planner") and its prompt examples.

An expert is built as ``EXPERTS.get(env_name)(env)`` on a live env and asked ``act(task, obs)`` for
the next high-level action after each step (closed loop, so physics outcomes are taken into account);
it returns the env's done skill when the goal holds. Experts read simulator state and the task's goal:
they are oracles, never planners.
"""
from __future__ import annotations

from typing import Any, Protocol

from groundplan.core.registry import Registry
from groundplan.core.types import Observation, Task


class Expert(Protocol):
    #: label recorded as the trajectory's ``source`` (an expert that falls back to another one per
    #: episode also sets ``source`` after its first ``act`` of an episode)
    name: str

    def act(self, task: Task, obs: Observation) -> str:
        """The next action label (the env's done skill when finished)."""


EXPERTS: Registry[Any] = Registry("expert")
EXPERTS.register_lazy("babyai", "groundplan.envs.babyai.oracle:BabyAIOracle")
# minigrid's BabyAIBot lifted to high-level actions, with the oracle as fallback (opt-in: source.expert)
EXPERTS.register_lazy("babyai_bot", "groundplan.envs.babyai.bot:BabyAIBotExpert")
EXPERTS.register_lazy("hanoi", "groundplan.envs.tabletop.hanoi:HanoiOracle")
EXPERTS.register_lazy("blocks_bowls", "groundplan.envs.tabletop.blocks_bowls:BlocksBowlsOracle")
EXPERTS.register_lazy("virtualhome_scp", "groundplan.envs.virtualhome.saycanpay:ReferenceProgramExpert")
