"""One episode → one trajectory row (:data:`~groundplan.datasets.schema.TRAJECTORY_SCHEMA`), played by
:func:`~groundplan.rollout.episode.run_episode`, the loop every evaluation runs too.

The actions come from an expert oracle (:class:`ExpertPlanner`; SayCanPay Sec. 4: "we collect N expert
trajectories for each environment using an oracle planner") or from a registered planner (on-policy data:
its mistakes become feasibility labels). :class:`TrajectoryRecorder` wraps either and records what each
decision was shown (the observation text and the listed actions); the trace gives the rest.

Rewards follow the paper's sparse convention (Sec. 4, "r = 1 for all expert trajectories"): 1.0 on the
last step when the goal holds at the end, else 0; the Pay trainer discounts backwards from it. The done
decision is recorded as the last action, the env's done skill (the paper's plans end with it, e.g. "done
picking up"), and is not executed. Collection judges the goal only (``run_episode(goal_only=True)``): the
reward needs no noise-free replay of the plan and no env measures.

An env or planner error, which ``run_episode`` records in the trace, is raised as
:class:`EpisodeFailed` carrying that text (an :class:`~groundplan.core.errors.InfrastructureError` when
infrastructure failed), so collection records the trajectory as failed and leaves it to the next run.
"""
from __future__ import annotations

from typing import Any

from groundplan.core.errors import InfrastructureError
from groundplan.core.truth import OracleDeclaration, Truth
from groundplan.core.types import Decision, Observation, StepResult, Task
from groundplan.envs.base import ActionModel, Env, feasible_in, listed_actions, require_feasibility_labels
from groundplan.envs.experts import ANY_EXPERT, Expert
from groundplan.planners.base import EpisodeProgress, Planner
from groundplan.rollout.episode import run_episode
from groundplan.rollout.traces import EpisodeTrace


class EpisodeFailed(RuntimeError):
    """The env or the planner raised during a collected episode; the message is the trace's error
    (``"<ExceptionType>: <message> (<where>)"``)."""


class ExpertPlanner(EpisodeProgress, Planner):
    """An expert oracle as a :class:`Planner`, so the episode loop plays it: each decision is the expert's
    ``act``, and the env's done skill ends the episode. ``declaration`` is what the expert reads (its entry
    in :data:`~groundplan.envs.experts.EXPERT_DECLARATIONS`; default: any of the task's truth and the
    simulator's): the expert reads it directly, as the simulator side, and the planner reports it."""

    def __init__(self, expert: Expert, done_skill: str, declaration: OracleDeclaration = ANY_EXPERT) -> None:
        self.expert = expert
        self.done_skill = done_skill
        self.declaration = declaration
        self.name = expert.name
        self._task: Task | None = None
        self._history: list[str] = []

    @property
    def declarations(self) -> tuple[OracleDeclaration, ...]:
        """An expert reads the simulator and the task's goal or reference plan: it is an oracle."""
        return (self.declaration,)

    def reset(self, task: Task, observation: Observation, seed: int = 0) -> None:
        self._task = task
        self._begin_episode()

    def next_step(self, observation: Observation, last: StepResult | None) -> Decision:
        self._check_running()
        action = self.expert.act(self._task, observation)
        done = action == self.done_skill
        if done:
            self._finished = True
        else:
            self._history.append(action)
        return Decision(skill=action, done=done)


#: what collection reads when it labels each listed action's feasibility (``label_listed``)
FEASIBILITY_LABELS = OracleDeclaration(
    "feasibility labels", frozenset({Truth.STATE}),
    "collection labels each listed action with the simulator's own precondition check in that state "
    "(training labels for a Can model of feasibility, as SayCan's value functions learn from the robot's outcomes; "
    "Sec. 3); the planner that acts reads nothing of it")


class TrajectoryRecorder(Planner):
    """Wraps the planner that acts and records, at each decision, the observation text and the actions it
    was shown. A step listing more than ``max_admissible`` actions records an empty list (VirtualHome
    lists thousands per scene; the env, not the dataset, is their source). With ``label_listed`` it also
    records whether each of those actions was feasible there, by the simulator's own check (the
    observation's :class:`~groundplan.envs.base.FeasibilityCheck`; the env must declare
    ``feasibility_labels``); the env's ``done_skill`` is feasible everywhere, as the env runs it.

    The wrapped planner is given no action model (``use_action_model`` is not passed on): collected rows
    are what the planner does from the observations alone, as collection has always played it."""

    def __init__(self, planner: Planner, max_admissible: int | None = None, label_listed: bool = False,
                 done_skill: str = "done") -> None:
        self.planner = planner
        self.max_admissible = max_admissible
        self.label_listed = label_listed
        self.done_skill = done_skill
        self.name = planner.name
        self.max_steps = planner.max_steps
        self.init_obs = ""
        self.observations: list[str] = []
        self.admissible: list[list[str]] = []
        self.listed_feasible: list[list[bool]] = []

    def reset(self, task: Task, observation: Observation, seed: int = 0) -> None:
        self.init_obs = observation.text
        self.observations, self.admissible, self.listed_feasible = [], [], []
        self.planner.reset(task, observation, seed=seed)

    def next_step(self, observation: Observation, last: StepResult | None) -> Decision:
        self.observations.append(observation.text)
        allowed = listed_actions(observation)
        kept = allowed if self.max_admissible is None or len(allowed) <= self.max_admissible else []
        self.admissible.append(kept)
        if self.label_listed:
            self.listed_feasible.append(feasible_in(observation, kept, self.done_skill))
        return self.planner.next_step(observation, last)

    def use_action_model(self, model: ActionModel | None) -> None:
        return None

    @property
    def declarations(self) -> tuple[OracleDeclaration, ...]:
        return self.planner.declarations + ((FEASIBILITY_LABELS,) if self.label_listed else ())

    @property
    def prompt(self) -> str:
        return self.planner.prompt


def run_trajectory(env: Env, task: Task, seed: int, planner: Planner, *, source: str, split: str, traj_id: str,
                   max_steps: int = 30, max_admissible: int | None = None, label_listed: bool = False) -> dict[str, Any]:
    """Play ``task`` from ``seed`` with ``planner`` (an :class:`ExpertPlanner` or a registered planner) and
    return its row; raises :class:`EpisodeFailed` (or :class:`InfrastructureError`) when the episode
    recorded an error. ``label_listed``: label each listed action's feasibility (:class:`TrajectoryRecorder`);
    an env that does not declare ``feasibility_labels`` is refused before the episode."""
    if label_listed:
        require_feasibility_labels(env)
    recorder = TrajectoryRecorder(planner, max_admissible, label_listed, env.done_skill)
    trace = run_episode(recorder, env, task, seed, max_steps=max_steps, episode_id=traj_id, goal_only=True)
    if trace.error is not None:
        if trace.infrastructure_failure:
            raise InfrastructureError(trace.error)
        raise EpisodeFailed(trace.error)
    return trajectory_row(trace, recorder, env.done_skill, source=source, split=split, traj_id=traj_id)


def trajectory_row(trace: EpisodeTrace, recorder: TrajectoryRecorder, done_skill: str, *, source: str, split: str,
                   traj_id: str) -> dict[str, Any]:
    """The row of a finished episode: actions, feasibility and outcome from the trace, what each decision was
    shown from the recorder."""
    steps = trace.steps
    actions = [done_skill if s.done else s.chosen for s in steps]
    rewards = [0.0] * len(actions)
    if trace.execution_success and rewards:
        rewards[-1] = 1.0
    row = {
        "traj_id": traj_id, "env": trace.env, "split": split, "task_id": trace.task_id, "goal": trace.instruction,
        "init_obs": recorder.init_obs, "actions": actions, "observations": list(recorder.observations),
        "feasible": [True if s.done else bool(s.success) for s in steps], "rewards": rewards,
        "success": bool(trace.execution_success), "source": source, "admissible": list(recorder.admissible),
    }
    if recorder.label_listed:  # an optional column (the schema stores null without it)
        row["listed_feasible"] = list(recorder.listed_feasible)
    return row
