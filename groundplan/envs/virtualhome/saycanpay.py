"""VirtualHome with SayCanPay's three splits and a short text observation (Sec. 6: VirtualHome
"≈800 compatible trajectories" for train, 100 test, 20 test-generalize of unseen tasks).

The existing :class:`~groundplan.envs.virtualhome.env.VirtualHomeEnv` (scene 1, 342 programs) holds
whole task categories out ('category' split). Here: **train** is the seen categories' programs except
every 5th, **test** is every 5th (same tasks, other programs), **test-generalize** is the held-out
categories (unseen tasks), the first ``generalize_size`` of them. Scaled down from the paper's sizes:
scene 1 has 342 programs in all. The expert is each program's own reference script
(:func:`reference_program_expert`).

Many programs of a task are the same steps written down twice, so a 5th program can repeat a train
program of its task step for step (9 of the 38 did, "Relax on sofa" 124_1 and 442_1 among them). Such a
program is not another program: the models read its task name and steps in training
(:func:`program_signature`), so test leaves it out. Its first observation
("The character is in the bedroom.") says too little to tell it apart, and leaving it out also leaves
out every test task whose model-visible signature (:func:`~groundplan.envs.splits.visible_signature`:
name, first observation, steps) equals a train task's.

The text observation (the base env gives none) says where the character is, what it holds and which
objects are close to it, read from the evolving graph.
"""
from __future__ import annotations

from typing import Any, Sequence

from pydantic import Field

from groundplan.core.types import Observation, Task
from groundplan.core.validation import validate_options
from groundplan.envs.experts import ReferencePlanExpert
from groundplan.envs.splits import SayCanPaySplit, visible_signature
from groundplan.envs.virtualhome.env import VirtualHomeConfig, VirtualHomeEnv


class SayCanPayVirtualHomeConfig(VirtualHomeConfig):
    """:class:`VirtualHomeConfig` plus the SayCanPay split; unknown fields are refused."""

    scp_split: SayCanPaySplit = Field(
        "test", description="SayCanPay split env.tasks() returns (train/test: seen task categories, "
        "test-generalize: unseen ones).")
    generalize_size: int = Field(20, ge=1, le=1000, description="Test-generalize tasks (paper: 20).")
    max_close: int = Field(12, ge=0, le=200, description="At most this many close objects in the text.")


class SayCanPayVirtualHome(VirtualHomeEnv):
    """VirtualHome for SayCanPay; ``split`` selects the SayCanPay split (the base's split is 'category')."""

    name = "virtualhome_scp"

    def __init__(self, **options: Any) -> None:
        opts = dict(options)
        scp_split = opts.pop("split", None)
        if scp_split is not None:
            opts["scp_split"] = scp_split
        self.scp_config = validate_options(SayCanPayVirtualHomeConfig, opts, "virtualhome_scp env options")
        base = {k: v for k, v in self.scp_config.model_dump().items() if k in VirtualHomeConfig.model_fields}
        super().__init__(**base)

    def tasks(self, families: Sequence[str] | None = None) -> list[Task]:
        split = self.scp_config.scp_split
        if split == "test-generalize":
            programs = list(self._test)[: self.scp_config.generalize_size]
        else:
            programs = [p for i, p in enumerate(self._train) if (i % 5 == 4) == (split == "test")]
        tasks = [self._task(p) for p in programs]
        if split == "test":  # other programs than train's (see the module docstring)
            train = {program_signature(self._task(p)) for i, p in enumerate(self._train) if i % 5 != 4}
            tasks = [t for t in tasks if program_signature(t) not in train]
        tasks = [Task(t.task_id, t.instruction, t.family, t.goal, t.start_state, t.reference_plan,
                      {**t.metadata, "split": split}) for t in tasks]
        return [t for t in tasks if families is None or t.family in families]

    def _observe(self) -> Observation:
        obs = super()._observe()
        obs.text = describe(self._state, self._char_id, self.scp_config.max_close)
        return obs


def program_signature(task: Task) -> str:
    """What the models read of a program's task apart from its start: the task name and the steps."""
    return visible_signature(task.instruction, None, task.reference_plan)


def describe(state: Any, char_id: int, max_close: int) -> str:
    """"The character is in the bedroom. It holds the mouse. Close to it: desk, chair." from the graph."""
    from groundplan.envs.virtualhome.simulator import HOLD_RELATIONS, _relation

    def cls(i: int) -> str:
        return state.get_node(i).class_name.replace("_", " ")

    rooms = {n.id for n in state.get_nodes() if n.category == "Rooms"}
    where = [cls(i) for i in state.get_node_ids_from(char_id, _relation("INSIDE")) if i in rooms]
    held = sorted({cls(i) for r in HOLD_RELATIONS for i in state.get_node_ids_from(char_id, _relation(r))})
    close = sorted({cls(i) for i in state.get_node_ids_from(char_id, _relation("CLOSE")) if i not in rooms})
    parts = [f"The character is in the {where[0]}." if where else "The character is in no room."]
    if held:
        parts.append(f"It holds the {' and the '.join(held)}.")
    if close and max_close:
        parts.append(f"Close to it: {', '.join(close[:max_close])}.")
    return " ".join(parts)


def reference_program_expert(env: SayCanPayVirtualHome) -> ReferencePlanExpert:
    """The expert of SayCanPay's VirtualHome trajectories: each program's own steps, then done
    (:class:`~groundplan.envs.experts.ReferencePlanExpert`), its rows labelled ``virtualhome_reference``."""
    return ReferencePlanExpert(env, name="virtualhome_reference")
