"""SayCanPay (Hazra et al., "SayCanPay: Heuristic Planning with LLMs using Learnable Domain Knowledge").

Each step the LM (Say) proposes m candidate actions by token-level diverse beam search (Sec. 5;
Table 7: 6 beams in 3 groups, diversity penalty 2.0, 10 new tokens) after a few-shot prompt in the
paper's format (App. A.1)::

    [Goal] <g>
    [Initial State] <o0>
    [Step 1] <a1>
    ...

Every candidate is mapped to the nearest admissible action by edit distance (Sec. 7.1, as Huang et
al. 2022) and duplicates are merged (the highest p_say is kept, or the sum with ``merge: sum``). The
decoding score (Eqs. 4–6) is a sum of logs, each with the authors' code's 1e-3 floor:

    Say        log(p_say + ε)
    SayCan     log(p_say + ε) + log(p_can + ε)
    SayCanPay  log(p_say + ε) + log(p_can + ε) + log(p_pay + ε)

p_say is the candidate's length-normalised model probability by default (``say_score``); p_can and
p_pay come from a grounding source with ``score_sequences`` (``saycanpay_learned``: trained Can/Pay;
``saycanpay_oracle``: simulator preconditions), which scores all candidates of a step in one batch.

Decoding strategies (Sec. 4, 5.1, 5.2; Fig. 2):

- ``greedy_token``: the plain LM greedily writes the next step (Planning LM), mapped to an action.
- ``greedy_action``: the best-scoring candidate each step (Eqs. 4–6).
- ``beam_action``: Eq. 7 (Sec. 5.2). The planner plans offline, as the paper does (Sec. 2: "complete
  plan generation while maintaining an internal world state"; Sec. 4: only o_0 is observed): at the
  first step it searches over whole action sequences using only the LM and Can/Pay — no env calls, no
  ground truth: the LM and the Can/Pay models condition on the text history (goal, initial observation,
  actions so far). It keeps k = 3 sequences, expands each with the m candidates, scores all k×m with
  one batched Can/Pay call, keeps the top k by accumulated score; a sequence that chooses the done
  action leaves the beam (so k shrinks), and the search ends when all k have left or after
  ``max_steps`` actions. The plan is the finished sequence with the best length-normalised score
  (among active beams the accumulated sum and its mean rank alike, since they share a length — the
  authors' code ranks by the sum and normalises at the end, which is the same thing). Each
  ``next_step`` then returns the plan's next action; env feedback is not used (offline planning).

  Like for like with Greedy-Action: both map proposals onto the env's list of admissible actions
  (Sec. 7.1), which Greedy-Action reads from the observation of the state it is in. Beam-Action is given
  the env's :class:`~groundplan.envs.base.ActionModel` (``use_action_model``; the rollout passes the one
  the env declares: its symbolic rules without the goal, a light model such as BabyAI's, or the fixed
  list of an env whose list never changes), advances it along each beam and offers each beam, at each
  depth, the list of the state that beam predicts (a step the model says fails leaves the state as it
  was, as the env's failed step does). The model is used for nothing else: feasibility stays Can's.
  Without one it offers the first observation's list at every depth; every decision's info says which
  (``actions_from``: "action model" or "first observation"), and the tables refuse to compare the two
  decoders on such rows where the env's list can change.

Perfect-Say ablation (``perfect_say``, oracle): the LM is replaced by the expert's next action (from
``task.reference_plan``) plus ``num_distractors`` random admissible actions, each with p_say = 1/(1+d),
so Can and Pay alone decide; it reads ground truth, so it needs ``oracle: true``, and the planner declares
it (``SayCanPayConfig.PERFECT_SAY``, "expert plan", as it does an oracle grounding source's), which its label
carries.

Every candidate of a step goes into the trace as a ``CandidateScore`` (llm = log p_say,
affordance = p_can, combined = the decoding score) with ``extra`` = {say, can, pay, acc, texts, ...};
for ``beam_action`` the whole search (every depth's k×m expansions) is in the first decision's info.
"""
from __future__ import annotations

import logging
import math
import random
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Mapping, Sequence

from pydantic import ConfigDict, Field, field_validator, model_validator

from groundplan.core.errors import InvalidInputError
from groundplan.core.truth import OracleDeclaration, Truth, read, unique
from groundplan.core.types import CandidateScore, Decision, Observation, StepResult, Task
from groundplan.core.validation import MAX_INSTRUCTION_CHARS, build_config, validate_instruction
from groundplan.envs.base import ActionModel, listed_actions
from groundplan.grounding.base import CanPaySource
from groundplan.grounding.canpay.lineage import Lineage, PromptExamples, prompt_lineage
from groundplan.llm.base import GenerationParams, LanguageModel
from groundplan.planners.base import EpisodeProgress, Planner, PlannerOptions, labelled

logger = logging.getLogger(__name__)


class SayCanPayConfig(PlannerOptions, PromptExamples):
    """Options of the ``saycanpay`` planner (defaults: Table 7 and the authors' code)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    PROMPT_FIELDS = ("prompt",)

    prompt: str = Field("saycanpay_kitchen", description="Few-shot examples in App. A.1's [Goal]/[Initial State]/"
                        "[Step n] format: a shipped prompt name (groundplan/planners/prompts) or a .txt path.")
    decoding: Literal["greedy_token", "greedy_action", "beam_action"] = Field(
        "greedy_action", description="Greedy-Token, Greedy-Action (Sec. 5.1) or Beam-Action (Sec. 5.2).")
    score: Literal["say", "saycan", "saycanpay"] = Field("saycanpay", description="Decoding score (Eqs. 4, 5, 6).")
    say_score: Literal["mean", "sum", "beam"] = Field(
        "mean", description="p_say of a candidate: exp of its mean token log-prob (length-normalised, default), of "
        "the sum, or of beam search's own (diversity-penalised, length-normalised) score.")
    num_candidates: int = Field(6, ge=1, description="m: beams of the token-level beam search = candidates per step.")
    num_groups: int = Field(3, ge=1, description="Beam groups of the diverse beam search (Table 7: 3).")
    diversity_penalty: float = Field(2.0, ge=0, description="Hamming diversity penalty between groups (Table 7).")
    max_new_tokens: int = Field(10, ge=1, description="Longest candidate in tokens (Table 7: 10).")
    beam_size: int = Field(3, ge=1, description="k: action sequences kept by Beam-Action (Table 7: 3).")
    floor: float = Field(1e-3, gt=0, description="ε added inside every log (the authors' code: 1e-3).")
    merge: Literal["max", "sum"] = Field("max", description="How duplicates (candidates mapped to the same action) "
                                         "merge their p_say: the highest, or the sum (capped at 1).")
    done_skill: str = Field("done", min_length=1, description="The action that ends a plan.")
    max_steps: int = Field(20, ge=1, description="Most actions per plan, done included (the paper's code: 20).")
    perfect_say: bool = Field(False, description="Perfect-Say ablation: the expert's next action plus distractors "
                              "replace the LM's candidates (reads task.reference_plan; needs oracle: true).")
    num_distractors: int = Field(2, ge=0, description="Distractors of the Perfect-Say ablation.")
    sample_temperature: float = Field(0.0, ge=0, le=100, description="Greedy-Action only: 0 takes the best-scoring "
                                      "candidate (the paper); T > 0 samples one with probability proportional to "
                                      "exp(score / T), seeded by the episode seed (exploration for `groundplan "
                                      "improve`'s rollouts; not in the paper).")
    oracle: bool = Field(False, description="Declares that this planner reads ground truth (Perfect-Say or an "
                         "oracle grounding source); its label must say so.")
    max_instruction_chars: int = Field(MAX_INSTRUCTION_CHARS, ge=1, description="Longest instruction accepted.")

    @field_validator("prompt")
    @classmethod
    def _prompt_exists(cls, value: str) -> str:
        from groundplan.planners.saycan import load_prompt

        load_prompt(value)
        return value

    def prompt_lineage(self) -> Lineage:
        """The tasks the prompt's few-shot examples show (they count as train: App. A.1)."""
        from groundplan.planners.saycan import load_prompt

        return prompt_lineage(f"prompt {self.prompt}", load_prompt(self.prompt))

    #: Perfect-Say's candidates come from the task's reference plan (the expert's)
    PERFECT_SAY: ClassVar[OracleDeclaration] = OracleDeclaration(
        name="expert plan", reads=frozenset({Truth.REFERENCE_PLAN}),
        wording="the expert's next action from the task's reference plan among the candidates, with random "
                "distractors (SayCanPay's Perfect-Say ablation)")

    @property
    def declarations(self) -> tuple[OracleDeclaration, ...]:
        """Perfect-Say reads the expert plan: the label says so."""
        return (self.PERFECT_SAY,) if self.perfect_say else ()

    @property
    def llm_needs(self) -> tuple[str, ...]:
        """Greedy-Token decodes; Greedy- and Beam-Action propose by token-level beam search (Sec. 5);
        Perfect-Say asks the LM nothing."""
        if self.perfect_say:
            return ()
        return ("generate",) if self.decoding == "greedy_token" else ("beam_search",)

    @model_validator(mode="after")
    def _consistent(self) -> "SayCanPayConfig":
        if self.num_candidates % self.num_groups:
            raise ValueError(f"num_candidates ({self.num_candidates}) must be a multiple of num_groups ({self.num_groups})")
        if self.perfect_say and not self.oracle:
            raise ValueError("perfect_say reads the expert plan (ground truth): set oracle: true and label the row oracle")
        if self.beam_size > self.num_candidates:
            raise ValueError("beam_size (k) must not exceed num_candidates (m), as in Sec. 5.2")
        if self.sample_temperature and self.decoding != "greedy_action":
            raise ValueError("sample_temperature samples among Greedy-Action's candidates: set decoding: greedy_action")
        return self


# --------------------------------------------------------------------------------------- helpers
def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance (insert, delete, substitute: 1 each), by rapidfuzz's C++ implementation."""
    from rapidfuzz.distance import Levenshtein

    return int(Levenshtein.distance(a, b))


def nearest_action(text: str, actions: Sequence[str]) -> str:
    """The admissible action closest to ``text`` by edit distance (ties: the first listed). rapidfuzz
    scans VirtualHome's ~4,400 actions in under a millisecond, where a Python loop took ~0.4 s a step."""
    from rapidfuzz import process
    from rapidfuzz.distance import Levenshtein

    if not actions:
        raise InvalidInputError("no admissible actions to map a candidate to")
    return process.extractOne(text, actions, scorer=Levenshtein.distance)[0]


def clean(text: str) -> str:
    """A generated step without surrounding space and a closing full stop."""
    return text.strip().rstrip(".").strip()


def build_query(few_shot: str, goal: str, init_obs: str, history: Sequence[str]) -> str:
    """App. A.1's prompt for the next step after ``history``."""
    lines = [few_shot.rstrip("\n"), "", f"[Goal] {goal}", f"[Initial State] {init_obs}"]
    lines += [f"[Step {i + 1}] {a}" for i, a in enumerate(history)]
    return "\n".join(lines) + f"\n[Step {len(history) + 1}]"


@dataclass
class Candidate:
    action: str
    say_logp: float  # log p_say (un-floored)
    texts: list[str] = field(default_factory=list)


@dataclass
class Expansion:
    parent: int
    prefix: tuple[str, ...]
    candidate: Candidate
    can: float = 1.0
    pay: float = 1.0
    step_score: float = 0.0
    acc: float = 0.0


# --------------------------------------------------------------------------------------- planner
class SayCanPayPlanner(EpisodeProgress, Planner):
    """SayCanPay with the decoding strategy and score of its config (module doc)."""

    name = "saycanpay"

    def __init__(self, lm: LanguageModel, affordance: CanPaySource | None = None,
                 config: SayCanPayConfig | Mapping[str, Any] | None = None,
                 **overrides: Any) -> None:
        from groundplan.planners.saycan import load_prompt

        self.config: SayCanPayConfig = build_config(SayCanPayConfig, config, overrides)
        c = self.config
        if affordance is not None and not isinstance(affordance, CanPaySource):
            raise InvalidInputError(f"SayCanPay's grounding must be a Can/Pay source (affordance: saycanpay_learned "
                                    f"or saycanpay_oracle), not {type(affordance).__name__}")
        if c.score != "say" and c.decoding != "greedy_token" and affordance is None:
            raise InvalidInputError(f"score '{c.score}' needs a Can/Pay grounding source "
                                    "(affordance: saycanpay_learned or saycanpay_oracle)")
        if c.perfect_say and c.decoding == "greedy_token":
            raise InvalidInputError("perfect_say replaces candidate proposals; Greedy-Token has none")
        source = None if affordance is None else affordance.declaration
        if source is not None and source.is_oracle and not c.oracle:
            raise InvalidInputError(f"the grounding source reads ground truth ({source.name}): set oracle: true "
                                    "and label the row oracle")
        self.lm = lm
        self.affordance = affordance
        self._few_shot = load_prompt(c.prompt)
        self._task: Task | None = None
        self._goal = ""
        self._init_obs = ""
        self._history: list[str] = []
        self._plan: list[str] | None = None
        self._action_model: ActionModel | None = None
        self._siblings: dict[int, list[dict[str, Any]]] = {}
        self._search_info: dict[str, Any] = {}
        self._rng = random.Random(0)
        self.stats = {"proposals": 0, "canpay_calls": 0, "canpay_items": 0}
        self.name = labelled(self.name, self.oracles)

    @property
    def declarations(self) -> tuple[OracleDeclaration, ...]:
        """The config's (Perfect-Say reads the expert plan) and the grounding source's (e.g. the
        simulator's feasibility), each once."""
        return unique([*self.config.declarations, *super().declarations])

    @property
    def max_steps(self) -> int:
        return self.config.max_steps

    @property
    def prompt(self) -> str:
        return build_query(self._few_shot, self._goal, self._init_obs, self._history) if self._task else ""

    def reset(self, task: Task, observation: Observation, seed: int = 0) -> None:
        self._goal = validate_instruction(task.instruction, self.config.max_instruction_chars)
        self._task = task
        self._init_obs = observation.text
        self._begin_episode()
        self._plan = None
        self._action_model = None
        self._rng = random.Random(seed)
        if self.affordance is not None:
            self.affordance.reset(task, seed)

    def use_action_model(self, model: ActionModel | None) -> None:
        """The env's action model for this episode: Beam-Action offers each beam the actions listed in
        the state it predicts (module doc); the other decoders read the observation they are given."""
        self._action_model = model

    # ----------------------------------------------------------------- candidates (Say)
    def _actions(self, observation: Observation) -> list[str]:
        return self._with_done(listed_actions(observation))

    def _with_done(self, actions: Sequence[str]) -> list[str]:
        skills = list(actions)
        if not skills:
            raise InvalidInputError("no actions are listed to map candidates to")
        if self.config.done_skill not in skills:
            skills.append(self.config.done_skill)
        return skills

    def candidates(self, history: Sequence[str], actions: Sequence[str]) -> list[Candidate]:
        """The m proposals after ``history``, mapped to admissible actions and merged."""
        c = self.config
        if c.perfect_say:
            return self._perfect_say(history, actions)
        from groundplan.llm.beam_search import BeamSearchParams, propose

        params = BeamSearchParams(num_beams=c.num_candidates, num_groups=c.num_groups, diversity_penalty=c.diversity_penalty,
                                  max_new_tokens=c.max_new_tokens, stop=("\n",))
        proposals = propose(self.lm, build_query(self._few_shot, self._goal, self._init_obs, history), params)
        self.stats["proposals"] += 1
        merged: dict[str, Candidate] = {}
        for p in proposals:
            text = clean(p.text)
            action = nearest_action(text, actions) if text else c.done_skill  # an empty step ends the plan
            logp = {"mean": p.logprob_mean, "sum": p.logprob_sum, "beam": p.score}[c.say_score]
            if action in merged:
                m = merged[action]
                m.say_logp = max(m.say_logp, logp) if c.merge == "max" else min(0.0, math.log(math.exp(m.say_logp) + math.exp(logp)))
                m.texts.append(p.text)
            else:
                merged[action] = Candidate(action, logp, [p.text])
        return list(merged.values())

    def _perfect_say(self, history: Sequence[str], actions: Sequence[str]) -> list[Candidate]:
        ref = list(read(self._task, Truth.REFERENCE_PLAN, self) or ()) if self._task else []
        expert = ref[len(history)] if len(history) < len(ref) else self.config.done_skill
        others = [a for a in actions if a != expert]
        picks = [expert] + self._rng.sample(others, min(self.config.num_distractors, len(others)))
        logp = -math.log(len(picks))
        return [Candidate(a, logp, ["<oracle>" if a == expert else "<distractor>"]) for a in picks]

    # ----------------------------------------------------------------- scoring (Can, Pay)
    def _score(self, expansions: list[Expansion]) -> None:
        """Eqs. 4–6 for every expansion, with one batched Can/Pay call for all of them."""
        c = self.config
        if c.score != "say" and expansions:
            out = self.affordance.score_sequences(self._goal, self._init_obs, [(e.prefix, e.candidate.action) for e in expansions])
            self.stats["canpay_calls"] += 1
            self.stats["canpay_items"] += len(expansions)
            for e, can, pay in zip(expansions, out.can, out.pay):
                e.can = float(can)
                e.pay = float(pay) if c.score == "saycanpay" else 1.0
        eps = c.floor
        for e in expansions:
            s = math.log(math.exp(e.candidate.say_logp) + eps)
            if c.score != "say":
                s += math.log(e.can + eps)
            if c.score == "saycanpay":
                s += math.log(e.pay + eps)
            e.step_score = s

    def _candidate_scores(self, expansions: list[Expansion]) -> list[CandidateScore]:
        return [CandidateScore(skill=e.candidate.action, llm=e.candidate.say_logp,
                               affordance=None if self.config.score == "say" else e.can, combined=e.step_score,
                               extra={"say": math.exp(e.candidate.say_logp), "can": e.can, "pay": e.pay, "acc": e.acc,
                                      "texts": list(e.candidate.texts), "beam": e.parent, "score": self.config.score})
                for e in expansions]

    # ----------------------------------------------------------------- decoding
    def next_step(self, observation: Observation, last: StepResult | None = None) -> Decision:
        self._check_running()
        actions = self._actions(observation)
        d = self.config.decoding
        if d == "greedy_token":
            return self._greedy_token(actions)
        if d == "greedy_action":
            exps = [Expansion(0, tuple(self._history), cand) for cand in self.candidates(self._history, actions)]
            self._score(exps)
            best = self._pick(exps)
            info = {"sampled_at": self.config.sample_temperature} if self.config.sample_temperature else {}
            return self._commit(best.candidate.action, self._candidate_scores(exps), info)
        return self._beam_step(actions)

    def _pick(self, exps: list[Expansion]) -> Expansion:
        """The best-scoring expansion, or at ``sample_temperature`` T > 0 one drawn with probability
        softmax(score / T) from the episode-seeded generator."""
        t = self.config.sample_temperature
        if t <= 0:
            return max(exps, key=lambda e: e.step_score)
        top = max(e.step_score for e in exps)
        weights = [math.exp((e.step_score - top) / t) for e in exps]
        return self._rng.choices(exps, weights=weights, k=1)[0]

    def _greedy_token(self, actions: list[str]) -> Decision:
        params = GenerationParams(temperature=0.0, max_new_tokens=self.config.max_new_tokens, stop=("\n",))
        gen = self.lm.generate(build_query(self._few_shot, self._goal, self._init_obs, self._history), params)[0]
        text = clean(gen.text)
        action = nearest_action(text, actions) if text else self.config.done_skill
        cand = CandidateScore(skill=action, llm=gen.logprob_mean, affordance=None, combined=gen.logprob_mean,
                              extra={"texts": [gen.text], "say": math.exp(gen.logprob_mean)})
        return self._commit(action, [cand], {"generated": gen.text})

    def _beam_step(self, actions: list[str]) -> Decision:
        info: dict[str, Any] = {}
        if self._plan is None:
            self._plan, info = self.beam_search(actions)
        t = len(self._history)
        action = self._plan[t] if t < len(self._plan) else self.config.done_skill
        siblings = [CandidateScore(**c) for c in self._siblings.get(t, [])]
        info["plan"] = list(self._plan)
        info.update(self._search_info)
        return self._commit(action, siblings, info)

    def _offered(self, state: Any, first: list[str]) -> list[str]:
        """The actions a beam in ``state`` is offered: the action model's list there, or ``first``."""
        return first if self._action_model is None else self._with_done(self._action_model.actions(state))

    def _advance(self, state: Any, action: str) -> Any:
        """The beam's predicted state after ``action``; a step the model says fails changes nothing."""
        if self._action_model is None:
            return None
        after = self._action_model.step(state, action)
        return state if after is None else after

    def beam_search(self, actions: list[str]) -> tuple[list[str], dict[str, Any]]:
        """Eq. 7 over whole action sequences (module doc); returns the plan and the search record.
        ``actions`` is the first observation's list, offered at every depth when no action model was given."""
        c = self.config
        model = self._action_model
        start = model.initial() if model is not None else None
        self._search_info = {"actions_from": "first observation" if model is None else "action model"}
        if model is not None and self._offered(start, actions) != actions:
            logger.warning("the action model's first list differs from the first observation's")
            self._search_info["first_list_agrees"] = False
        beams: list[tuple[tuple[str, ...], float, Any]] = [((), 0.0, start)]
        finished: list[tuple[tuple[str, ...], float]] = []
        search: list[list[dict[str, Any]]] = []
        by_prefix: dict[tuple[str, ...], list[Expansion]] = {}
        for depth in range(c.max_steps):
            if not beams:
                break
            exps = [Expansion(i, prefix, cand) for i, (prefix, _, state) in enumerate(beams)
                    for cand in self.candidates(prefix, self._offered(state, actions))]
            self._score(exps)
            for e in exps:
                e.acc = beams[e.parent][1] + e.step_score
                by_prefix.setdefault(e.prefix, []).append(e)
            slots = c.beam_size - len(finished)
            top = sorted(exps, key=lambda e: e.acc, reverse=True)[:slots]
            kept = {id(e) for e in top}
            search.append([{"beam": e.parent, "action": e.candidate.action, "say": math.exp(e.candidate.say_logp),
                            "can": e.can, "pay": e.pay, "acc": e.acc, "kept": id(e) in kept} for e in exps])
            expanded, beams = beams, []
            for e in top:
                seq = e.prefix + (e.candidate.action,)
                if e.candidate.action == c.done_skill or depth == c.max_steps - 1:
                    finished.append((seq, e.acc))  # a finished beam leaves
                else:
                    beams.append((seq, e.acc, self._advance(expanded[e.parent][2], e.candidate.action)))
        pool = finished or [(seq, acc) for seq, acc, _ in beams]
        plan, acc = max(pool, key=lambda s: s[1] / max(len(s[0]), 1))
        # the trace shows, at each step, the expansions of the plan's own prefix (its siblings)
        self._siblings = {}
        for t in range(len(plan)):
            exps = by_prefix.get(tuple(plan[:t]), [])
            self._siblings[t] = [vars(s) for s in self._candidate_scores(exps)]
        info = {"search": search, "plan_score": acc, "plan_score_normalised": acc / max(len(plan), 1),
                "finished": [[list(s), a] for s, a in finished], **self._search_info}
        return list(plan), info

    def _commit(self, action: str, candidates: list[CandidateScore], info: dict[str, Any]) -> Decision:
        done = action == self.config.done_skill
        n = len(self._history) + 1
        if done:
            self._finished = True
        else:
            self._history.append(action)
        # "done" ends the plan without joining the history the prompt is built from, so it appends nothing
        delta = "" if done else f" {action}\n[Step {n + 1}]"
        return Decision(skill=action, done=done, candidates=candidates, prompt_delta=delta, info=info)


def make_saycanpay(lm: LanguageModel, affordance: CanPaySource | None = None, **options: Any) -> Planner:
    """SayCanPay; ``options`` are the fields of :class:`SayCanPayConfig`."""
    return SayCanPayPlanner(lm, affordance, **options)
