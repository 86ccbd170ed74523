"""Expert oracles per env, for SayCanPay's data collection (Sec. 4: "we collect N expert trajectories
for each environment using an oracle planner") and its prompt examples.

An expert is built as ``EXPERTS.get(env_name)(env)`` on a live env and asked ``act(task, obs)`` for
the next high-level action after each step (closed loop, so physics outcomes are taken into account);
it returns the env's done skill when the goal holds. Experts read simulator state and the task's goal:
they are oracles, never planners. Where the env's own task carries a reference plan that solves it
noise-free (the kitchen's, VirtualHome's programs), :class:`ReferencePlanExpert` plays it.

Experts are the simulator side, like the envs they drive: they read the task and the simulator directly,
not through the planners' gate (:mod:`groundplan.core.truth`). What each registered expert reads is declared
beside its registration (:data:`EXPERT_DECLARATIONS`), and the planner that plays it in data collection
(:class:`~groundplan.rollout.trajectory.ExpertPlanner`) reports that declaration, so its trajectories'
traces record it.
"""
from __future__ import annotations

from typing import Any, Protocol, Sequence

from groundplan.core.registry import Registry
from groundplan.core.truth import OracleDeclaration, Truth
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

    def plan(self, task: Task) -> Sequence[str]:
        """The skills to play: the task's reference plan (an env whose plan is stored in another notation
        says how to read it as skills)."""
        return task.reference_plan or ()

    def act(self, task: Task, obs: Observation) -> str:
        """The plan's next step, or the done skill once it is used up."""
        if task.task_id != self._task:
            self._task, self._i = task.task_id, 0
        plan = self.plan(task)
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
EXPERTS.register_lazy("virtualhome", "groundplan.envs.experts:ReferencePlanExpert")
EXPERTS.register_lazy("virtualhome_eai", "groundplan.envs.virtualhome.eai.env:GoldProgramExpert")


def _expert(reads: set[Truth], wording: str) -> OracleDeclaration:
    return OracleDeclaration(name="expert", reads=frozenset(reads), wording=wording)


#: what each registered expert reads of the simulator's truth (SayCanPay Sec. 4's "oracle planner"); every
#: name in :data:`EXPERTS` has one, so collected rows and their traces say what their expert saw
EXPERT_DECLARATIONS: dict[str, OracleDeclaration] = {
    "babyai": _expert({Truth.GOAL, Truth.STATE}, "the minigrid level's grid (walls, doors, keys, objects) and the "
                      "task's goal, routed to by a cost-weighted search (closed loop)"),
    "babyai_bot": _expert({Truth.GOAL, Truth.STATE, Truth.START_STATE}, "minigrid's BabyAIBot plan from the "
                          "task's start state and mission, checked by replay, else the route-finding oracle"),
    "hanoi": _expert({Truth.GOAL, Truth.STATE}, "the physical rod state and the task's goal, solved by search "
                     "after every move"),
    "blocks_bowls": _expert({Truth.GOAL, Truth.STATE}, "the bowls' true contents and the task's goal colours"),
    "virtualhome_scp": _expert({Truth.REFERENCE_PLAN}, "the task's reference program, played open loop"),
    "kitchen": _expert({Truth.REFERENCE_PLAN}, "the task's reference plan, played open loop (SayCan App. C.2)"),
    "virtualhome": _expert({Truth.REFERENCE_PLAN}, "the task's program (its human-written script), played open loop"),
    "virtualhome_eai": _expert({Truth.REFERENCE_PLAN, Truth.START_STATE}, "the task's gold program (EAI's dataset, "
                               "named in the task's start state), played open loop"),
}
#: an expert without an entry (one built by hand): it may read any of the task's truth and the simulator's
ANY_EXPERT = _expert({Truth.GOAL, Truth.REFERENCE_PLAN, Truth.STATE, Truth.START_STATE},
                     "an expert oracle reading the simulator and the task's goal or reference plan")


def expert_declaration(name: str | None) -> OracleDeclaration:
    """What the registered expert ``name`` reads (:data:`EXPERT_DECLARATIONS`); :data:`ANY_EXPERT` for None."""
    if name is None:
        return ANY_EXPERT
    if name not in EXPERT_DECLARATIONS:
        EXPERTS.get(name)  # an unknown name lists the registered ones
        raise KeyError(f"expert '{name}' declares nothing it reads; add it to EXPERT_DECLARATIONS")
    return EXPERT_DECLARATIONS[name]
