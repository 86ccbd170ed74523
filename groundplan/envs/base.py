"""Environment interface shared by every simulator (docs/architecture.md, "Environments").

gymnasium-style: ``reset(task, seed)`` gives an observation, ``execute(skill)`` runs one skill given as
text. Each env exposes its skill set (admissible skill labels) and its task set, and declares what else it
can do in :class:`EnvCapabilities`, so callers never probe it with ``getattr``.
"""
from __future__ import annotations

import contextlib
import importlib
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Hashable, Iterator, Literal, Mapping, Protocol, Sequence

from pydantic import ValidationError

from groundplan.core.errors import InvalidInputError
from groundplan.core.types import GoalResult, Observation, StepResult, Task
from groundplan.envs.start_state import StartState, error_lines


class TaskSpecError(InvalidInputError):
    """A goal, start state or reference plan written by a user (a task file) that does not parse.

    ``path`` locates the bad part inside the data the env was given (keys and list indices, e.g.
    ``(1, 0)`` for the first alternative of the second clause), so that
    :func:`groundplan.envs.task_files.load_task_file` can name the line it is on.
    """

    def __init__(self, message: str, path: Sequence[Any] = ()) -> None:
        super().__init__(message)
        self.path: tuple[Any, ...] = tuple(path)


class StartStateError(TaskSpecError):
    """A start state that does not fit its env's :attr:`Env.start_state_schema` (a wrong type, an unknown
    key, a value outside a closed set). ``errors`` holds every problem; ``path`` (the first one's) locates
    it for task files, and the serve API answers 422 naming each field."""

    def __init__(self, errors: Sequence[tuple[tuple[Any, ...], str, str]]) -> None:
        super().__init__("; ".join(f"{field}: {message}" if field else message for _, field, message in errors),
                         errors[0][0] if errors else ())
        #: ``(path, field, message)`` of each problem (:func:`groundplan.envs.start_state.error_lines`)
        self.errors: list[tuple[tuple[Any, ...], str, str]] = list(errors)


@dataclass(frozen=True)
class EnvCapabilities:
    """What an env declares about itself beyond the abstract methods."""

    #: :meth:`Env.check_plan` replays a plan noise-free (SayCan's plan success)
    can_replay: bool = False
    #: names (in :data:`groundplan.core.measures.MEASURES`) that :meth:`Env.episode_metrics` returns
    measures: tuple[str, ...] = ()
    #: the measures its summary table shows instead of plan/execution success (empty: the success table)
    table_measures: tuple[str, ...] = ()
    #: camera names of the frames :meth:`Env.frames` returns (empty: it renders nothing)
    cameras: tuple[str, ...] = ()
    #: :meth:`Env.symbolic_model` gives the env's rules over a small symbolic state (noise-free), so an
    #: oracle can check action sequences without running the simulator (e.g. physics); every symbolic
    #: model is also an action model (:meth:`Env.action_model`)
    symbolic_model: bool = False
    #: :meth:`Env.action_model` predicts, without the goal, which actions the env lists after a sequence of
    #: actions (for an env whose list changes with the state but whose rules are not all symbolic)
    action_model: bool = False
    #: every observation of an episode lists the same actions (skills and admissible mask)
    fixed_actions: bool = False
    #: what a split of this env keeps apart between train and test: ``"signature"`` (instruction and
    #: first observation text, :func:`groundplan.envs.splits.visible_signature`) or ``"instruction"``
    #: (the instruction alone, for an env split by task name); the evaluation's lineage check uses it
    disjoint_by: Literal["signature", "instruction"] = "signature"
    #: where an instruction of one's own (a Serve request without a task id) runs: ``"default"``, the env's
    #: default scene (a task without a start state resets to it); ``"first_task"``, the scene of the env's
    #: first task (its family, start state and metadata, never its goal), for an env whose reset needs a
    #: task's layout (tabletop seeds, Hanoi's rods, a BabyAI level, a VirtualHome program's graph)
    adhoc_scene: Literal["default", "first_task"] = "first_task"
    #: every observation's ``state`` is a :class:`FeasibilityCheck` (the simulator's own precondition check of
    #: an action in that state), so collection can record, for each listed action, whether it was feasible
    #: there: training labels for a Can model of feasibility (``collect``'s ``label_listed``)
    feasibility_labels: bool = False


class ActionModel(Protocol):
    """What a planner that plans ahead of execution may know of an env's rules for one task: the start
    state, each action's effect, and the actions the env lists in a state; never the goal.

    SayCanPay plans offline (Sec. 4: only o_0 is observed) and maps every proposal onto "an exhaustive list
    of admissible actions (feasible and otherwise)" (Sec. 7.1). A decoder that executes step by step
    (Greedy-Action) is offered the list of the state it is in; Beam-Action (Sec. 5.2) advances this model
    along each beam, so at every depth it is offered the list of the state the beam predicts, not the
    first observation's. :meth:`actions` is that list, not a precondition filter: it must equal the env's
    ``Observation.skills`` (masked by ``admissible``) after the same actions, whenever each action
    succeeded or failed as :meth:`step` predicts."""

    def initial(self) -> Hashable:
        """The task's start state."""

    def step(self, state: Hashable, action: str) -> Hashable | None:
        """The state after ``action``, or None when its preconditions fail in ``state`` (the env's failed
        step changes nothing)."""

    def actions(self, state: Hashable) -> list[str]:
        """The actions the env lists in ``state``, in the env's order."""


class FeasibilityCheck(Protocol):
    """The simulator's own precondition check in one state (an env declaring ``feasibility_labels`` puts one
    in ``Observation.state``): whether ``action`` would run there, and the reason when not. It reads the hidden
    state, so only code that declares that truth calls it (collection, to label data; an oracle affordance)."""

    def check(self, action: str) -> tuple[bool, str]:
        """(the action would run now and change the state, the reason when not)."""


def require_feasibility_labels(env: "type[Env] | Env") -> None:
    """Refuse to label listed actions for an env (its class or an instance) that does not declare
    ``feasibility_labels``: its observations carry no :class:`FeasibilityCheck`."""
    if not env.capabilities.feasibility_labels:
        raise InvalidInputError(f"label_listed: env {env.name!r} does not declare feasibility_labels (its "
                                "observations carry no precondition check to label the listed actions with)")


def feasible_in(observation: Observation, actions: Sequence[str], done_skill: str) -> list[bool]:
    """Whether each of ``actions`` would run in ``observation``'s state, by the simulator's own check (the state
    is a :class:`FeasibilityCheck` where the env declares ``feasibility_labels``); the env's ``done_skill`` is
    feasible everywhere, as the env runs it. It reads the hidden state: labels for training data or a probe,
    never a planner's input."""
    check: FeasibilityCheck = observation.state
    return [a == done_skill or bool(check.check(a)[0]) for a in actions]


class SymbolicModel(ActionModel, Protocol):
    """An env's rules for one task, without its simulator: the start state, each action's preconditions
    and effect, the actions listed in each state, and the goal. It must agree with the env's own
    ``execute`` / ``check_goal`` when no noise is drawn (each env's tests check that on sampled action
    sequences)."""

    def goal_holds(self, state: Hashable) -> bool:
        """Whether the task's goal holds in ``state``."""


class WithoutGoal:
    """A :class:`SymbolicModel` with its goal check hidden: the :class:`ActionModel` a planner is given,
    so ground truth cannot leak through it (the goal is the task's; the rules are the env's)."""

    def __init__(self, model: SymbolicModel) -> None:
        self._model = model

    def initial(self) -> Hashable:
        return self._model.initial()

    def step(self, state: Hashable, action: str) -> Hashable | None:
        return self._model.step(state, action)

    def actions(self, state: Hashable) -> list[str]:
        return self._model.actions(state)


class FixedActions:
    """The :class:`ActionModel` of an env that lists the same actions in every state of an episode
    (``capabilities.fixed_actions``): one state, and the list of the episode's first observation."""

    def __init__(self, actions: Sequence[str]) -> None:
        self._actions = list(actions)

    def initial(self) -> int:
        return 0

    def step(self, state: Hashable, action: str) -> Hashable:
        return state

    def actions(self, state: Hashable) -> list[str]:
        return list(self._actions)


def listed_actions(observation: Observation) -> list[str]:
    """The actions ``observation`` offers: its skills, masked by ``admissible`` where given."""
    if observation.admissible is None:
        return list(observation.skills)
    return [s for s, ok in zip(observation.skills, observation.admissible) if ok]


class Env(ABC):
    """Base class for environments. Subclasses register with ``groundplan.envs.ENVS``."""

    name: str = "env"
    capabilities: EnvCapabilities = EnvCapabilities()
    #: skill label that ends an episode (SayCan's "done"); executing it changes nothing
    done_skill: str = "done"

    @abstractmethod
    def tasks(self, families: Sequence[str] | None = None) -> list[Task]:
        """The task set, optionally filtered to some families."""

    @abstractmethod
    def reset(self, task: Task, seed: int) -> Observation:
        """Start an episode for ``task``; the same (task, seed) gives the same start state."""

    @abstractmethod
    def execute(self, skill: str) -> StepResult:
        """Run one skill given by its label. An inadmissible label is a failed step, not an exception."""

    @abstractmethod
    def check_goal(self) -> GoalResult:
        """Evaluate the current task's goal on the current state."""

    def episode_metrics(self, task: Task, trace: Any) -> dict[str, float]:
        """Env-specific per-episode metrics computed at the end of an episode from its trace (an
        :class:`~groundplan.rollout.traces.EpisodeTrace`), e.g. executability or LCS against reference plans
        (Zero-Shot Planners, Sec. 4). The summary table averages them per (planner, family)."""
        return {}

    def check_plan(self, task: Task, seed: int, plan: Sequence[str]) -> GoalResult:
        """Plan success: replay ``plan`` from the episode's start state with execution noise turned
        off and check the goal. This operationalises SayCan's "plan success" (the right skills, in a
        valid order) without human raters. Only envs that declare ``capabilities.can_replay``."""
        raise NotImplementedError(f"{type(self).__name__} cannot replay plans")

    def symbolic_model(self, task: Task) -> SymbolicModel:
        """The rules of ``task`` as a :class:`SymbolicModel` (envs that declare
        ``capabilities.symbolic_model``)."""
        raise NotImplementedError(f"{type(self).__name__} has no symbolic model")

    def action_model(self, task: Task) -> ActionModel:
        """The rules of ``task`` a planner may use, as an :class:`ActionModel` (envs that declare
        ``capabilities.action_model`` or ``symbolic_model``); by default the symbolic model with its goal
        check hidden (:class:`WithoutGoal`)."""
        if self.capabilities.symbolic_model:
            return WithoutGoal(self.symbolic_model(task))
        raise NotImplementedError(f"{type(self).__name__} has no action model")

    def close(self) -> None:
        """Release what the env holds (a physics server, a simulator process); nothing by default. Callers
        that build an env for one job close it through :func:`opened`."""

    def frames(self) -> list[Any]:
        """Recent camera frames, ``{"step": int, "camera": str, "rgb": HxWx3 uint8}`` (envs that declare
        ``capabilities.cameras``); the rollout saves the newest after each step."""
        return []

    def default_affordance(self) -> str | None:
        """The registered affordance source that fits this env (``groundplan plan`` uses it), or None."""
        return None

    # -- user tasks (task files, docs/tasks.md) ------------------------------------------------
    #: dotted name of the module that reads this env's task-file language: its ``parse_start_state(data)``,
    #: ``parse_goal(data, start_state)`` and ``parse_reference_plan(steps, start_state)`` serve the methods
    #: below. Imported on first use, so that the env module and its language module (which builds and
    #: checks states with the env's own code) do not import each other. None: no task files.
    goal_language: str | None = None
    #: the shape of the ``Task.start_state`` this env's ``reset`` reads (a
    #: :class:`~groundplan.envs.start_state.StartState` model): checked by :meth:`check_start_state` before
    #: any env is built, by task files and the serve API alike. None: the env takes no start state.
    start_state_schema: ClassVar[type[StartState] | None] = None

    @classmethod
    def check_start_state(cls, data: Any) -> StartState | None:
        """``data`` checked against :attr:`start_state_schema` alone (types, keys, closed sets of values),
        without building the env: the model, or None for None. Raises :class:`StartStateError` naming each
        bad field, or :class:`TaskSpecError` when the env takes no start state."""
        if data is None:
            return None
        if cls.start_state_schema is None:
            raise TaskSpecError(f"the {cls.name} env takes no start_state")
        try:
            return cls.start_state_schema.model_validate(data)
        except ValidationError as exc:
            raise StartStateError(error_lines(exc)) from None

    @property
    def supports_task_files(self) -> bool:
        """Whether :meth:`parse_goal` reads this env's goal language (task files need it)."""
        return self.goal_language is not None

    @classmethod
    def _goal_language(cls) -> Any:
        return importlib.import_module(cls.goal_language) if cls.goal_language else None

    @classmethod
    def parse_start_state(cls, data: Any) -> dict[str, Any] | None:
        """A start state given as plain data (a task file's, an API request's) → the ``Task.start_state``
        this env's ``reset`` reads, validated; None when none is given. First :meth:`check_start_state`
        (the schema), then the goal language's checks that need the env's data (its module's, so no env
        is built for them); an env without a goal language takes the schema's fields as given (null ones
        left out). Raises :class:`TaskSpecError`."""
        checked = cls.check_start_state(data)
        language = cls._goal_language()
        if language is not None:
            return language.parse_start_state(data)
        return None if checked is None else checked.model_dump(exclude_none=True)

    def parse_goal(self, data: Any, start_state: Mapping[str, Any] | None = None) -> Any:
        """A task file's ``goal``, written in this env's goal language (docs/tasks.md), → the ``Task.goal``
        its goal check reads, validated against the start state (objects, locations, predicates).
        Raises :class:`TaskSpecError` naming the bad part. Without a goal language: not supported."""
        language = self._goal_language()
        if language is None:
            raise TaskSpecError(f"the {self.name} env does not read goals from task files")
        return language.parse_goal(data, start_state)

    def parse_reference_plan(self, steps: Any, start_state: Mapping[str, Any] | None = None) -> tuple[str, ...]:
        """A task file's ``reference_plan`` (a list of skill labels) → ``Task.reference_plan``, checked by
        the goal language; without one, only that it is a list of non-empty strings. Raises
        :class:`TaskSpecError`."""
        language = self._goal_language()
        if language is not None:
            return language.parse_reference_plan(steps, start_state)
        if not isinstance(steps, (list, tuple)):
            raise TaskSpecError(f"reference_plan must be a list of skill labels, got {type(steps).__name__}")
        for i, step in enumerate(steps):
            if not isinstance(step, str) or not step.strip():
                raise TaskSpecError(f"reference_plan step {i + 1} must be a non-empty string, got {step!r}", (i,))
        return tuple(s.strip() for s in steps)

    def task_metadata(self, goal: Any, start_state: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Env-specific ``Task.metadata`` for a user task (e.g. the tabletop's reference sub-goals)."""
        return {}


def planning_model(env: Env, task: Task, observation: Observation) -> ActionModel | None:
    """The :class:`ActionModel` ``env`` declares for ``task`` (call it right after ``env.reset(task, ...)``,
    which gave ``observation``): its action model or its symbolic model without the goal; for an env that
    lists fixed actions, those of ``observation``; None when the env declares none."""
    caps = env.capabilities
    if caps.action_model or caps.symbolic_model:
        return env.action_model(task)
    if caps.fixed_actions:
        return FixedActions(listed_actions(observation))
    return None


@contextlib.contextmanager
def opened(env: "Env") -> Iterator["Env"]:
    """``with opened(build_env(...)) as env:``: the env, closed when the block ends, however it ends."""
    try:
        yield env
    finally:
        env.close()
