"""Simulator truth behind one gate: what an oracle is, how it is declared, and the only way a planner or a
grounding source reaches it.

The repository's rule is that a planner reads no ground truth unless its config asks for an oracle, and
that the planner and the tables then say so. Ground truth is

* a task's ``goal``, ``reference_plan``, ``metadata`` and ``start_state`` (:class:`~groundplan.core.types.Task`);
* the simulator's state in an observation (``Observation.state``: the kitchen's world, the tabletop's true
  poses, VirtualHome's evolving graph), except the fields that model the robot's own sensors
  (:data:`PERCEPTS`: the tabletop's object lister, the house robot's detections and pose);
* the task handed whole to a private copy of the simulator (replaying action sequences from its start
  state, as SayCanPay's oracle Can does).

Whatever reads it declares so, at class level, with an :class:`OracleDeclaration`: what it reads
(:class:`Truth`), a short name (the label's ``"(oracle <name>)"``) and a human wording (the tables'
footnotes). A grounding source declares one (``declaration``); a planner's options declare the ones their
settings turn on (``PlannerOptions.declarations``); a planner reports its own and its source's
(``Planner.declarations``), and every trace records them so the tables print the mark from the
declaration, never from a label.

Planners and grounding sources reach truth only through :func:`read`, which checks the reader's
declarations and raises :class:`~groundplan.core.errors.OracleAccessError` for an undeclared read, and read
percepts through :func:`percept`. The simulator side (envs, their judges and measures, and the experts of
data collection, which declare what they read in :data:`groundplan.envs.experts.EXPERT_DECLARATIONS`) reads
the fields directly: it is the simulator, not a planner.

The gate also holds at run time: :func:`~groundplan.rollout.episode.run_episode` hands a planner (and,
through it, its grounding source) the task and observations through a :class:`Withholding` built from its
declarations, so truth it does not declare is not there to read: a task whose undeclared fields are
:class:`Withheld`, an observation whose state keeps only the percepts, a step result without the env's
record of it. A plugin that reads ``task.goal`` or ``observation.state.positions`` without declaring them
gets :class:`~groundplan.core.errors.OracleAccessError` instead of the truth, the same error the gate raises.

Two kinds of declaration: an *oracle* gives a row information its method does not have (the reference
plan, the simulator's feasibility): its label says ``"(oracle <name>)"`` and tables sort it after the
others; a *stand-in* (``stands_in=True``) reads simulator truth in place of a learned model or a perception
module the paper's method has (SayCan App. C.1's learned value functions computed from the kitchen's state):
the row keeps its method's label and the tables mark it.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import Enum
from typing import Any, Iterable, Iterator, Mapping, Protocol, Sequence, runtime_checkable

from groundplan.core.errors import OracleAccessError
from groundplan.core.types import Observation, StepResult, Task

#: the tables' mark of a row that reads truth as an oracle, and of one whose truth stands in for a model
ORACLE_MARK = "†"
STAND_IN_MARK = "‡"


class Truth(str, Enum):
    """One kind of simulator truth; the value is what a declaration records."""

    GOAL = "goal"
    REFERENCE_PLAN = "reference_plan"
    METADATA = "metadata"
    START_STATE = "start_state"
    STATE = "state"
    SIMULATOR = "simulator"

    @property
    def where(self) -> str:
        """Where this truth lives, as a reader would write it."""
        return {Truth.STATE: "observation.state", Truth.SIMULATOR: "the task in a private simulator"}.get(
            self, f"task.{self.value}")


#: ``Observation.state`` fields that model the robot's own sensors, not the simulator's hidden state, with
#: the sensor each one models; anyone may read them through :func:`percept`. Every other field of the state
#: is simulator truth, behind :func:`read`.
PERCEPTS: Mapping[str, str] = {
    "detected": "the tabletop's object lister: objects seen in the top camera's segmentation, with the env's "
                "miss and false-positive rates (Inner Monologue App. A.1, object recognition)",
    "occluded": "objects the tabletop's lister knows of that no pixel shows now",
    "detections": "the house robot's egocentric detections in its field of view (SayNav Sec. 3.1; ground-truth "
                  "or noisy as the env's perception option says)",
    "pose": "the house robot's pose (odometry)",
    "room": "the room the house robot stands in, with its bounds",
    "out_of_steps": "whether the house simulator's step budget is spent",
}


@dataclass(frozen=True)
class OracleDeclaration:
    """What a planner option, a grounding source or an expert reads of the simulator's truth.

    ``name`` is short: an oracle's label ends in ``"(oracle <name>)"``. ``wording`` says in a sentence what
    is read and why, citing the paper where the reading stands in for one of its parts; the tables print
    it under the table. ``stands_in`` marks truth read in place of a learned model or perception module
    the paper's method has: such a row keeps its label (the tables still mark it); any other declaration
    is an oracle."""

    name: str
    reads: frozenset[Truth]
    wording: str
    stands_in: bool = False

    def __post_init__(self) -> None:
        reads = frozenset(Truth(r) for r in self.reads)
        if not reads:
            raise ValueError(f"the declaration '{self.name}' reads nothing: declare what it reads, or declare none")
        if not self.name.strip() or not self.wording.strip():
            raise ValueError("a declaration needs a name and a wording")
        object.__setattr__(self, "reads", reads)

    @property
    def is_oracle(self) -> bool:
        """Information the row's method does not have (not a stand-in for one of its parts)."""
        return not self.stands_in

    @property
    def mark(self) -> str:
        return STAND_IN_MARK if self.stands_in else ORACLE_MARK

    def to_dict(self) -> dict[str, Any]:
        """The declaration as a trace records it."""
        return {"name": self.name, "reads": sorted(r.value for r in self.reads), "wording": self.wording,
                "stands_in": self.stands_in}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "OracleDeclaration":
        return cls(str(data["name"]), frozenset(Truth(r) for r in data["reads"]), str(data["wording"]),
                   bool(data.get("stands_in", False)))


@runtime_checkable
class Declares(Protocol):
    """A reader of truth: a planner, a grounding source or a helper of one, with its declarations."""

    @property
    def declarations(self) -> tuple[OracleDeclaration, ...]:
        ...


class DeclaresTruth:
    """Base of a reader with one class-level declaration (``declaration``, None for a reader that reads
    no truth): grounding sources and a planner's helpers."""

    #: what this class reads of the simulator's truth; None: nothing
    declaration: OracleDeclaration | None = None

    @property
    def declarations(self) -> tuple[OracleDeclaration, ...]:
        return () if self.declaration is None else (self.declaration,)


def unique(declarations: Iterable[OracleDeclaration | None]) -> tuple[OracleDeclaration, ...]:
    """The declarations given, each once, in order, None left out."""
    return tuple(dict.fromkeys(d for d in declarations if d is not None))


def oracle_names(declarations: Iterable[OracleDeclaration]) -> tuple[str, ...]:
    """The names a label carries: those of the oracles (stand-ins keep the label), each once."""
    return tuple(dict.fromkeys(d.name for d in declarations if d.is_oracle))


def declared_reads(reader: Any) -> frozenset[Truth]:
    """Every truth ``reader``'s declarations name (a reader that declares nothing reads nothing)."""
    if not isinstance(reader, Declares):
        raise OracleAccessError(f"{type(reader).__name__} declares nothing it may read; planners and grounding "
                                "sources declare what they read (groundplan.core.truth.OracleDeclaration)")
    return frozenset(t for d in reader.declarations for t in d.reads)


def read(holder: Task | Observation, what: Truth, reader: Any) -> Any:
    """``what`` of a task (its goal, reference plan, metadata or start state; the task itself for a private
    simulator) or of an observation (its simulator state), for a ``reader`` whose declarations name it.

    The one way a planner or a grounding source reaches simulator truth; an undeclared read raises
    :class:`~groundplan.core.errors.OracleAccessError` naming the reader and the truth, whatever the value."""
    what = Truth(what)
    if what not in declared_reads(reader):
        names = ", ".join(d.name for d in reader.declarations) or "nothing"
        raise OracleAccessError(f"{type(reader).__name__} read {what.where}, which it does not declare (it "
                                f"declares: {names}); reading simulator truth is an oracle: declare it "
                                "(groundplan.core.truth.OracleDeclaration) so its rows are marked")
    if what is Truth.STATE:
        if not isinstance(holder, Observation):
            raise TypeError(f"the simulator state is read from an Observation, not {type(holder).__name__}")
        return holder.state
    if not isinstance(holder, Task):
        raise TypeError(f"{what.where} is read from a Task, not {type(holder).__name__}")
    return holder if what is Truth.SIMULATOR else getattr(holder, what.value)


def percept(observation: Observation, name: str, default: Any = None) -> Any:
    """The field ``name`` of ``observation.state`` when it models a sensor (:data:`PERCEPTS`), else raise
    :class:`~groundplan.core.errors.OracleAccessError`: the rest of the state is the simulator's truth,
    behind :func:`read`. ``default`` when the state has no such field."""
    if name not in PERCEPTS:
        raise OracleAccessError(f"observation.state field '{name}' is simulator state, not a percept (percepts: "
                                f"{', '.join(PERCEPTS)}); read it with groundplan.core.truth.read(observation, "
                                "Truth.STATE, reader) under a declaration")
    state = observation.state
    if state is None:
        return default
    if isinstance(state, Mapping):
        return state.get(name, default)
    return getattr(state, name, default)


def percepts(observation: Observation, names: Sequence[str]) -> dict[str, Any]:
    """The percepts ``names`` of ``observation`` present in its state, as a dict (:func:`percept`)."""
    missing = object()
    out = {name: percept(observation, name, missing) for name in names}
    return {k: v for k, v in out.items() if v is not missing}


# ------------------------------------------------------------------------------------ withheld at run time
#: the task's fields that hold truth, by the truth each one is
TASK_TRUTHS: tuple[Truth, ...] = (Truth.GOAL, Truth.REFERENCE_PLAN, Truth.METADATA, Truth.START_STATE)


def _refused(where: str) -> OracleAccessError:
    return OracleAccessError(f"{where} is withheld from this planner: its declarations do not name it; reading "
                             "simulator truth is an oracle: declare it (groundplan.core.truth.OracleDeclaration) and "
                             "read it with groundplan.core.truth.read")


class Withheld:
    """What a reader finds in place of a truth it did not declare (a task's goal, reference plan, metadata
    or start state): any use of it (truth value, item, attribute, iteration, length, comparison, call) raises
    :class:`~groundplan.core.errors.OracleAccessError` naming the truth, so an undeclared read fails loudly
    instead of planning from a silent None. Only identity (``is None``) and ``repr`` answer."""

    __slots__ = ("where",)

    def __init__(self, where: str) -> None:
        object.__setattr__(self, "where", where)

    def _refuse(self, *_: Any, **__: Any) -> Any:
        raise _refused(object.__getattribute__(self, "where"))

    __bool__ = __len__ = __iter__ = __getitem__ = __contains__ = __eq__ = __ne__ = __call__ = _refuse
    __lt__ = __le__ = __gt__ = __ge__ = __setattr__ = __hash__ = _refuse  # type: ignore[assignment]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # copy, pickle and introspection ask for these; they are not the truth
            raise AttributeError(name)
        self._refuse()

    def __repr__(self) -> str:
        return f"<withheld: {object.__getattribute__(self, 'where')}>"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Withheld, (object.__getattribute__(self, "where"),))


class PerceptView(Mapping[str, Any]):
    """An observation's state as a reader that does not declare it sees it: the :data:`PERCEPTS` the
    state has, copied out (item or attribute), and nothing else; any other field raises
    :class:`~groundplan.core.errors.OracleAccessError`. It holds no reference to the state it was taken
    from, so the hidden fields are not there to reach."""

    __slots__ = ("_percepts",)

    def __init__(self, state: Any) -> None:
        missing = object()
        if isinstance(state, Mapping):
            found = {name: state.get(name, missing) for name in PERCEPTS}
        else:
            found = {name: getattr(state, name, missing) for name in PERCEPTS}
        object.__setattr__(self, "_percepts", {k: v for k, v in found.items() if v is not missing})

    def __getitem__(self, name: str) -> Any:
        if name not in PERCEPTS:
            raise _refused(f"observation.state field '{name}'")
        return object.__getattribute__(self, "_percepts")[name]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise _refused(f"observation.state field '{name}'")

    def __iter__(self) -> Iterator[str]:
        return iter(object.__getattribute__(self, "_percepts"))

    def __len__(self) -> int:
        return len(object.__getattribute__(self, "_percepts"))

    def __repr__(self) -> str:
        return f"PerceptView({object.__getattribute__(self, '_percepts')!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (PerceptView, (dict(object.__getattribute__(self, "_percepts")),))


@dataclass(frozen=True)
class Withholding:
    """What a reader with the declared ``reads`` is handed of an episode: the episode loop passes the task,
    each observation and each step result through it, so the run-time gate matches :func:`read`'s.

    * the task: a copy whose fields of undeclared truths are :class:`Withheld` (id, instruction and family
      stay: the instruction is what a planner plans for). A reader that declares ``SIMULATOR`` is handed
      the task whole, since a private simulator replays it from all of it (it still reads its goal only
      under a declaration, through :func:`read`).
    * an observation, unless ``STATE`` is declared: the same skills, text, images and admissible mask,
      its state a :class:`PerceptView` (the robot's own sensors, :data:`PERCEPTS`).
    * a step result, unless ``STATE`` is declared: its success and feedback text, its observation as
      above, and no ``info`` (the env's record of the step for the trace, e.g. the tabletop's true final
      pose of the placed block)."""

    reads: frozenset[Truth]

    @classmethod
    def of(cls, reader: Any) -> "Withholding":
        """The withholding of ``reader``'s declarations (one that declares nothing is handed no truth)."""
        return cls(declared_reads(reader))

    def task(self, task: Task) -> Task:
        hidden = {t.value: Withheld(t.where) for t in TASK_TRUTHS if t not in self.reads}
        if Truth.SIMULATOR in self.reads or not hidden:
            return task
        return dataclasses.replace(task, **hidden)

    def observation(self, observation: Observation) -> Observation:
        if Truth.STATE in self.reads or observation.state is None:
            return observation
        return dataclasses.replace(observation, state=PerceptView(observation.state))

    def step(self, result: StepResult | None) -> StepResult | None:
        if result is None or Truth.STATE in self.reads:
            return result
        return dataclasses.replace(result, observation=self.observation(result.observation), info={})
