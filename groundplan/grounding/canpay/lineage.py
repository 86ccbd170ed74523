"""What a trained Can/Pay model, or a few-shot prompt, has read: its lineage.

A test set is only a test set against what the model read before the test: SayCanPay's Sec. 6 splits
are meant to measure generalisation to unseen tasks, and Can/Pay read ``<Goal> g <Initial State> o0``
(App. B.1) of every train and validation trajectory, the Say model the prompt's few-shot examples
(App. A.1). So a model carries, beside its weights, the visible signature
(:func:`~groundplan.envs.splits.visible_signature`: instruction and first observation) and the
normalised instruction of every task it was trained or validated on (``lineage.json`` in the model
folder, logged to MLflow with the model), and a prompt's lineage is read from its
``[Goal]``/``[Initial State]`` blocks. The evaluation compares the test tasks with these before any
episode runs (:mod:`groundplan.pipelines.evaluate.lineage`), instead of trusting that the eval config
draws its split the way the collection did.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from groundplan.core.errors import InvalidInputError
from groundplan.envs.splits import instruction_key, visible_signature
from groundplan.grounding.canpay.views import DEFAULT_VIEW

#: the file in a model folder (beside ``canpay.json``) that holds its lineage
LINEAGE_FILE = "lineage.json"
LINEAGE_VERSION = 1

_BLOCK = re.compile(r"^\[Goal\]\s*(?P<goal>.*?)\s*\n\[Initial State\]\s*(?P<obs>.*?)\s*$", re.M)


@dataclass(frozen=True)
class Example:
    """One task a model read before any test: where it came from (``train``, ``validation``, ``prompt``)
    and its keys."""

    role: str
    task_id: str
    signature: str
    instruction: str  # normalised (:func:`~groundplan.envs.splits.instruction_key`)


@dataclass
class Lineage:
    """The examples a model (or prompt) ``source`` read, indexed by visible signature and instruction."""

    source: str
    examples: list[Example] = field(default_factory=list)
    #: the model's goal view (:mod:`~groundplan.grounding.canpay.views`): the examples' keys are of the
    #: viewed instruction, so a test task is keyed through the same view
    goal_view: str = DEFAULT_VIEW

    def by_signature(self) -> dict[str, Example]:
        return {e.signature: e for e in self.examples}

    def by_instruction(self) -> dict[str, Example]:
        return {e.instruction: e for e in self.examples}

    def to_json(self) -> dict:
        return {"version": LINEAGE_VERSION, "source": self.source, "goal_view": self.goal_view,
                "examples": [e.__dict__ for e in self.examples]}

    @classmethod
    def from_json(cls, doc: Mapping, source: str | None = None) -> "Lineage":
        return cls(source or str(doc.get("source", "?")), [Example(**e) for e in doc.get("examples", [])],
                   str(doc.get("goal_view", DEFAULT_VIEW)))


def inherit(lineage: Lineage, base: Lineage) -> Lineage:
    """The lineage of a model trained on ``lineage``'s tasks from weights that already read ``base``'s: what
    the weights have read is both. A task that either trained on stays ``train`` (a validation role in one
    cannot lift it, since a selection sweep may run on validation tasks only); the validation tasks of both
    stay ``validation``."""
    if lineage.goal_view != base.goal_view:
        raise InvalidInputError(f"the base model's lineage ({base.source}) keys tasks through goal view "
                                f"'{base.goal_view}', this run through '{lineage.goal_view}': one lineage cannot "
                                "hold both")
    both = [*base.examples, *lineage.examples]
    trained = [e for e in both if e.role == "train"]
    sigs, instrs = {e.signature for e in trained}, {e.instruction for e in trained}
    kept = trained + [e for e in both if e.role != "train" and e.signature not in sigs and e.instruction not in instrs]
    out: dict[tuple[str, str], Example] = {}
    for e in kept:
        out.setdefault((e.role, e.signature), e)
    return Lineage(lineage.source, list(out.values()), lineage.goal_view)


def example(role: str, task_id: str, goal: str, first_observation: str) -> Example:
    """An :class:`Example` from what a model reads of a task before acting."""
    return Example(role, task_id, visible_signature(goal, first_observation), instruction_key(goal))


def trajectories_lineage(source: str, by_role: Mapping[str, Iterable], goal_view: str = DEFAULT_VIEW) -> Lineage:
    """The lineage of a model trained on ``by_role`` (``{"train": [...], "validation": [...]}`` of
    :class:`~groundplan.grounding.canpay.data.Trajectory`, their goals already through ``goal_view``),
    one example per task and role."""
    out: dict[tuple[str, str], Example] = {}
    for role, trajs in by_role.items():
        for t in trajs:
            e = example(role, t.task_id or t.traj_id, t.goal, t.init_obs)
            out.setdefault((role, e.signature), e)
    return Lineage(source, list(out.values()), goal_view)


def prompt_lineage(source: str, text: str) -> Lineage:
    """The examples of an App. A.1 few-shot prompt (its ``[Goal] g`` / ``[Initial State] o0`` blocks);
    an empty lineage for a prompt of another format."""
    return Lineage(source, [example("prompt", f"example {i + 1}", m["goal"], m["obs"])
                            for i, m in enumerate(_BLOCK.finditer(text))])


def save_lineage(folder: str | Path, lineage: Lineage) -> Path:
    path = Path(folder) / LINEAGE_FILE
    path.write_text(json.dumps(lineage.to_json(), indent=1))
    return path


def load_lineage(folder: str | Path, source: str) -> Lineage | None:
    """The lineage saved in a model folder, or None when the model was saved without one."""
    path = Path(folder) / LINEAGE_FILE
    if not path.exists():
        return None
    return Lineage.from_json(json.loads(path.read_text()), source)


def required_lineage(folder: str | Path, source: str, why: str, error: type[Exception] = InvalidInputError) -> Lineage:
    """The lineage saved in a model folder; a model without one is refused (``error``), naming ``source``
    and ``why`` its training tasks must be known."""
    lineage = load_lineage(folder, source)
    if lineage is None:
        raise error(f"{source} carries no lineage (no {LINEAGE_FILE} in its folder), so {why}")
    return lineage


class TrainedModels:
    """Declared by the typed options of an affordance source that loads trained Can/Pay models, so the
    evaluation can read their lineage without building the source."""

    def trained_models(self) -> dict[str, str]:
        """Role (``can``, ``pay``) → model URI or folder, for the models these options load."""
        raise NotImplementedError

    def models_tracking_uri(self) -> str | None:
        """The MLflow URI that resolves ``models:/`` URIs of :meth:`trained_models`."""
        raise NotImplementedError


class PromptExamples:
    """Declared by the typed options of a planner whose prompt holds few-shot examples of tasks."""

    def prompt_lineage(self) -> Lineage:
        raise NotImplementedError


def overlap(lineage: Lineage, keys: Sequence[tuple[str, str, str]], by: str) -> list[tuple[str, Example]]:
    """(test task id, the lineage example it repeats) for every test task whose key the lineage holds.
    ``keys`` are (task id, visible signature, normalised instruction); ``by`` is ``"signature"`` or
    ``"instruction"`` (an env split by task name: any shared instruction counts)."""
    index = lineage.by_instruction() if by == "instruction" else lineage.by_signature()
    return [(tid, index[k]) for tid, sig, instr in keys
            if (k := instr if by == "instruction" else sig) in index]
