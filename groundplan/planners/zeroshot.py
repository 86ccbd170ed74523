"""Language Models as Zero-Shot Planners (Huang et al., 2022): the translated planner, its Table 2
ablations and the vanilla baseline.

Translated planner (Sec. 3, Algorithm 1), one decision per step:

1. the planning LM samples ``k`` continuations of the prompt ``"Task: …\\nStep 1: …\\n\\nTask: <query>
   \\nStep n:"`` (temperature, top-p 0.9, cut at the newline), each with its mean token log-prob P;
2. every (sample â, admissible action a) pair is scored ``cos(f(â), f(a)) + β·P(â)`` (β = 0.3) with the
   translation LM's embeddings f, minus a penalty of 0.5 when a is the previous action ([code]);
3. the best admissible action (not the raw sample) is appended to the prompt with the step number
   continued ("autoregressive trajectory correction") and returned as the decision;
4. the plan ends when more than half of the samples are empty, when the best score is below ε, or
   after ``max_steps`` steps.

The few-shot example is the demonstration whose task name is most similar to the query's (same
embedder; "dynamic example selection"). An admissible action is embedded the first time an observation
allows it and cached on disk under ``cache_dir()/embeddings/`` (:mod:`groundplan.grounding.action_index`):
a VirtualHome scene allows a few thousand of the ~40,000 labels, which embed in seconds, not minutes.

Ablations (Table 2) are options of ``make_zeroshot``: ``translation=False`` (the best sample by P is
used as is; the env records a failed step when it is not admissible), ``dynamic_example=False`` (one
fixed example), ``trajectory_correction=False`` (the raw best sample is appended to the prompt while
its translation is executed: translation without conditioning on admissible actions).

Vanilla baseline (``make_vanilla``, Sec. 4.1): ``k`` whole plans are sampled, the one with the highest
mean log-prob is kept and its steps are returned as they are, one per decision; a step that is not
admissible is executed anyway and the env records it as a failed step with its reason.

Demonstrations come from the dataset named by ``demo_dataset`` (``groundplan.envs.DATASETS``, e.g.
VirtualHome's training programs) or are passed to the planner directly (``demonstrations=[(name, steps), …]``).

Two options of the translated planner go beyond the paper, for tasks whose inputs allow no demonstration
(the Embodied Agent Interface's prompt, Li et al. 2024 Sec. 3.3, which carries its own one-shot example):

- ``prompt``: a dialog prompt file instead of the ``Task:``/``Step n:`` example: the opening prompt is
  SayCan's dialog (``<file>Human: <instruction>\nRobot: 1.``, Ahn et al. 2022 App. C.2) and each translated
  action is appended as ``" <action>, <n+1>."``; no demonstration is read, and a sample saying the done label
  counts toward ending the plan as an empty one does;
- ``reprompt_on_failure``: closed loop on the simulator's success feedback. When the last action failed, its
  step is taken back out of the prompt, the action is barred until an action succeeds, and the step is
  sampled again with a new seed (re-prompting on failure; the paper's planner is open loop, so a failed
  action stays in its prompt). Every attempt counts toward ``max_steps``.
"""
from __future__ import annotations

import logging
import re
import time
from typing import Any, Mapping, Sequence

import numpy as np
from pydantic import ConfigDict, Field, field_validator

from groundplan.core.errors import InvalidInputError
from groundplan.core.types import (
    CandidateScore,
    Decision,
    Observation,
    StepResult,
    Task,
)
from groundplan.core.validation import (
    MAX_INSTRUCTION_CHARS,
    build_config,
    validate_instruction,
)
from groundplan.grounding.action_index import ActionIndex, unit_rows
from groundplan.grounding.zeroshot import translation_scores
from groundplan.llm.base import GenerationParams, LanguageModel
from groundplan.planners.base import EpisodeProgress, PlanPlayback, Planner, PlannerOptions
from groundplan.planners.saycan import GENERATIVE_STOP, build_prompt, format_step, load_prompt

logger = logging.getLogger(__name__)

#: a demonstration: (task name, steps in natural language)
Demo = tuple[str, tuple[str, ...]]


# ---------------------------------------------------------------------------------------------
# Prompt format (Sec. 3.1 and [code])
# ---------------------------------------------------------------------------------------------


def capitalise(step: str) -> str:
    step = step.strip()
    return step[:1].upper() + step[1:]


def format_example(name: str, steps: Sequence[str]) -> str:
    """``"Task: <name>\\nStep 1: <Step>\\nStep 2: …"`` (no trailing newline)."""
    head = f"Task: {name}"
    return f"{head}\n{write_plan(steps)}" if steps else head


def opening_prompt(example: Demo | None, query: str) -> str:
    """The example, a blank line and ``"Task: <query>\\nStep 1:"``."""
    head = format_example(*example) + "\n\n" if example else ""
    return f"{head}Task: {query}\nStep 1:"


def clean_sample(text: str) -> str:
    """A sampled step without surrounding spaces, a trailing period or leading/trailing non-word
    characters ("excluding leading or trailing non-English text tokens", Sec. 3.3)."""
    text = text.strip()
    text = re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9)]+$", "", text)
    return text.strip()


_STEP_LINE = re.compile(r"^\s*step\s*\d+\s*[:.]\s*(.*)$", re.IGNORECASE)


def parse_plan(text: str) -> list[str]:
    """Steps of a generated plan: the text after ``Step n:`` on each line (the first line continues
    ``Step 1:``); stops at a blank line or the next ``Task:``. A line without the ``Step n:`` prefix
    is kept as it is (it is then a malformed step)."""
    steps: list[str] = []
    for i, line in enumerate(text.split("\n")):
        if not line.strip():
            if steps:
                break
            continue
        if line.strip().lower().startswith("task:"):
            break
        m = _STEP_LINE.match(line)
        step = clean_sample(m.group(1) if m else line) if (m or i > 0) else clean_sample(line)
        if step:
            steps.append(step)
    return steps


def write_plan(steps: Sequence[str]) -> str:
    """``"Step 1: <Step>\\nStep 2: …"``: a plan's steps as an example shows them (:func:`format_example`),
    which :func:`parse_plan` reads back."""
    return "\n".join(f"Step {i}: {capitalise(s)}" for i, s in enumerate(steps, 1))


class StepsAnswer:
    """The ``Step n:`` answer format of the open-loop planner (``answer_format: steps``)."""

    read = staticmethod(parse_plan)
    write = staticmethod(write_plan)


# ---------------------------------------------------------------------------------------------
# Configs
# ---------------------------------------------------------------------------------------------


class _Base(PlannerOptions):
    model_config = ConfigDict(extra="forbid", frozen=True)

    num_samples: int = Field(10, ge=1, description="k: samples from the planning LM per step (paper grid {1, 10}).")
    temperature: float = Field(0.6, ge=0, description="Sampling temperature (paper grid {0.1, 0.3, 0.6}).")
    top_p: float = Field(0.9, gt=0, le=1, description="Nucleus sampling threshold ([code]: 0.9).")
    repetition_penalty: float = Field(
        1.0, gt=0, description="Hugging Face repetition penalty while sampling (paper grid {1.0, 1.2, 1.5, 1.8}); 1.0: none.")
    max_steps: int = Field(20, ge=1, description="Most steps per plan ([code]: 20).")
    prompt_example: bool = Field(
        True, description="Open the prompt with a demonstration (Sec. 3.1); False: the task alone (\"Task: <name>\\nStep "
        "1:\"), the prompt of a planning LM fine-tuned on the demonstrations (Table 1's fine-tuned row), which "
        "has learned their format instead of reading it from an example.")
    dynamic_example: bool = Field(True, description="Pick the demonstration with the most similar task name (Sec. 3.4); False: the fixed example.")
    fixed_example: str | None = Field(
        None, description="Task name or program id of the fixed example (default: the first demonstration).")
    demo_dataset: str = Field("virtualhome", description="Registered dataset (groundplan.envs.DATASETS) whose "
                              "records are the demonstrations.")
    demo_dataset_options: dict[str, Any] = Field(default_factory=dict, description="Options of that dataset (e.g. "
                                                 "VirtualHome's split).")
    done_skill: str = Field("done", min_length=1, description="Label of the done decision (never executed).")
    max_instruction_chars: int = Field(MAX_INSTRUCTION_CHARS, ge=1)
    seed: int = Field(0, description="Base sampling seed; each step's seed is derived from it, the episode seed and the step.")

    @property
    def llm_needs(self) -> tuple[str, ...]:
        """The planning LM samples steps or whole plans (Sec. 3.1)."""
        return ("generate",)


class ZeroShotConfig(_Base):
    """Options of the translated planner and its ablations (Table 2)."""

    PROMPT_FIELDS = ("prompt", "prompt_example", "dynamic_example", "fixed_example", "demo_dataset", "demo_dataset_options",
                     "trajectory_correction", "reprompt_on_failure", "done_skill")

    beta: float = Field(0.3, ge=0, description="Weight of the mean log-prob in the translation score.")
    epsilon: float | None = Field(
        0.0, description="Stop when the best score is below it (paper grid {0, 0.4, 0.8}); null: never.")
    repeat_penalty: float = Field(0.5, ge=0, description="Subtracted from the previous action's score ([code]).")
    max_new_tokens: int = Field(24, ge=1, description="Longest sampled step.")
    translation: bool = Field(True, description="Translate samples to admissible actions (Sec. 3.2); False is the ablation.")
    trajectory_correction: bool = Field(
        True, description="Append the translated action to the prompt (Sec. 3.3); False appends the raw sample.")
    top_candidates: int = Field(10, ge=0, description="How many best-scoring actions each step records in the trace.")
    prompt: str | None = Field(
        None, description="A dialog prompt file (groundplan/planners/prompts, e.g. saycan_eai, or a .txt path): "
        "SayCan's dialog format instead of the Task:/Step n: example, and no demonstration is read; null: the paper's.")
    reprompt_on_failure: bool = Field(
        False, description="When the last action failed, take its step out of the prompt, bar the action until one "
        "succeeds and sample the step again (closed loop on success feedback); False: the paper's open-loop prompt.")

    @field_validator("prompt")
    @classmethod
    def _prompt_exists(cls, value: str | None) -> str | None:
        if value is not None:
            load_prompt(value)  # raises, naming the shipped prompts, when it does not exist
        return value


class VanillaConfig(_Base):
    """Options of the vanilla baseline: best of k whole plans by mean log-prob, no translation."""

    PROMPT_FIELDS = ("prompt_example", "dynamic_example", "fixed_example", "demo_dataset", "demo_dataset_options")

    dynamic_example: bool = Field(False, description="The paper's vanilla LLMs use one fixed example.")
    max_new_tokens: int = Field(160, ge=1, description="Longest sampled plan.")


# ---------------------------------------------------------------------------------------------
# Planners
# ---------------------------------------------------------------------------------------------


def _demos_from(items: Sequence[Any]) -> list[Demo]:
    out: list[Demo] = []
    for item in items:
        if isinstance(item, tuple) and len(item) == 2:
            out.append((str(item[0]), tuple(item[1])))
        else:  # an env Demonstration (name, steps attributes)
            out.append((str(item.name), tuple(item.steps)))
    return out


class _ZeroShotBase(EpisodeProgress, Planner):
    config: _Base

    def __init__(self, lm: LanguageModel, config: _Base, demonstrations: Sequence[Any] | None) -> None:
        self.lm = lm
        self.config = config
        self._demos: list[Demo] | None = _demos_from(demonstrations) if demonstrations is not None else None
        self._demo_vectors: np.ndarray | None = None
        self._prompt = ""
        self._history: list[str] = []
        self._episode_seed = 0
        self._failures = 0  # failed attempts taken back by re-prompting (0 without it)
        self.example: Demo | None = None

    @property
    def max_steps(self) -> int:
        # one more decision than steps, so that the done decision after max_steps steps fits
        return self.config.max_steps + 1

    @property
    def prompt(self) -> str:
        return self._prompt

    @property
    def demonstrations(self) -> list[Demo]:
        if self._demos is None:
            from groundplan.envs import DATASETS

            self._demos = _demos_from(DATASETS.get(self.config.demo_dataset)(**self.config.demo_dataset_options))
        if not self._demos:
            raise InvalidInputError("no demonstrations to take the prompt example from")
        return self._demos

    def select_example(self, query: str) -> Demo:
        """The demonstration with the most similar task name (dynamic), or the fixed example."""
        demos = self.demonstrations
        if not self.config.dynamic_example:
            wanted = self.config.fixed_example
            if wanted is None:
                return demos[0]
            for name, steps in demos:
                if name == wanted:
                    return (name, steps)
            raise InvalidInputError(f"fixed_example '{wanted}' is not the task name of a demonstration")
        if self._demo_vectors is None:
            self._demo_vectors = unit_rows(np.asarray(self.lm.embed([n for n, _ in demos]), dtype=np.float32))
        q = unit_rows(np.asarray(self.lm.embed([query]), dtype=np.float32))[0]
        return demos[int(np.argmax(self._demo_vectors @ q))]

    def reset(self, task: Task, observation: Observation, seed: int = 0) -> None:
        query = validate_instruction(task.instruction, self.config.max_instruction_chars)
        self._prompt = self._opening(query)
        self._begin_episode()
        self._episode_seed = seed
        self._reset_plan(task, observation)

    def _opening(self, query: str) -> str:
        """The episode's opening prompt: the chosen demonstration (none without ``prompt_example``) and the
        query (Sec. 3.1)."""
        self.example = self.select_example(query) if self.config.prompt_example else None
        return opening_prompt(self.example, query)

    def _reset_plan(self, task: Task, observation: Observation) -> None:
        """Hook for subclasses."""

    def _params(self, stop: tuple[str, ...]) -> GenerationParams:
        """The sampling of Sec. 3.5 / A.1 with this config's grid values and this step's seed."""
        cfg = self.config
        return GenerationParams(n=cfg.num_samples, temperature=cfg.temperature, top_p=cfg.top_p,
                                max_new_tokens=cfg.max_new_tokens, stop=stop, seed=self._seed(),
                                repetition_penalty=cfg.repetition_penalty)

    def _seed(self) -> int:
        return (self.config.seed * 1_000_003 + self._episode_seed * 1009 + len(self._history)
                + 7919 * self._failures) % (2**31)

    def _done(self, reason: str, info: dict[str, Any] | None = None) -> Decision:
        self._finished = True
        return Decision(skill=self.config.done_skill, done=True, info={"stop": reason, **(info or {})})


class ZeroShotPlanner(_ZeroShotBase):
    """The translated planner (Algorithm 1) and, by its options, the ablations of Table 2."""

    config: ZeroShotConfig

    def __init__(self, lm: LanguageModel, config: ZeroShotConfig | Mapping[str, Any] | None = None,
                 demonstrations: Sequence[Any] | None = None, **overrides: Any) -> None:
        cfg = build_config(ZeroShotConfig, config, overrides)
        super().__init__(lm, cfg, demonstrations)
        parts = ["zeroshot"]
        if not cfg.translation:
            parts.append("no_translation")
        if not cfg.dynamic_example:
            parts.append("fixed_example")
        if not cfg.trajectory_correction:
            parts.append("no_correction")
        if cfg.prompt is not None:
            parts.append("dialog")
        if cfg.reprompt_on_failure:
            parts.append("reprompt")
        self.name = "-".join(parts)
        self._index: ActionIndex | None = None
        self._dialog = load_prompt(cfg.prompt) if cfg.prompt is not None else None
        self._barred: set[str] = set()
        self._attempts = 0
        self._last_delta = ""

    def _opening(self, query: str) -> str:
        """Sec. 3.1's example and query, or (``prompt``) SayCan's dialog with no demonstration."""
        if self._dialog is None:
            return super()._opening(query)
        self.example = None
        return build_prompt(self._dialog, query)

    def _reset_plan(self, task: Task, observation: Observation) -> None:
        self._failures = 0
        self._barred = set()
        self._attempts = 0
        self._last_delta = ""

    def _take_back(self, last: StepResult | None) -> str | None:
        """Re-prompting: after a failed action, its step leaves the prompt and the action is barred until
        one succeeds (the state it failed in has not changed); returns the failed action."""
        if not self.config.reprompt_on_failure or last is None or not self._history:
            return None
        if last.success:
            self._barred.clear()
            return None
        failed = self._history.pop()
        self._prompt = self._prompt[: len(self._prompt) - len(self._last_delta)]
        self._barred.add(failed)
        self._failures += 1
        return failed

    def _sample_stop(self) -> tuple[str, ...]:
        return GENERATIVE_STOP if self._dialog is not None else ("\n",)

    def _clean(self, text: str) -> str:
        """A sample as a step: the paper's cleaning, or in the dialog format only the spaces and a closing
        period (EAI's steps are ``[WALK] <laptop>``, whose brackets the paper's cleaning would strip)."""
        return clean_sample(text) if self._dialog is None else text.strip().rstrip(".").strip()

    @property
    def done_text(self) -> str | None:
        """Without a dialog the plan ends when most samples are empty (Sec. 3); with one, on the done label."""
        return None if self._dialog is not None else ""

    def step_text(self, skill: str) -> str | None:
        """Without a dialog, the prompt shows a step capitalised (Sec. 3.1's example format)."""
        return capitalise(skill) if self._dialog is None else None

    def _says_done(self, sample: str) -> bool:
        return self._dialog is not None and sample.lower() == self.config.done_skill.lower()

    def _actions(self, skills: Sequence[str]) -> ActionIndex:
        if self._index is None or self._index.skills is not skills:
            if self._index is not None and list(self._index.skills) == list(skills):
                self._index.skills = skills
            else:
                self._index = ActionIndex(self.lm, skills, self.config.done_skill)
        return self._index

    def next_step(self, observation: Observation, last: StepResult | None = None) -> Decision:
        self._check_running()
        cfg = self.config
        failed = self._take_back(last)
        if self._attempts >= cfg.max_steps:  # every step chosen, taken back or not (history <= attempts)
            return self._done("max_steps")
        gens = self.lm.generate(self._prompt, self._params(stop=self._sample_stop()))
        samples = [self._clean(g.text) for g in gens]
        info: dict[str, Any] = {"samples": samples, "sample_logprobs": [float(g.logprob_mean) for g in gens]}
        if failed is not None:
            info["reprompt"] = {"failed": failed, "barred": sorted(self._barred)}
        done_votes = sum(1 for s in samples if self._says_done(s))
        if sum(1 for s in samples if not s) + done_votes > len(samples) / 2:
            return self._done("done_samples" if done_votes else "empty_samples", info)
        kept = [(s, g.logprob_mean) for s, g in zip(samples, gens) if s and not self._says_done(s)]
        if not cfg.translation:
            text, lp = max(kept, key=lambda x: x[1])  # first of the best on ties
            info["logprob"] = float(lp)
            cand = [CandidateScore(skill=text, llm=float(lp), affordance=None, combined=float(lp))]
            return self._commit(text, text, cand, info)

        index = self._actions(observation.skills)
        if not index.labels:
            raise InvalidInputError("the observation lists no admissible actions to translate to")
        texts = list(dict.fromkeys(s for s, _ in kept))
        lps = np.array([max(lp for s, lp in kept if s == t) for t in texts], dtype=np.float32)
        t0 = time.perf_counter()
        vecs = unit_rows(np.asarray(self.lm.embed(texts), dtype=np.float32))
        t1 = time.perf_counter()
        previous = self._history[-1] if self._history else None
        best, cos, which = translation_scores(index, vecs, lps, cfg.beta, previous, cfg.repeat_penalty,
                                             self._allowed(observation))
        top = int(np.argmax(best))
        info.update({"translation_ms": 1000 * (time.perf_counter() - t1), "embed_ms": 1000 * (t1 - t0),
                     "score": float(best[top]), "cosine": float(cos[top]), "from_sample": texts[int(which[top])]})
        candidates = self._top(index, best, cos, which, texts, lps)
        if not np.isfinite(best[top]):
            return self._done("no_action_left", info)  # every admissible action barred by re-prompting
        if cfg.epsilon is not None and best[top] < cfg.epsilon:
            info["best"] = index.labels[top]
            return self._done("below_epsilon", info)
        action = index.labels[top]
        appended = action if cfg.trajectory_correction else texts[int(which[top])]
        return self._commit(action, appended, candidates, info)

    def _allowed(self, observation: Observation) -> Any:
        """The observation's admissible mask less the barred actions (re-prompting)."""
        if not self._barred:
            return observation.admissible
        skills = observation.skills
        mask = (np.ones(len(skills), dtype=bool) if observation.admissible is None
                else np.array(observation.admissible, dtype=bool))
        mask &= np.array([s not in self._barred for s in skills], dtype=bool)
        return mask

    def _top(self, index: ActionIndex, best: np.ndarray, cos: np.ndarray, which: np.ndarray,
             texts: list[str], lps: np.ndarray) -> list[CandidateScore]:
        finite = np.flatnonzero(np.isfinite(best))  # inadmissible actions score -inf
        n = min(self.config.top_candidates, len(finite))
        if n <= 0:
            return []
        order = finite[np.argpartition(-best[finite], n - 1)[:n]]
        order = order[np.argsort(-best[order], kind="stable")]
        return [
            CandidateScore(skill=index.labels[i], llm=float(lps[which[i]]), affordance=None, combined=float(best[i]),
                           extra={"cosine": float(cos[i]), "sample": texts[int(which[i])]})
            for i in order
        ]

    def _commit(self, action: str, appended: str, candidates: list[CandidateScore], info: dict[str, Any]) -> Decision:
        n = len(self._history) + 1
        if self._dialog is None:
            delta = f" {capitalise(appended)}\nStep {n + 1}:"
        else:
            delta = format_step(appended, n, done=False)
        self._prompt += delta
        self._last_delta = delta
        self._attempts += 1
        self._history.append(action)
        return Decision(skill=action, done=False, candidates=candidates, prompt_delta=delta, info=info)


class VanillaPlanner(PlanPlayback, _ZeroShotBase):
    """The vanilla baseline: the best of ``k`` whole sampled plans by mean log-prob, step by step."""

    name = "zeroshot_vanilla"
    config: VanillaConfig

    def __init__(self, lm: LanguageModel, config: VanillaConfig | Mapping[str, Any] | None = None,
                 demonstrations: Sequence[Any] | None = None, **overrides: Any) -> None:
        super().__init__(lm, build_config(VanillaConfig, config, overrides), demonstrations)
        self._plan: list[str] = []
        self._plan_info: dict[str, Any] = {}

    def _reset_plan(self, task: Task, observation: Observation) -> None:
        cfg = self.config
        gens = self.lm.generate(self._prompt, self._params(stop=("\n\n", "\nTask:")))
        best = max(range(len(gens)), key=lambda j: gens[j].logprob_mean)  # first of the best on ties
        self._plan = parse_plan(gens[best].text)[: cfg.max_steps]
        self._plan_info = {"plan_text": gens[best].text, "logprob": float(gens[best].logprob_mean),
                           "sample_logprobs": [float(g.logprob_mean) for g in gens]}

    def _step_delta(self, step: str, index: int) -> str:
        delta = f" {capitalise(step)}\nStep {index + 2}:"
        self._prompt += delta
        return delta

    def next_step(self, observation: Observation, last: StepResult | None = None) -> Decision:
        return self._play(self.config.done_skill)


# ---------------------------------------------------------------------------------------------
# Factories ``(lm, affordance=None, **options) -> Planner``, registered in groundplan.planners
# ---------------------------------------------------------------------------------------------


def make_zeroshot(lm: LanguageModel, affordance: Any = None, demonstrations: Sequence[Any] | None = None,
                  **options: Any) -> Planner:
    """The translated planner; ``options`` are fields of :class:`ZeroShotConfig` (the ablations are
    ``translation=False``, ``dynamic_example=False``, ``trajectory_correction=False``). ``affordance``
    is accepted for the uniform factory signature and not used."""
    return ZeroShotPlanner(lm, demonstrations=demonstrations, **options)


def make_vanilla(lm: LanguageModel, affordance: Any = None, demonstrations: Sequence[Any] | None = None,
                 **options: Any) -> Planner:
    """The vanilla baseline; ``options`` are fields of :class:`VanillaConfig`."""
    return VanillaPlanner(lm, demonstrations=demonstrations, **options)
