"""VirtualHome with SayCanPay's three splits and a short text observation (Sec. 6: VirtualHome
"≈800 compatible trajectories" for train, 100 test, 20 test-generalize of unseen tasks).

The existing :class:`~groundplan.envs.virtualhome.env.VirtualHomeEnv` (scene 1, 342 programs) holds
whole task categories out ('category' split); its held-out categories are **test-generalize** here
(unseen tasks, the first ``generalize_size`` programs). The seen categories are split **by task name**:
the first ``test_name_fraction`` of their names, ranked by the SHA-1 of the name (as the base split
ranks categories), are **test**; the other names are **train** (Can/Pay data and the Say prompt's
examples). Scaled down from the paper's sizes: scene 1 has 342 programs in all.

Why by name and not by program: a model reads, before it acts, the task name and the first
observation, and in scene 1 programs of one name start in the same few rooms, so "same tasks, other
programs" gave test tasks that were train tasks to every model (26 of 29 shared instruction and first
observation with a train task, all 29 their instruction). No test instruction occurs in train here
(``capabilities.disjoint_by = "instruction"``), and the evaluation refuses a Say prompt or a Can/Pay
model whose examples name one (:mod:`groundplan.pipelines.evaluate.lineage`). The expert is each
program's own reference script (:func:`reference_program_expert`).

The text observation (the base env gives none) says where the character is, what it holds and which
objects are close to it, read from the evolving graph.
"""
from __future__ import annotations

from typing import Any, Sequence

from pydantic import Field

from groundplan.core.types import Observation, Task
from groundplan.core.validation import validate_options
from groundplan.envs.experts import ReferencePlanExpert
from groundplan.envs.splits import SayCanPaySplit
from groundplan.envs.virtualhome.dataset import rank_key
from groundplan.envs.base import EnvCapabilities
from groundplan.envs.virtualhome.env import SUMMARY_METRICS, VirtualHomeConfig, VirtualHomeEnv


class SayCanPayVirtualHomeConfig(VirtualHomeConfig):
    """:class:`VirtualHomeConfig` plus the SayCanPay split; unknown fields are refused."""

    scp_split: SayCanPaySplit = Field(
        "test", description="SayCanPay split env.tasks() returns (train/test: seen task categories, "
        "test-generalize: unseen ones).")
    generalize_size: int = Field(20, ge=1, le=1000, description="Test-generalize tasks (paper: 20).")
    test_name_fraction: float = Field(
        0.3, gt=0, lt=1, description="Fraction of the seen task names (ranked by SHA-1) whose programs are "
        "test; the rest are train. No test name occurs in train.")
    max_close: int = Field(12, ge=0, le=200, description="At most this many close objects in the text.")


class SayCanPayVirtualHome(VirtualHomeEnv):
    """VirtualHome for SayCanPay; ``split`` selects the SayCanPay split (the base's split is 'category')."""

    name = "virtualhome_scp"
    capabilities = EnvCapabilities(measures=SUMMARY_METRICS, table_measures=SUMMARY_METRICS, fixed_actions=True,
                                   disjoint_by="instruction")

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
            held = set(self.test_names())
            programs = [p for p in self._train if (p.name in held) == (split == "test")]
        tasks = [self._task(p) for p in programs]
        tasks = [Task(t.task_id, t.instruction, t.family, t.goal, t.start_state, t.reference_plan,
                      {**t.metadata, "split": split}) for t in tasks]
        return [t for t in tasks if families is None or t.family in families]

    def test_names(self) -> list[str]:
        """The seen task names held out as test (see the module docstring), in rank order."""
        names = sorted({p.name for p in self._train}, key=rank_key)
        return names[: max(1, round(self.scp_config.test_name_fraction * len(names)))]

    def _observe(self) -> Observation:
        obs = super()._observe()
        obs.text = describe(self._state, self._char_id, self.scp_config.max_close)
        return obs


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
