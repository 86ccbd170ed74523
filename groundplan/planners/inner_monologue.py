"""Inner Monologue (Huang et al. 2022) for the simulated tabletop: closed-loop planning with textual
feedback appended to one growing prompt. With "success" (and "object" where the env lists objects) it runs
on any env whose skills are text, e.g. EAI's VirtualHome tasks (``[WALK] <kitchen>``): a generated line that
is a skill verbatim is taken as it is (:func:`match_skill`), and an env without an object lister gets no
``Scene:`` line.

The prompt follows the paper's sim listing (App. D, Listing 1) line by line::

    Scene: There is a cyan, yellow block and a green bowl.      <- objects, listed once at the start
    Human: <instruction>
    Robot thought: Goal state is ["…", "…"].                    <- "scene" only (generated)
    Robot action: Pick the cyan block and place it on the top left corner.   <- generated
    Successful action: True                                     <- "success"
    Scene: There is a cyan, yellow block and a green bowl.      <- "object" (re-listed after each step)
    Scene: You have completed ["Cyan block is on the top left corner."]      <- "scene"
    Robot thought: Yellow block is not on the top left corner.  <- "scene" (generated)
    Robot ask: Is the yellow block on the top left corner?      <- "human" (generated, optional)
    Human: No.                                                  <- scripted responder
    Robot action: …

Feedback kinds are selected with ``feedback`` (any subset of object, success, scene, human). ``[]`` is
the open-loop "LLM Object" baseline: objects listed once at the start, no further feedback. The
few-shot file holds every line kind; :func:`filter_examples` keeps the lines of the selected kinds
(in open-loop style prompts — none of success/scene/human — failed attempts are dropped from the
examples, since nothing in the prompt would explain the retry). The examples show failed actions being
retried: that is the only source of IM's replanning (the paper gives no other replanning rule).

Each step the LM generates greedily (``temperature=0``), stopping at a newline. The action text is
parsed into (object to pick, place target); when it does not parse, or names something not
admissible, it is mapped to the admissible skill with the highest embedding cosine (``lm.embed``),
recorded in ``Decision.info["projection"]``; the admissible action, not the raw text, goes into the
prompt. "Done." (or a ``Robot thought: None.`` in scene mode) ends the episode. With ``human``, the LM
writes after ``Robot`` and may choose ``ask: <question>``; a scripted responder answers
(:class:`ScriptedHuman`).

Scene descriptions check the sub-goals parsed from the LM's first ``Goal state is [...]`` thought
with the success detector (App. A.1). If none parse (small models), the scene reports progress on no
sub-goals. ``subgoal_fallback=True`` instead hands the planner the task's reference sub-goals: that is
ground truth (an oracle), off by default; when on, the planner's label ends in "(oracle sub-goals)"
(:attr:`InnerMonologuePlanner.oracles`) and each trace records ``info["subgoals_source"] = "task"``.

Simulator truth read at planning time, and the option that turns it on (``InnerMonologueConfig.declarations``,
each read through :func:`groundplan.core.truth.read`):

* ``subgoal_fallback`` → the task's reference sub-goals (``task.metadata["subgoals"]``), "sub-goals" (oracle);
* ``"human"`` feedback → the scripted human answers "are we done / what next" questions from the
  task's reference sub-goals and "is X on Y" from the true poses (IM's human knows the task, Sec. 3.3),
  "scripted human" (oracle);
* ``"scene"`` feedback → which sub-goals hold, by the success detector on the true object poses, and the
  scene's object names to parse the goal thought with: IM's simulated scene description ("ground truth +
  heuristics", App. A.1), a stand-in for a perception module
  (:data:`~groundplan.perception.scene_description.SCENE_FROM_TRUE_POSES`): the label stays, the tables mark it;
* ``"success"`` feedback → whether the last action succeeded, as the env judges it from its true state: on
  the tabletop the same success detector on the true poses (App. A.1's Success feedback, "ground truth +
  heuristics" in simulation), in VirtualHome its executor's check of the true graph. It stands in for the
  paper's success detector (Sec. 3.3: engineered on ground truth in simulation, learned on the real
  robot), a stand-in like the scene's (``InnerMonologueConfig.SUCCESS``). The planner reads it as the
  step result's ``success``, not from the state.

The object list ("object" feedback, the first ``Scene:`` line) is the object lister's, a percept
(:func:`groundplan.core.truth.percept`). With only that (or no feedback), the planner never touches
``task.goal``, ``task.reference_plan``, ``task.metadata`` or the simulator state, and the episode loop
hands it none of them.
"""
from __future__ import annotations

import logging
import re
from typing import Any, ClassVar, Literal, Mapping, Sequence

import numpy as np
from pydantic import ConfigDict, Field, field_validator

from groundplan.core.errors import InvalidInputError
from groundplan.core.truth import (
    DeclaresTruth,
    OracleDeclaration,
    Truth,
    percept,
    read,
)
from groundplan.core.types import (
    CandidateScore,
    Decision,
    Observation,
    StepResult,
    Task,
)
from groundplan.core.validation import (
    MAX_INSTRUCTION_CHARS,
    validate_instruction,
    validate_options,
)
from groundplan.grounding.base import AffordanceSource
from groundplan.llm.base import GenerationParams, LanguageModel
from groundplan.perception.object_lister import describe_objects
from groundplan.perception.scene_description import (
    SCENE_FROM_TRUE_POSES,
    SubGoal,
    completed,
    describe_progress,
    parse_goal_state,
    parse_subgoal,
)
from groundplan.perception.success_detector import detect_success
from groundplan.planners.base import EpisodeProgress, Planner, PlannerOptions, labelled
from groundplan.planners.saycan import load_prompt

logger = logging.getLogger(__name__)

FeedbackKind = Literal["object", "success", "scene", "human"]
FEEDBACK_KINDS: tuple[str, ...] = ("object", "success", "scene", "human")
_DONE_WORDS = {"done", "stop", "robot.stop()", "none", "finish", "finished"}
_ACTION = re.compile(
    r"^\s*(?:robot\.)?pick(?: up)? (?:the )?(\w+ block)(?:,| and)? (?:place|put) (?:it )?(?:on top of|on|in|into|onto) "
    r"(?:the )?(.+?)\s*\.?\s*$",
    re.IGNORECASE,
)


class InnerMonologueConfig(PlannerOptions):
    """Options of :class:`InnerMonologuePlanner`."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    PROMPT_FIELDS = ("prompt", "feedback", "skip_leading_break")

    prompt: str = Field("inner_monologue_tabletop", description="Few-shot file in groundplan/planners/prompts "
                        "(or a .txt path) in IM's sim format; filtered to the selected feedback kinds.")
    feedback: list[FeedbackKind] = Field(
        default_factory=lambda: ["object", "scene"],
        description="Feedback kinds: 'object' (re-list detected objects after each step), 'success' "
        "('Successful action: True/False'), 'scene' (achieved sub-goals + generated thoughts), 'human' "
        "(the LM may ask, a scripted human answers). [] = open loop ('LLM Object'). Default: IM's "
        "best sim variant, Object + Scene.")
    max_steps: int = Field(15, ge=1, description="Most decisions per episode (IM: 15).")
    done_skill: str = Field("done", min_length=1, description="Env skill that ends the episode.")
    max_new_tokens: int = Field(32, ge=1, description="Longest generated action / question.")
    thought_max_new_tokens: int = Field(96, ge=1, description="Longest generated thought (the goal list is long).")
    max_questions: int = Field(2, ge=0, description="Most questions per step with 'human' feedback.")
    subgoal_fallback: bool = Field(False, description="ORACLE: use the task's reference sub-goals "
                                   "(ground truth) when none of the generated goal state parses. Off by default; "
                                   "when on, the label ends in '(oracle sub-goals)' and traces record "
                                   "subgoals_source='task'.")
    human_answers: dict[str, str] = Field(default_factory=dict, description="Scripted answers: a question "
                                          "containing the key (case-insensitive) gets the value; checked first.")
    skip_leading_break: bool = Field(False, description="When the LM's line opens with a line break, read the "
                                     "line after it (one more greedy call) instead of an empty action. For prompts "
                                     "that end in their own 'Output:' line (EAI's); off as IM's few-shot prompts "
                                     "keep the action on the 'Robot action:' line.")
    max_instruction_chars: int = Field(MAX_INSTRUCTION_CHARS, ge=1)

    #: ``subgoal_fallback``: the task's reference sub-goals
    SUBGOALS: ClassVar[OracleDeclaration] = OracleDeclaration(
        name="sub-goals", reads=frozenset({Truth.METADATA}),
        wording="the task's reference sub-goals when the generated goal state does not parse (subgoal_fallback)")
    #: "human" feedback: the scripted human (:class:`ScriptedHuman`)
    SCRIPTED_HUMAN: ClassVar[OracleDeclaration] = OracleDeclaration(
        name="scripted human", reads=frozenset({Truth.METADATA, Truth.STATE}),
        wording="a scripted human answering from the task's reference sub-goals and the true object poses "
                "(Inner Monologue Sec. 3.3's human, who knows the task)")
    #: "scene" feedback: progress on the sub-goals from the true poses (IM's simulated scene description)
    SCENE: ClassVar[OracleDeclaration] = SCENE_FROM_TRUE_POSES
    #: "success" feedback: the env's verdict on the last action, from its true state (IM's simulated
    #: success detector: the scene's detector on the tabletop)
    SUCCESS: ClassVar[OracleDeclaration] = OracleDeclaration(
        name="success from true state", reads=frozenset({Truth.STATE}), stands_in=True,
        wording="whether the last action succeeded, as the simulator judges it from its true state (the "
                "tabletop: the 4 cm rule on the true object poses; VirtualHome: its executor's check of the true "
                "graph), standing in for Inner Monologue's success detector (App. A.1: ground truth + heuristics)")

    @property
    def declarations(self) -> tuple[OracleDeclaration, ...]:
        """The scene description from the true poses ("scene", a stand-in), the success verdict from the
        true state ("success", a stand-in), the reference sub-goals (``subgoal_fallback``) and the scripted
        human, who answers from the task and the true poses."""
        return tuple(d for d, on in ((self.SCENE, "scene" in self.feedback), (self.SUCCESS, "success" in self.feedback),
                                     (self.SUBGOALS, self.subgoal_fallback),
                                     (self.SCRIPTED_HUMAN, "human" in self.feedback)) if on)

    @property
    def llm_needs(self) -> tuple[str, ...]:
        """Inner Monologue writes actions, thoughts and questions (Sec. 4)."""
        return ("generate",)

    @field_validator("feedback")
    @classmethod
    def _unique(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError(f"feedback kinds repeat: {v}")
        return v

    @field_validator("prompt")
    @classmethod
    def _prompt_exists(cls, value: str) -> str:
        load_prompt(value)
        return value


# ------------------------------------------------------------------------------------ prompt text
def action_text(skill: str, done_skill: str = "done") -> str:
    """``"pick the x and place it on the y"`` → ``"Pick the x and place it on the y."``; done → ``"Done."``."""
    if skill == done_skill:
        return "Done."
    s = skill.strip().rstrip(".")
    return s[0].upper() + s[1:] + ("." if s[-1].isalnum() else "")


def match_skill(text: str, skills: Sequence[str]) -> str | None:
    """The admissible skill that ``text`` names verbatim (case and a final full stop aside), or None: the
    generated line when it is already a skill (any env's notation, e.g. EAI's ``[WALK] <kitchen>``)."""
    key = text.strip().strip('"').rstrip(".").strip().lower()
    return next((s for s in skills if s.strip().rstrip(".").lower() == key), None) if key else None


def parse_action(text: str) -> tuple[str, str] | None:
    """(object to pick, place target) from generated action text, or None."""
    m = _ACTION.match(text.strip().strip('"'))
    return (m.group(1).lower(), m.group(2).lower().strip('" )')) if m else None


def is_done_text(text: str) -> bool:
    return text.strip().strip('."').lower() in _DONE_WORDS


def _kind(line: str, first_scene: bool, first_human: bool) -> str:
    if line.startswith("Robot action:"):
        return "action"
    if line.startswith("Successful action:"):
        return "success"
    if line.startswith("Scene: You have completed"):
        return "scene"
    if line.startswith("Scene:"):
        return "start_objects" if first_scene else "object"
    if line.startswith("Robot thought:"):
        return "thought"
    if line.startswith("Robot ask:"):
        return "ask"
    if line.startswith("Human:"):
        return "task" if first_human else "answer"
    return "other"


def filter_examples(text: str, feedback: Sequence[str]) -> str:
    """Keep the few-shot lines of the selected feedback kinds (see the module docstring)."""
    fb = set(feedback)
    keep_kinds = {"start_objects", "task", "action", "other"}
    if "success" in fb:
        keep_kinds.add("success")
    if "object" in fb:
        keep_kinds.add("object")
    if "scene" in fb:
        keep_kinds |= {"scene", "thought"}
    if "human" in fb:
        keep_kinds |= {"ask", "answer"}
    closed = bool(fb & {"success", "scene", "human"})
    out_examples = []
    for example in re.split(r"\n\s*\n", text.strip()):
        lines = [ln.rstrip() for ln in example.splitlines() if ln.strip()]
        header: list[tuple[str, str]] = []
        steps: list[list[tuple[str, str]]] = []
        seen_scene = seen_human = False
        for ln in lines:
            kind = _kind(ln, not seen_scene, not seen_human)
            seen_scene |= ln.startswith("Scene:")
            seen_human |= ln.startswith("Human:")
            if kind == "action":
                steps.append([(kind, ln)])
            elif steps:
                steps[-1].append((kind, ln))
            else:
                header.append((kind, ln))
        kept: list[str] = [ln for k, ln in header if k in keep_kinds]
        for step in steps:
            failed = any(k == "success" and ln.endswith("False") for k, ln in step)
            if failed and not closed:
                continue
            # the final "Robot action: Done." after "Robot thought: None." belongs to non-scene variants
            if "scene" in fb and step[0][1] == "Robot action: Done." and kept and kept[-1] == "Robot thought: None.":
                continue
            kept.extend(ln for k, ln in step if k in keep_kinds)
        out_examples.append("\n".join(kept))
    return "\n\n".join(out_examples) + "\n\n"


# ------------------------------------------------------------------------------------ the human
class ScriptedHuman(DeclaresTruth):
    """Answers the planner's questions from the true state (an oracle "human" / VQA, IM Sec. 3.3):

    * "Is the <x> on/in the <y>?" → "Yes." / "No." by the success detector;
    * a question about being done/finished/complete → whether the task's reference sub-goals hold;
    * which/what/where/how/next questions → the first unsatisfied reference sub-goal as an action;
    * anything else → "I don't know."; ``answers`` (substring → answer) are checked first.

    It is an oracle (``InnerMonologueConfig.SCRIPTED_HUMAN``, which the planner declares with "human"
    feedback); the task's sub-goals are read only when a question needs them, through the gate.
    """

    declaration = InnerMonologueConfig.SCRIPTED_HUMAN

    def __init__(self, task: Task, answers: Mapping[str, str] | None = None) -> None:
        self.task = task
        self.answers = {k.lower(): v for k, v in (answers or {}).items()}
        self.log: list[tuple[str, str]] = []

    def _reference(self) -> list[SubGoal]:
        out = []
        for text in (read(self.task, Truth.METADATA, self) or {}).get("subgoals", []):
            sg = parse_subgoal(text)
            if sg is not None:
                out.append(sg)
        return out

    def answer(self, question: str, observation: Observation) -> str:
        reply = self._answer(question, observation)
        self.log.append((question, reply))
        return reply

    def _answer(self, question: str, observation: Observation) -> str:
        q = question.lower()
        for key, value in self.answers.items():
            if key in q:
                return value
        state = read(observation, Truth.STATE, self)
        positions = dict(getattr(state, "positions", {}) or {})
        locations = dict(getattr(state, "locations", {}) or {})
        m = re.search(r"is the (\w+ block) (?:on top of|on|in|inside) the ([\w ]+?)\s*\??$", q)
        if m:
            return "Yes." if detect_success(positions, m.group(1), m.group(2), locations) else "No."
        reference = self._reference()
        if any(w in q for w in ("done", "finish", "complete")):
            left = [sg for sg in reference if sg not in completed(reference, positions, locations)]
            return "Yes." if not left else "No."
        if any(w in q for w in ("which", "what", "where", "how", "next", "should")):
            left = [sg for sg in reference if sg not in completed(reference, positions, locations)]
            if not left:
                return "You are done."
            return f"Pick the {left[0].obj} and place it on the {left[0].target}."
        return "I don't know."


# ------------------------------------------------------------------------------------ the planner
class InnerMonologuePlanner(EpisodeProgress, Planner):
    """IM's closed-loop planner (see the module docstring). ``name`` is ``"inner_monologue"``."""

    name = "inner_monologue"

    def __init__(self, lm: LanguageModel, config: InnerMonologueConfig | Mapping[str, Any] | None = None,
                 **overrides: Any) -> None:
        data = config.model_dump() if isinstance(config, InnerMonologueConfig) else dict(config or {})
        data.update(overrides)
        self.config: InnerMonologueConfig = validate_options(InnerMonologueConfig, data, "inner_monologue options")
        self.lm = lm
        self.feedback = set(self.config.feedback)
        self._few_shot = filter_examples(load_prompt(self.config.prompt), self.config.feedback)
        self._prompt = ""
        self._task: Task | None = None
        self._subgoals: list[SubGoal] = []
        self._subgoal_source = ""
        self._human: ScriptedHuman | None = None
        self._skill_vectors: dict[str, np.ndarray] = {}
        self._history: list[str] = []
        self.name = labelled(self.name, self.oracles)

    @property
    def declarations(self) -> tuple[OracleDeclaration, ...]:
        """Simulator truth this configuration reads (see the module docstring): with the default feedback
        the scene description's true poses (a stand-in), no oracle."""
        return self.config.declarations

    @property
    def prompt(self) -> str:
        return self._prompt

    @property
    def max_steps(self) -> int:
        return self.config.max_steps

    @property
    def subgoals(self) -> list[SubGoal]:
        return list(self._subgoals)

    def reset(self, task: Task, observation: Observation, seed: int = 0) -> None:
        instruction = validate_instruction(task.instruction, self.config.max_instruction_chars)
        self._task = task
        scene = self._scene_line(observation)
        head = f"{scene}\n" if scene else ""
        self._prompt = f"{self._few_shot}{head}Human: {instruction}\n"
        self._subgoals, self._subgoal_source = [], ""
        self._human = ScriptedHuman(task, self.config.human_answers) if "human" in self.feedback else None
        self._begin_episode()

    @staticmethod
    def _scene_line(observation: Observation) -> str | None:
        """``Scene: <objects>`` from the object lister's percept; None where the env has no object lister
        (EAI: its prompt lists the objects itself)."""
        detected = percept(observation, "detected")
        return None if detected is None else f"Scene: {describe_objects(list(detected))}"

    # -------------------------------------------------------------------------------- generation
    def _generate(self, max_new_tokens: int) -> str:
        """The first line the LM writes, greedily; with ``skip_leading_break``, when it opens with a line
        break (a long instruction that ends in its own "Output:" line invites one), the line after it."""
        params = GenerationParams(temperature=0.0, max_new_tokens=max_new_tokens, stop=("\n",))
        text = self.lm.generate(self._prompt, params)[0].text.split("\n", 1)[0].strip()
        if not text and self.config.skip_leading_break:
            text = self.lm.generate(self._prompt + "\n", params)[0].text.split("\n", 1)[0].strip()
        return text

    def _append(self, text: str) -> None:
        self._prompt += text

    def _known_names(self, observation: Observation) -> list[str]:
        """The scene's object and location names (simulator state: "scene" feedback declares it)."""
        s = read(observation, Truth.STATE, self)
        return list(getattr(s, "blocks", []) or []) + list(getattr(s, "bowls", []) or []) + \
            list((getattr(s, "locations", {}) or {}).keys())

    def _set_subgoals(self, thought: str, observation: Observation) -> None:
        self._subgoals = parse_goal_state(thought, self._known_names(observation))
        self._subgoal_source = "generated"
        if not self._subgoals and self.config.subgoal_fallback and self._task is not None:
            refs = [parse_subgoal(t) for t in (read(self._task, Truth.METADATA, self) or {}).get("subgoals", [])]
            self._subgoals = [sg for sg in refs if sg is not None]
            self._subgoal_source = "task"

    def next_step(self, observation: Observation, last: StepResult | None) -> Decision:
        self._check_running()
        start = len(self._prompt)
        info: dict[str, Any] = {"feedback": []}
        if not self._history:  # the first decision (done ends the episode, so none follows it)
            if "scene" in self.feedback:
                self._append("Robot thought:")
                thought = self._generate(self.config.thought_max_new_tokens)
                self._append(f" {thought}\n")
                info["thought"] = thought
                self._set_subgoals(thought, observation)
                info["subgoals"] = [sg.text for sg in self._subgoals]
                info["subgoals_source"] = self._subgoal_source
            if self.oracles:
                info["oracles"] = list(self.oracles)
        else:
            lines = []
            if "success" in self.feedback and last is not None:
                lines.append(f"Successful action: {bool(last.success)}")
            if "object" in self.feedback and (scene := self._scene_line(observation)):
                lines.append(scene)
            if "scene" in self.feedback:
                state = read(observation, Truth.STATE, self)  # the true poses: SCENE_FROM_TRUE_POSES
                lines.append("Scene: " + describe_progress(self._subgoals, getattr(state, "positions", {}) or {},
                                                            getattr(state, "locations", {}) or {}))
            for ln in lines:
                self._append(ln + "\n")
            info["feedback"] = lines
            if "scene" in self.feedback:
                self._append("Robot thought:")
                thought = self._generate(self.config.thought_max_new_tokens)
                self._append(f" {thought}\n")
                info["thought"] = thought
                if is_done_text(thought):
                    return self._decide(self.config.done_skill, [], info, start, write_action=False)
        text = self._action_or_questions(observation, info)
        info["generated"] = text
        if is_done_text(text):
            return self._decide(self.config.done_skill, [], info, start)
        skills = list(observation.skills)
        if not skills:
            raise InvalidInputError("the observation lists no skills, so there is nothing to choose from")
        parsed = parse_action(text)
        label = match_skill(text, skills) or (
            f"pick the {parsed[0]} and place it on the {parsed[1]}" if parsed else None)
        if label is not None and label in skills:
            info["parsed"] = True
            return self._decide(label, [CandidateScore(label, 0.0, None, 0.0)], info, start)
        info["parsed"] = False
        cos = self._cosines(text or "done", skills)
        best = int(np.argmax(cos))
        info["projection"] = {"from": text, "to": skills[best], "cosine": float(cos[best]),
                              "reason": "unparseable" if parsed is None else "not admissible"}
        candidates = [CandidateScore(s, float(c), None, float(c)) for s, c in zip(skills, cos)]
        return self._decide(skills[best], candidates, info, start)

    def _action_or_questions(self, observation: Observation, info: dict[str, Any]) -> str:
        """The action text; with 'human' feedback the LM may first ask up to ``max_questions`` questions."""
        if self._human is None:
            self._append("Robot action:")
            return self._generate(self.config.max_new_tokens)
        questions = []
        for _ in range(self.config.max_questions + 1):
            if len(questions) >= self.config.max_questions:
                self._append("Robot action:")
                return self._finish_questions(self._generate(self.config.max_new_tokens), questions, info)
            self._append("Robot")
            text = self._generate(self.config.max_new_tokens)
            low = text.lower()
            if low.startswith("ask:"):
                question = text[4:].strip()
                answer = self._human.answer(question, observation)
                self._append(f" ask: {question}\nHuman: {answer}\n")
                questions.append({"question": question, "answer": answer})
                continue
            if low.startswith("action:"):
                text = text[7:].strip()
            self._prompt = self._prompt[: -len("Robot")] + "Robot action:"
            return self._finish_questions(text, questions, info)
        raise AssertionError("unreachable")

    @staticmethod
    def _finish_questions(text: str, questions: list[dict[str, str]], info: dict[str, Any]) -> str:
        if questions:
            info["questions"] = questions
        return text

    def _decide(self, skill: str, candidates: list[CandidateScore], info: dict[str, Any], start: int,
                write_action: bool = True) -> Decision:
        done = skill == self.config.done_skill
        if write_action:
            self._append(f" {action_text(skill, self.config.done_skill)}\n")
        if done:
            self._finished = True
        else:
            self._history.append(skill)
        return Decision(skill=skill, done=done, candidates=candidates, prompt_delta=self._prompt[start:], info=info)

    def _cosines(self, text: str, skills: Sequence[str]) -> np.ndarray:
        missing = [s for s in dict.fromkeys(skills) if s not in self._skill_vectors]
        vectors = np.asarray(self.lm.embed([*missing, text]), dtype=float)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        vectors = np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)
        self._skill_vectors.update(zip(missing, vectors[:-1]))
        return np.stack([self._skill_vectors[s] for s in skills]) @ vectors[-1]


def make_inner_monologue(lm: LanguageModel, affordance: AffordanceSource | None = None, **options: Any) -> Planner:
    """Inner Monologue; ``options`` are :class:`InnerMonologueConfig` fields (``feedback=[]`` is the
    open-loop "LLM Object" baseline). ``affordance`` is accepted for the uniform factory signature and
    not used: IM grounds through language feedback, not affordances."""
    if affordance is not None:
        logger.debug("inner_monologue does not use affordances; ignoring %r", affordance)
    return InnerMonologuePlanner(lm, **options)
