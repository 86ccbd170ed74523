"""SayCan (Ahn et al., 2022, "Do As I Can, Not As I Say") and its two baselines from Sec. 5.5.

SayCan picks each step by scoring every skill label with the LLM and weighting it by the skill's
affordance, p(c_π | s, ℓ_π) · p(ℓ_π | i, ℓ_{π_{n-1}}, …, ℓ_{π_0}) (Sec. 3, Algorithm 1). The chosen
label is appended to the "Robot:" line of the dialog prompt (Appendix C.2, Listing 1) and the loop
repeats until the planner chooses the done skill. The LLM never sees the scene: the state enters only
through the affordances.

Registered planners (``groundplan.planners.PLANNERS``):

- ``"saycan"``: Algorithm 1, scores combined in log space: ``log p_LLM + log p_affordance``; options
  that cannot beat the best combined score (log p_affordance below it, as log p_LLM <= 0) are not
  scored (``prune``; exact for the scores it sees, see ``SayCanConfig.prune`` for the ~1e-5 path
  dependence of the scores themselves). With an affordance that costs more than the LM (a learned Can
  over EAI's ~250 actions a step), ``prune_by: llm`` bounds the other way: every option is scored by
  the LM, and the affordance only for those whose log p_LLM can still win, as log p_affordance <= 0.
- ``"saycan_novf"``: the "No VF" ablation (Sec. 5.5): the same planner without the value-function
  grounding, i.e. the argmax of the LLM score alone.
- ``"generative"``: the "Generative" ablation (Sec. 5.5): the LLM greedily writes the next step and
  the text is projected to the admissible skill with the highest embedding cosine similarity (the
  paper uses the Universal Sentence Encoder; here the LM's ``embed``).

Every factory has the signature ``(lm, affordance=None, **options) -> Planner``; ``options`` are the
fields of :class:`SayCanConfig` (or :class:`GenerativeConfig`), and an unknown or invalid option
raises :class:`~groundplan.errors.InvalidInputError` naming it.
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Literal, Mapping, Sequence

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
from groundplan.grounding.base import AffordanceSource
from groundplan.llm.base import GenerationParams, LanguageModel
from groundplan.planners.base import EpisodeProgress, Planner, PlannerOptions, labelled
from groundplan.planners.prompt_files import load_prompt

logger = logging.getLogger(__name__)

#: stop strings for the Generative baseline: one step of the "1. a, 2. b, 3. done." answer format
GENERATIVE_STOP: tuple[str, ...] = (",", "\n")


# ---------------------------------------------------------------------------------------------
# Prompt files and the dialog format (Appendix C.2)
# ---------------------------------------------------------------------------------------------


def build_prompt(few_shot: str, instruction: str) -> str:
    """The episode's opening prompt: the few-shot dialog, the user's query and the first step number,
    ``"…Human: <instruction>\\nRobot: 1."`` (Listing 1's format; the instruction is used as given)."""
    return f"{few_shot}Human: {instruction}\nRobot: 1."


def format_step(skill: str, number: int, done: bool) -> str:
    """Text appended to the prompt after choosing step ``number``: ``" <skill>, <number+1>."``, or
    ``" <skill>."`` for the done skill, which closes the answer exactly as Listing 1's answers end."""
    return f" {skill}." if done else f" {skill}, {number + 1}."


def option_logprob(score: Any, llm_score: str, length_alpha: float = 0.5) -> float:
    """log p_LLM of one scored option under ``SayCanConfig.llm_score`` ('sum', 'mean' or 'power': the sum over
    num_tokens ** length_alpha); every choice stays <= 0, which affordance-bound pruning needs."""
    if llm_score == "sum":
        return float(score.logprob_sum)
    if llm_score == "mean":
        return float(score.logprob_mean)
    return float(score.logprob_sum) / float(score.num_tokens) ** length_alpha


# ---------------------------------------------------------------------------------------------
# Configs
# ---------------------------------------------------------------------------------------------


class DialogPlannerConfig(PlannerOptions):
    """Options shared by SayCan and the Generative baseline (both use Listing 1's dialog prompt)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    PROMPT_FIELDS = ("prompt", "done_skill")

    prompt: str = Field(
        "saycan_kitchen",
        description="Few-shot prompt: the name of a file in groundplan/planners/prompts (default: "
        "Listing 1 of SayCan, Appendix C.2) or the path of a .txt file.",
    )
    done_skill: str = Field(
        "done",
        min_length=1,
        description="Skill label that ends the episode (SayCan's termination token, Algorithm 1 line 2). "
        "Choosing it is recorded as a done decision and is not executed.",
    )
    max_steps: int = Field(
        20,
        ge=1,
        description="Most decisions per episode (the done decision included); the episode runner uses "
        "it when it is not given a cap of its own.",
    )
    max_instruction_chars: int = Field(
        MAX_INSTRUCTION_CHARS,
        ge=1,
        description="Longest instruction accepted; longer ones raise InvalidInputError at reset.",
    )

    @field_validator("prompt")
    @classmethod
    def _prompt_exists(cls, value: str) -> str:
        load_prompt(value)  # raises, naming the shipped prompts, when it does not exist
        return value


class SayCanConfig(DialogPlannerConfig):
    """SayCan's options (Sec. 3, Algorithm 1; Sec. 5.5 for ``use_affordance=False``)."""

    llm_score: Literal["sum", "mean", "power"] = Field(
        "sum",
        description="How an option's token log-probs become p_LLM: 'sum' (the log-probability of the "
        "whole label, as the authors' tabletop demo), 'mean' (length-normalised) or 'power' (the sum "
        "divided by num_tokens ** length_alpha, the simple form of the length normalisation in Wu et al. 2016, Sec. 7: "
        "alpha 0 is the sum, 1 the mean). The paper does not say; 'sum' is the default. The sum favours "
        "short labels such as the done skill, the mean long ones whose later tokens are near-certain.",
    )
    length_alpha: float = Field(
        0.5,
        ge=0.0,
        le=1.0,
        description="The exponent of llm_score 'power' (ignored by 'sum' and 'mean'): a choice to make "
        "on validation tasks.",
    )
    use_affordance: bool = Field(
        True,
        description="Multiply the LLM probability by the affordance (SayCan). False is the 'No VF' "
        "ablation of Sec. 5.5: the LLM's argmax alone.",
    )
    prune: bool = Field(
        True,
        description="Affordance-bound pruning: since log p_LLM <= 0, an option whose log-affordance "
        "is below the best combined score found so far cannot win, so options are scored in order of "
        "affordance, prune_chunk at a time, until none left can win; affordance-0 options are never "
        "scored. The bound is exact for the scores it sees, but scoring in chunks changes scores by "
        "~1e-5 (float32 packing), so decisions equal full scoring except at a near-tie; they were "
        "identical on every sweep measured. Pruned options carry llm=None and "
        "extra['pruned']=True. `groundplan plan` turns it off to chart every option's scores. Only "
        "applies with use_affordance=True.",
    )
    prune_chunk: int = Field(
        16,
        ge=1,
        description="Options per LLM call while pruning (one packed forward each): larger chunks mean "
        "fewer forwards, smaller ones stop sooner.",
    )
    prune_by: Literal["affordance", "llm"] = Field(
        "affordance",
        description="Which score bounds the pruning. 'affordance' (default): every affordance is computed "
        "and the LLM scores options in descending affordance, as above. 'llm': the LLM scores every option "
        "in one call and the affordance is computed prune_chunk options at a time in descending log p_LLM, "
        "until the next option's log p_LLM (its bound, as log p_affordance <= 0) is below the best combined "
        "score: for an affordance that costs more than the LM, e.g. a learned Can model over hundreds of "
        "actions. Exact for the affordances it computes (a learned model's batches may change them by "
        "float rounding); options left out carry affordance=None and extra['pruned']=True.",
    )
    max_options: int | None = Field(
        None,
        ge=2,
        description="Score at most this many skills per step: when the observation offers more (e.g. "
        "VirtualHome's ~40,000 steps), keep the done skill and the skills whose embedding (lm.embed, "
        "cached on disk) is most similar to the instruction. None (default) scores every skill.",
    )
    avoid_recent: int = Field(
        0,
        ge=0,
        description="A skill chosen in the last avoid_recent steps is not offered again (the done skill "
        "always is; if nothing else is left, every skill is): a step-level form of the no-repeat "
        "constraint of text decoding (trigram blocking, Paulus et al. 2018; transformers' "
        "no_repeat_ngram_size), against the loops a small model falls into when it never chooses done "
        "(one action again and again, or two in turn). Not in the paper: 0 (default) is Algorithm 1; "
        "a value to choose on validation tasks.",
    )

    @property
    def llm_needs(self) -> tuple[str, ...]:
        """SayCan scores every skill label (Sec. 3, "LLM scoring")."""
        return ("score",)


class GenerativeConfig(DialogPlannerConfig):
    """Options of the Generative baseline (Sec. 5.5)."""

    max_new_tokens: int = Field(
        16,
        ge=1,
        description="Longest generated step; generation also stops at ',' or a newline, the end of one "
        "step in Listing 1's answer format.",
    )

    @property
    def llm_needs(self) -> tuple[str, ...]:
        """The Generative baseline writes the step (Sec. 5.5)."""
        return ("generate",)


# ---------------------------------------------------------------------------------------------
# Planners
# ---------------------------------------------------------------------------------------------


class DialogPlanner(EpisodeProgress, Planner):
    """Prompt bookkeeping shared by SayCan and the Generative baseline.

    The prompt is Listing 1 (Appendix C.2) followed by ``"Human: <instruction>\\nRobot: 1."``; each
    chosen skill is appended as ``" <skill>, <n+1>."`` so that the prompt always reads like the
    listing's answers, e.g. ``"Robot: 1. find a coke can, 2. pick up the coke can, 3."``. Subclasses
    implement :meth:`next_step` and finish it with :meth:`_commit`.
    """

    config: DialogPlannerConfig

    def __init__(self, lm: LanguageModel, config: DialogPlannerConfig) -> None:
        self.lm = lm
        self.config = config
        self._few_shot = load_prompt(config.prompt)
        self._prompt = ""
        self._history: list[str] = []

    @property
    def prompt(self) -> str:
        """The full prompt so far: few-shot dialog, query and the steps chosen in this episode."""
        return self._prompt

    @property
    def history(self) -> list[str]:
        """Skills chosen so far in this episode (the done decision excluded)."""
        return list(self._history)

    @property
    def max_steps(self) -> int:
        """The configured step cap, read by :func:`groundplan.rollout.episode.run_episode`."""
        return self.config.max_steps

    def reset(self, task: Task, observation: Observation, seed: int = 0) -> None:
        """Start an episode: validate the instruction (empty or longer than ``max_instruction_chars``
        raises :class:`InvalidInputError`), build the opening prompt and reset grounding sources with
        ``seed`` (the episode's env seed, passed by the runner)."""
        instruction = validate_instruction(task.instruction, self.config.max_instruction_chars)
        self._prompt = build_prompt(self._few_shot, instruction)
        self._begin_episode()
        self._reset_grounding(task, seed)

    def _reset_grounding(self, task: Task, seed: int) -> None:
        """Hook for planners with episode-scoped grounding sources."""

    def _admissible(self, observation: Observation) -> list[str]:
        """The skills to choose from (those ``observation.admissible`` allows), after checking the
        episode is in progress."""
        self._check_running()
        skills = list(observation.skills)
        if observation.admissible is not None:
            skills = [s for s, ok in zip(skills, observation.admissible) if ok]
        if not skills:
            raise InvalidInputError("the observation lists no skills, so there is nothing to choose from")
        return skills

    def _commit(self, skill: str, candidates: list[CandidateScore], info: dict[str, Any]) -> Decision:
        """Append the chosen skill to the prompt (Algorithm 1: "the LLM query is amended to include
        ℓ_π") and return the decision."""
        done = skill == self.config.done_skill
        delta = format_step(skill, len(self._history) + 1, done)
        self._prompt += delta
        if done:
            self._finished = True
        else:
            self._history.append(skill)
        logger.debug("%s step %d: %s", self.name, len(self._history) + int(done), skill)
        return Decision(skill=skill, done=done, candidates=candidates, prompt_delta=delta, info=info)


class SayCanPlanner(DialogPlanner):
    """SayCan (Algorithm 1), and with ``use_affordance=False`` the "No VF" baseline (Sec. 5.5).

    Each step scores the admissible labels ``" <skill>"`` as continuations of the prompt (all in one
    ``lm.score`` call with ``prune=False``; with affordance-bound pruning, the default, only those
    that can still win, in packed chunks by descending affordance), takes log p_LLM as the sum (default), mean or
    length-normalised sum (``llm_score``) of its token log-probs, adds
    log p_affordance (an affordance of 0 gives -inf and is never chosen unless every skill has it),
    and picks the argmax; ties go to the first skill in the observation's order. The last step's
    feedback is not used: SayCan is open loop in language and sees the world only through the
    affordances.
    """

    config: SayCanConfig

    def __init__(
        self,
        lm: LanguageModel,
        affordance: AffordanceSource | None,
        config: SayCanConfig | Mapping[str, Any] | None = None,
        **overrides: Any,
    ) -> None:
        cfg = build_config(SayCanConfig, config, overrides)
        if cfg.use_affordance and affordance is None:
            raise InvalidInputError(
                "SayCan multiplies LLM scores by affordances (Algorithm 1) but no affordance source was "
                "given; pass affordance=... or use the 'saycan_novf' planner (use_affordance=False)"
            )
        super().__init__(lm, cfg)
        self.affordance = affordance if cfg.use_affordance else None
        self.name = labelled("saycan" if cfg.use_affordance else "saycan_novf", self.oracles)

    def _reset_grounding(self, task: Task, seed: int) -> None:
        self._query = task.instruction.strip()
        self._query_vector = None
        if self.affordance is not None:
            self.affordance.reset(task, seed)

    def _prefilter(self, observation: Observation) -> list[str]:
        """The done skill and the ``max_options - 1`` admissible skills most similar to the
        instruction, in the observation's order (embeddings of the action set cached on disk, as
        Zero-Shot Planners')."""
        offered = observation.skills
        index = getattr(self, "_option_index", None)
        if index is None or index.skills is not offered:
            index = self._option_index = ActionIndex(self.lm, offered, self.config.done_skill)
        if self._query_vector is None:
            self._query_vector = unit_rows(np.asarray(self.lm.embed([self._query]), dtype=np.float32))[0]
        mask = index.ensure(observation.admissible)
        cos = index.matrix @ self._query_vector.astype(index.matrix.dtype)
        if mask is not None:
            cos = np.where(mask, cos, -np.inf)
        keep = min(self.config.max_options - 1, int(np.isfinite(cos).sum()))
        top = np.argpartition(-cos, keep - 1)[:keep] if keep > 0 else np.array([], dtype=int)
        chosen = {index.positions[i] for i in top}
        return [s for i, s in enumerate(offered) if i in chosen or s == self.config.done_skill]

    def next_step(self, observation: Observation, last: StepResult | None = None) -> Decision:
        """Algorithm 1, lines 3–10, then amend the prompt with the chosen label."""
        skills = self._admissible(observation)
        if self.config.max_options is not None and len(skills) > self.config.max_options:
            skills = self._prefilter(observation)
        skills = self._without_recent(skills)
        if self.affordance is not None and self.config.prune:
            if self.config.prune_by == "llm":
                return self._affordance_pruned_step(observation, skills)
            return self._pruned_step(observation, skills)
        options = [" " + s for s in skills]
        scores = self._score(options)
        llm = np.array([self._llm_value(s) for s in scores])

        affordance: np.ndarray | None = None
        combined = llm.astype(float)
        if self.affordance is not None:
            affordance = _checked_affordances(self.affordance(observation, skills, tuple(self._history)), skills)
            with np.errstate(divide="ignore"):  # log(0) = -inf is intended: that skill is impossible
                combined = combined + np.log(affordance)
        combined = np.where(np.isnan(combined), -np.inf, combined)
        return self._decide(skills, list(scores), llm, affordance, combined, {})

    def _without_recent(self, skills: list[str]) -> list[str]:
        """``skills`` less those chosen in the last ``avoid_recent`` steps (see ``SayCanConfig.avoid_recent``);
        all of them when that would leave none."""
        if not self.config.avoid_recent:
            return skills
        recent = set(self._history[-self.config.avoid_recent:])
        return [s for s in skills if s not in recent] or skills

    def _score(self, options: list[str]) -> list[Any]:
        scores = self.lm.score(self._prompt, options)
        if len(scores) != len(options) or any(s.option != o for s, o in zip(scores, options)):
            raise RuntimeError(f"{self.lm.name} returned scores that do not match the {len(options)} options asked for")
        return list(scores)

    def _llm_value(self, score: Any) -> float:
        return option_logprob(score, self.config.llm_score, self.config.length_alpha)

    def _pruned_step(self, observation: Observation, skills: list[str]) -> Decision:
        """Algorithm 1's argmax with affordance-bound pruning (see ``SayCanConfig.prune``).

        combined_i = log p_LLM,i + log p_aff,i <= log p_aff,i because log p_LLM <= 0. Options are scored
        in descending affordance, ``prune_chunk`` per ``lm.score`` call; once the next option's bound
        log p_aff is strictly below the best combined score so far, neither it nor any later option can
        reach that score, so scoring stops. Unscored options keep combined = -inf, which is exact for
        affordance 0 and strictly below the maximum otherwise, so the first-maximum argmax over the
        observation's order (ties included) is the one full scoring gives *for the same scores*; chunked
        scores differ from one-call scores by ~1e-5, so only a near-tie could differ. Should the model return a
        positive log-prob (a bug in a backend or fake), the bound no longer holds and every remaining
        option with a positive affordance is scored."""
        affordance = _checked_affordances(self.affordance(observation, skills, tuple(self._history)), skills)
        with np.errstate(divide="ignore"):
            bound = np.log(affordance)
        n = len(skills)
        llm = np.full(n, np.nan)
        combined = np.full(n, -np.inf)
        scores: list[Any] = [None] * n
        order = [int(i) for i in np.argsort(-affordance, kind="stable") if affordance[i] > 0]
        positive = False

        def score_chunk(chunk: list[int]) -> tuple[np.ndarray, bool]:
            nonlocal positive
            for i, s in zip(chunk, self._score([" " + skills[i] for i in chunk])):
                scores[i] = s
                llm[i] = self._llm_value(s)
                value = llm[i] + bound[i]
                combined[i] = -np.inf if np.isnan(value) else value
                positive = positive or bool(llm[i] > 0)
            if positive:
                logger.warning("%s returned a positive log-prob; scoring every option (pruning needs log p <= 0)", self.lm.name)
            return combined[chunk], not positive

        _evaluate_until_bound(order, bound, self.config.prune_chunk, score_chunk)
        scored = sum(s is not None for s in scores)
        info = {"scored_options": scored, "pruned_options": n - scored}
        return self._decide(skills, scores, llm, affordance, combined, info)

    def _affordance_pruned_step(self, observation: Observation, skills: list[str]) -> Decision:
        """Algorithm 1's argmax with LLM-bound pruning (``prune_by: llm``).

        combined_i = log p_LLM,i + log p_aff,i <= log p_LLM,i because p_aff <= 1 (checked). Every option is
        scored by the LLM in one call; the affordance is computed ``prune_chunk`` options at a time in
        descending log p_LLM, and once the next option's log p_LLM is strictly below the best combined score
        so far, neither it nor any later option can reach that score. Options left out keep combined = -inf,
        strictly below the maximum, so the first-maximum argmax over the observation's order is the one
        full scoring gives for the same affordances. An option whose log p_LLM is not finite cannot win
        and is never sent to the affordance."""
        scores = self._score([" " + s for s in skills])
        llm = np.array([self._llm_value(s) for s in scores], dtype=float)
        n = len(skills)
        affordance = np.full(n, np.nan)
        combined = np.full(n, -np.inf)
        order = [int(i) for i in np.argsort(-llm, kind="stable") if np.isfinite(llm[i])]

        def afford_chunk(chunk: list[int]) -> tuple[np.ndarray, bool]:
            asked = [skills[i] for i in chunk]
            affordance[chunk] = _checked_affordances(self.affordance(observation, asked, tuple(self._history)), asked)
            with np.errstate(divide="ignore"):
                value = llm[chunk] + np.log(affordance[chunk])
            combined[chunk] = np.where(np.isnan(value), -np.inf, value)
            return combined[chunk], True  # p_aff <= 1 is checked, so the bound always holds

        _evaluate_until_bound(order, llm, self.config.prune_chunk, afford_chunk)
        afforded = int(np.sum(~np.isnan(affordance)))
        info = {"afforded_options": afforded, "pruned_options": n - afforded}
        return self._decide(skills, scores, llm, affordance, combined, info)

    def _decide(self, skills: list[str], scores: list[Any], llm: np.ndarray, affordance: np.ndarray | None,
                combined: np.ndarray, info: dict[str, Any]) -> Decision:
        best = int(np.argmax(combined))  # first maximum on ties
        if not np.isfinite(combined[best]):
            logger.warning(
                "no skill has a finite SayCan score at step %d; choosing '%s'", len(self._history) + 1, skills[best]
            )
            info["no_feasible_skill"] = True
        candidates = []
        for i, (skill, s) in enumerate(zip(skills, scores)):
            aff = None if affordance is None or np.isnan(affordance[i]) else float(affordance[i])
            if s is None:  # pruned: never scored, cannot win (see _pruned_step)
                candidates.append(CandidateScore(skill=skill, llm=None, affordance=aff, combined=float("-inf"),  # type: ignore[arg-type]
                                                 extra={"pruned": True}))
                continue
            unafforded = affordance is not None and aff is None  # its affordance never computed: it cannot win
            candidates.append(CandidateScore(
                skill=skill,
                llm=float(llm[i]),
                affordance=aff,
                combined=float(combined[i]),
                extra={
                    "logprob_sum": float(s.logprob_sum),
                    "logprob_mean": float(s.logprob_mean),
                    "num_tokens": s.num_tokens,
                    **({"pruned": True} if unafforded else {}),
                },
            ))
        return self._commit(skills[best], candidates, info)


def _evaluate_until_bound(order: Sequence[int], bound: np.ndarray, chunk_size: int,
                          evaluate: Callable[[list[int]], tuple[np.ndarray, bool]]) -> None:
    """The loop of both prunings: ``evaluate`` the options in ``order``, ``chunk_size`` at a time, until the
    next option's ``bound`` (an upper bound on its combined score) is strictly below the best combined score
    so far. ``evaluate(chunk)`` fills the chunk's scores and returns its combined scores and whether the bound
    still holds; once it does not, every remaining option is evaluated."""
    best, pos, holds = -np.inf, 0, True
    while pos < len(order):
        chunk: list[int] = []
        while pos < len(order) and len(chunk) < chunk_size and not (holds and bound[order[pos]] < best):
            chunk.append(order[pos])
            pos += 1
        if not chunk:
            break  # every remaining option's bound is below the best combined score
        values, chunk_holds = evaluate(chunk)
        holds = holds and chunk_holds
        best = max(best, float(values.max()))


def _checked_affordances(values: Any, skills: Sequence[str]) -> np.ndarray:
    """The affordance source's output as a float vector in [0, 1], one per skill, or an error."""
    arr = np.asarray(values, dtype=float)
    if arr.shape != (len(skills),):
        raise InvalidInputError(f"the affordance source returned shape {arr.shape} for {len(skills)} skills")
    if np.isnan(arr).any() or (arr < -1e-9).any() or (arr > 1 + 1e-9).any():
        raise InvalidInputError(f"affordances must be probabilities in [0, 1], got {arr.tolist()} for {list(skills)}")
    return np.clip(arr, 0.0, 1.0)


class GenerativePlanner(DialogPlanner):
    """The "Generative" baseline of Sec. 5.5 (in effect Huang et al., 2022, with one greedy sample).

    Each step the LLM greedily writes the next step (``temperature=0``, cut at ``","`` or a newline);
    the text is projected to the admissible skill whose embedding (``lm.embed``) has the highest
    cosine similarity with it, and that skill, not the raw text, is appended to the prompt. Every
    skill's cosine is recorded as its candidate score (``llm = combined = cosine``, no affordance);
    the raw text is in ``Decision.info["generated"]``. Skill-label embeddings are cached on the
    planner, so each label is embedded once and a step costs one ``generate`` and one ``embed`` call.

    An empty generation (the model ended its answer, e.g. wrote a newline at once) is taken as the
    done decision, as an empty sample ends a plan in Huang et al.; it is not projected, since the
    embedding of an empty string carries no meaning.
    """

    name = "generative"
    config: GenerativeConfig

    def __init__(
        self,
        lm: LanguageModel,
        config: GenerativeConfig | Mapping[str, Any] | None = None,
        **overrides: Any,
    ) -> None:
        super().__init__(lm, build_config(GenerativeConfig, config, overrides))
        self._skill_vectors: dict[str, np.ndarray] = {}

    def next_step(self, observation: Observation, last: StepResult | None = None) -> Decision:
        """Generate one step, project it to the nearest admissible skill, amend the prompt with it."""
        skills = self._admissible(observation)
        params = GenerationParams(temperature=0.0, max_new_tokens=self.config.max_new_tokens, stop=GENERATIVE_STOP)
        generation = self.lm.generate(self._prompt, params)[0]
        text = generation.text.strip().rstrip(".").strip()
        info: dict[str, Any] = {"generated": generation.text, "finish_reason": generation.finish_reason}
        if not text:
            info["empty_generation"] = True
            return self._commit(self.config.done_skill, [], info)

        cosines = self._cosines(text, skills)
        best = int(np.argmax(cosines))
        info["cosine"] = float(cosines[best])
        candidates = [
            CandidateScore(skill=s, llm=float(c), affordance=None, combined=float(c), extra={"score": "cosine"})
            for s, c in zip(skills, cosines)
        ]
        return self._commit(skills[best], candidates, info)

    def _cosines(self, text: str, skills: Sequence[str]) -> np.ndarray:
        """Cosine similarity of ``text`` with each skill label, embedding only labels not yet cached."""
        missing = [s for s in dict.fromkeys(skills) if s not in self._skill_vectors]
        vectors = np.asarray(self.lm.embed([*missing, text]), dtype=float)
        if vectors.ndim != 2 or vectors.shape[0] != len(missing) + 1:
            raise RuntimeError(f"{self.lm.name}.embed returned shape {vectors.shape} for {len(missing) + 1} texts")
        vectors = unit_rows(vectors)
        self._skill_vectors.update(zip(missing, vectors[:-1]))
        matrix = np.stack([self._skill_vectors[s] for s in skills])
        return matrix @ vectors[-1]


# ---------------------------------------------------------------------------------------------
# Factories ``(lm, affordance=None, **options) -> Planner``, registered in groundplan.planners
# ---------------------------------------------------------------------------------------------


def make_saycan(lm: LanguageModel, affordance: AffordanceSource | None = None, **options: Any) -> Planner:
    """SayCan (Algorithm 1); needs an affordance source. ``options``: fields of :class:`SayCanConfig`."""
    return SayCanPlanner(lm, affordance, **options)


def make_saycan_novf(lm: LanguageModel, affordance: AffordanceSource | None = None, **options: Any) -> Planner:
    """The "No VF" ablation (Sec. 5.5): SayCan ranked by the LLM score alone; ``affordance`` is
    accepted for a uniform factory signature and not used."""
    if options.pop("use_affordance", False):
        raise InvalidInputError("'saycan_novf' is SayCan without affordances; use the 'saycan' planner to use them")
    return SayCanPlanner(lm, affordance, use_affordance=False, **options)


def make_generative(lm: LanguageModel, affordance: AffordanceSource | None = None, **options: Any) -> Planner:
    """The "Generative" ablation (Sec. 5.5); ``affordance`` is accepted for a uniform factory signature
    and not used (the paper notes this method cannot be combined with affordances).
    ``options``: fields of :class:`GenerativeConfig`."""
    if affordance is not None:
        logger.debug("the generative planner does not use affordances; ignoring %r", affordance)
    return GenerativePlanner(lm, **options)
