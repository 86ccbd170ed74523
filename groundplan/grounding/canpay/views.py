"""What a Can/Pay model reads of a task's instruction: its goal view.

SayCanPay's Can and Pay read ``<Goal> g <Initial State> o0 ...`` (App. B.1) with a small encoder
(MiniLM: 256 tokens here). Most envs' instructions are a sentence and are read whole. Some benchmarks
give the planner one long prompt as the instruction (EAI's is ~8,500 characters, of which only the
"Input:" block differs between tasks), and the encoder would read only the shared preamble. A view is a
pure function of the instruction, so a model that reads it reads nothing the planner does not; it is
part of the model's architecture (:class:`~groundplan.grounding.canpay.config.CanPayModelConfig`), so
training, the affordance source and the lineage check all apply the same one.
"""
from __future__ import annotations

from typing import Callable, Sequence

from groundplan.core.registry import Registry

GoalView = Callable[[str], str]

#: name -> instruction text -> the text the model reads as its goal
GOAL_VIEWS: Registry[GoalView] = Registry("goal view")
DEFAULT_VIEW = "instruction"


@GOAL_VIEWS.register(DEFAULT_VIEW)
def whole_instruction(instruction: str) -> str:
    """The instruction as it is (every env whose instruction is a sentence)."""
    return instruction


GOAL_VIEWS.register_lazy("eai_task", "groundplan.envs.virtualhome.eai.prompts:task_view")


def goal_view(name: str) -> GoalView:
    """The registered view ``name``; an unknown name raises an error that lists the valid ones."""
    return GOAL_VIEWS.get(name)


def model_inputs(view: str, goal: str, init_obs: str, items: Sequence[tuple[Sequence[str], str]]) -> list[str]:
    """The model inputs of App. B.1 for each (history, action) of ``items``, the goal read through ``view``."""
    from groundplan.grounding.canpay.data import format_input

    seen = goal_view(view)(goal)
    return [format_input(seen, init_obs, list(h), a) for h, a in items]
