"""Open-loop planning: the language model writes the whole program from one prompt, then the robot plays it.

This is how the Embodied Agent Interface asks LLMs for action sequences (Li et al. 2024, Sec. 3.3): the
prompt is the benchmark's own text for the task (its ``instruction``), the model answers once, greedily,
and the answer is scored as written. As a groundplan planner the row runs in any sweep (on Ray runners,
resumable, traced) beside the closed-loop planners it is compared with, on the same episodes.

- The prompt is ``template`` with the instruction put in verbatim (the default template is the
  instruction alone), so the model reads exactly what the benchmark gives every model.
  ``chat_template`` sends that prompt as a chat user sends it to an instruct model: one user turn of the
  model's own chat template (the backend's, :class:`~groundplan.llm.base.SupportsChatTemplate`).
- The answer's text is kept in the first decision's ``info["answer"]``: a judge that reads answers as text
  (EAI's, parsing errors included) scores what the model wrote, not what the env executed. The steps the
  answer format (:data:`ANSWER_FORMATS`) reads from it are played one per decision whatever the
  simulator says (:class:`~groundplan.planners.base.PlanPlayback`); a step the env does not know is a
  failed step, as it would be in the benchmark's executor.
"""
from __future__ import annotations

from typing import Any, Mapping, Protocol, Sequence

from pydantic import ConfigDict, Field, field_validator

from groundplan.core.registry import Registry
from groundplan.core.types import Decision, Observation, StepResult, Task
from groundplan.core.validation import MAX_INSTRUCTION_CHARS, build_config, validate_instruction
from groundplan.llm.base import GenerationParams, LanguageModel
from groundplan.planners.base import PlanPlayback, Planner, PlannerOptions


class AnswerFormat(Protocol):
    """How an answer names its steps: ``read`` gives the steps (skill labels) a text names, ``write`` the text
    that names given steps (what Say fine-tuning trains an open-loop model to write, :meth:`OpenLoopPlanner.plan_text`);
    ``read(write(steps))`` gives the steps back."""

    @staticmethod
    def read(text: str) -> list[str]: ...

    @staticmethod
    def write(steps: Sequence[str]) -> str: ...


#: the answer formats by name; installed plugins may add formats
ANSWER_FORMATS: Registry[AnswerFormat] = Registry("answer format")
ANSWER_FORMATS.register_lazy("steps", "groundplan.planners.zeroshot:StepsAnswer")
ANSWER_FORMATS.register_lazy("eai_json", "groundplan.envs.virtualhome.eai.answer:EAIJsonAnswer")


class OpenLoopConfig(PlannerOptions):
    """Options of the open-loop planner."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    PROMPT_FIELDS = ("template", "answer_format", "chat_template")

    template: str = Field("{instruction}", description="The prompt, with {instruction} where the task's "
                          "instruction goes (verbatim); the default is the instruction alone.")
    chat_template: bool = Field(False, description="Send the prompt as one user turn of the model's own chat "
                                "template, as a chat user of an instruct model would (a backend that declares "
                                "chat_template; a model without a template is refused).")
    answer_format: str = Field("steps", description="How the answer names its steps (a registered answer format: "
                               "'steps' reads 'Step n: ...' lines, 'eai_json' EAI's JSON object of actions).")
    max_new_tokens: int = Field(384, ge=1, description="Most tokens of the answer (a whole program).")
    temperature: float = Field(0.0, ge=0.0, description="Sampling temperature; 0 is greedy.")
    stop: list[str] = Field(default_factory=list, description="Strings that end the answer (none by default).")
    seed: int = Field(0, description="Sampling seed (with the episode seed), when temperature > 0.")
    max_steps: int = Field(50, ge=1, description="Most steps of the answer played (the whole answer is kept).")
    max_instruction_chars: int = Field(MAX_INSTRUCTION_CHARS, ge=1)
    done_skill: str = Field("done", min_length=1, description="Label of the done decision after the last step.")

    @field_validator("template")
    @classmethod
    def _has_slot(cls, value: str) -> str:
        if "{instruction}" not in value:
            raise ValueError("the template must contain {instruction}")
        try:
            value.format(instruction="")
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(f"the template has a slot other than {{instruction}} ({exc}); double other braces") from None
        return value

    @field_validator("answer_format")
    @classmethod
    def _known_format(cls, value: str) -> str:
        if value not in ANSWER_FORMATS:
            raise ValueError(f"unknown answer format '{value}'; valid: {', '.join(ANSWER_FORMATS.names())}")
        return value

    @property
    def llm_needs(self) -> tuple[str, ...]:
        """The model writes text (in its chat template when asked); nothing is scored."""
        return ("generate", "chat_template") if self.chat_template else ("generate",)


class OpenLoopPlanner(PlanPlayback, Planner):
    """See the module docstring."""

    name = "open_loop"
    config: OpenLoopConfig

    def __init__(self, lm: LanguageModel, config: OpenLoopConfig | Mapping[str, Any] | None = None,
                 **overrides: Any) -> None:
        self.lm = lm
        self.config = build_config(OpenLoopConfig, config, overrides)
        self._prompt = ""
        self._plan: list[str] = []
        self._plan_info: dict[str, Any] = {}

    @property
    def max_steps(self) -> int:
        return self.config.max_steps + 1  # the done decision after the last step fits

    @property
    def prompt(self) -> str:
        return self._prompt

    def reset(self, task: Task, observation: Observation, seed: int = 0) -> None:
        cfg = self.config
        validate_instruction(task.instruction, cfg.max_instruction_chars)
        self._prompt = cfg.template.format(instruction=task.instruction)
        if cfg.chat_template:
            self._prompt = self.lm.chat_prompt(self._prompt)
        self._begin_episode()
        params = GenerationParams(n=1, temperature=cfg.temperature, max_new_tokens=cfg.max_new_tokens,
                                  stop=tuple(cfg.stop),
                                  seed=(cfg.seed * 1_000_003 + seed) % (2**31) if cfg.temperature > 0 else None)
        answer = self.lm.generate(self._prompt, params)[0]
        steps = list(ANSWER_FORMATS.get(cfg.answer_format).read(answer.text))
        self._plan = steps[: cfg.max_steps]
        self._plan_info = {"answer": answer.text, "answer_steps": len(steps),
                           "answer_tokens": answer.num_tokens, "finish_reason": answer.finish_reason}

    def next_step(self, observation: Observation, last: StepResult | None = None) -> Decision:
        return self._play(self.config.done_skill)

    def plan_text(self, steps: Sequence[str]) -> str:
        """The answer that names ``steps`` in the configured format (the whole program, one generation)."""
        return ANSWER_FORMATS.get(self.config.answer_format).write(steps)


def make_open_loop(lm: LanguageModel, affordance: Any = None, demonstrations: Any = None, **options: Any) -> Planner:
    """The open-loop planner; ``options`` are fields of :class:`OpenLoopConfig`. ``affordance`` and
    ``demonstrations`` are accepted for the uniform factory signature and not used: nothing grounds an
    answer written before the first step."""
    return OpenLoopPlanner(lm, **options)
