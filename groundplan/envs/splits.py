"""Model-visible task signatures, so that no test or validation task repeats a train task in what the
models read before they act.

SayCanPay's Can and Pay models read ``<Goal> g <Initial State> o0 <Step 1> a1 ... <NXT> a_t`` (App. B.1),
its Say model reads few-shot train trajectories (App. A.1), and every planner here sees the instruction
and the observation text. Two tasks alike in goal text and first observation text are one question to
all of them, however much their hidden state or their expert plan differs (grid bytes, millimetre positions,
another program file of the same steps). Splits deduplicated on hidden state therefore still held test
tasks that were train tasks to the models, which measures recall, not the generalisation of Sec. 6.
Every split is deduplicated on :func:`visible_signature` instead: the envs draw their tasks through
:func:`draw_tasks`, and the Can/Pay train/validation split groups trajectories by it.
"""
from __future__ import annotations

import hashlib
from typing import Collection, Iterable, Literal, Sequence, get_args

from groundplan.core.errors import InvalidInputError
from groundplan.core.types import Task

#: SayCanPay's three splits (Sec. 6): train (Can/Pay data and few-shot examples), test (seen task
#: kinds), test-generalize (unseen objects, colours or sizes); the field type of every env that has them
SayCanPaySplit = Literal["train", "test", "test-generalize"]
SCP_SPLITS: tuple[str, ...] = get_args(SayCanPaySplit)


def check_split(split: str, valid: Sequence[str] = SCP_SPLITS) -> None:
    """Refuse a split name outside ``valid`` before any task is drawn, naming the valid ones."""
    if split not in valid:
        raise InvalidInputError(f"unknown split {split!r}; valid: {', '.join(valid)}")


def normalise_text(text: str) -> str:
    """Lower case, one space between words: the encoders here are uncased and whitespace-insensitive,
    so texts that differ only there are the same to them."""
    return " ".join(text.lower().split())


def visible_signature(goal: str, observation: str | None = None) -> str:
    """Hash of what a model reads of a task before it acts: its goal (instruction) text and its first
    observation text, each normalised (:func:`normalise_text`). The expert plan stays out of the key: a
    model does not read it before acting, and two tasks that differ only in their plan are the same
    question to every planner, so keying on the plan let test tasks repeat train tasks (in VirtualHome,
    another program of the same instruction in the same room). An observation given as None is left
    out and differs from an empty one, so a signature without the observation never equals one with it."""
    parts = [normalise_text(goal), "\x1f" if observation is None else normalise_text(observation)]
    return hashlib.sha1("\x1d".join(parts).encode()).hexdigest()[:16]


def instruction_key(goal: str) -> str:
    """The normalised instruction alone: the key of a split by task name (VirtualHome), where a test
    instruction must not occur in train or in a prompt example whatever the observation says."""
    return normalise_text(goal)


def draw_tasks(candidates: Iterable[Task], n: int, unique_key: str, exclude: Collection[str] = ()) -> list[Task]:
    """The first ``n`` of ``candidates`` (tasks drawn from a split's seed, in order) that are new: their
    model-visible signature (``metadata["signature"]``, :func:`visible_signature`) is not in ``exclude``
    (the train tasks'), and their hidden state (``metadata[unique_key]``: layout, positions) is not an
    earlier pick's, so no task is in a split twice. A split keeps its size: each train twin is replaced
    by the next new task.

    Raises ValueError when ``candidates`` ends before ``n`` are picked."""
    taken: set[str] = set()
    out: list[Task] = []
    if n <= 0:
        return out
    for task in candidates:
        k = task.metadata[unique_key]
        if k in taken or task.metadata["signature"] in exclude:
            continue
        taken.add(k)
        out.append(task)
        if len(out) == n:
            return out
    raise ValueError(f"only {len(out)} of {n} tasks are new")
