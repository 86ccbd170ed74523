"""No ground truth inside a planner unless its config names an oracle.

Every registered planner runs a few steps on a Task whose ``goal``, ``reference_plan`` and ``metadata``
raise on any use. Planner configurations that turn an oracle on must say so in ``planner.oracles``
and in their label; the others must never touch those fields. Episodes in a real env (BabyAI, the
house) run through :func:`~groundplan.rollout.episode.run_episode`, so the planner gets every new
observation and the env's declared action model, as in a sweep; the env itself runs the real task.
"""
from __future__ import annotations

import atexit
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Sequence

import pytest

from groundplan.core.types import GoalResult, Observation, StepResult, Task
from groundplan.envs.base import Env
from groundplan.llm.beam_search import BeamCandidate
from groundplan.planners import PLANNERS
from groundplan.planners.base import labelled
from tests.fakes import FakeLM, ToyAffordance, ToyEnv


class GroundTruthRead(AssertionError):
    pass


class Guard:
    """Stands in for ground truth: any use (truth value, item, attribute, iteration, length) raises."""

    def __init__(self, name: str) -> None:
        object.__setattr__(self, "_name", name)

    def _fail(self, *_: Any, **__: Any) -> Any:
        raise GroundTruthRead(f"the planner read task.{object.__getattribute__(self, '_name')}")

    __bool__ = __len__ = __iter__ = __getitem__ = __contains__ = __eq__ = _fail

    def __getattr__(self, item: str) -> Any:
        self._fail()

    def __repr__(self) -> str:
        return f"<guarded task.{object.__getattribute__(self, '_name')}>"


def guarded(task: Task) -> Task:
    return Task(task.task_id, task.instruction, task.family, goal=Guard("goal"), start_state=task.start_state,
                reference_plan=Guard("reference_plan"), metadata=Guard("metadata"))  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------ episodes
TABLETOP_SKILLS = ["pick the red block and place it on the blue bowl", "pick the red block and place it on the middle", "done"]
TABLETOP_TASK = Task("t/0", "Put the red block in the blue bowl.", "pick_and_place",
                     goal={"family": "pick_and_place", "blocks": ["red block"], "bowls": ["blue bowl"],
                           "pick": "red block", "target": "blue bowl"},
                     metadata={"subgoals": ["Red block is on the blue bowl."]})


@dataclass
class TabletopLikeState:
    blocks: list = field(default_factory=lambda: ["red block"])
    bowls: list = field(default_factory=lambda: ["blue bowl"])
    positions: dict = field(default_factory=lambda: {"red block": (0.4, 0.1, 0.02), "blue bowl": (0.5, -0.1, 0.0)})
    locations: dict = field(default_factory=lambda: {"middle": (0.45, 0.0)})
    detected: list = field(default_factory=lambda: ["red block", "blue bowl"])


def _play(planner: Any, task: Task, obs: Observation, execute: Any, steps: int) -> list[str]:
    """The planner's skills over at most ``steps`` decisions, each executed by ``execute(skill)``."""
    planner.reset(task, obs, seed=0)
    last, chosen = None, []
    for _ in range(steps):
        d = planner.next_step(obs, last)
        chosen.append(d.skill)
        if d.done:
            break
        last = execute(d.skill)
        obs = last.observation
    return chosen


def _toy_episode(planner: Any, task: Task, steps: int = 4) -> list[str]:
    env = ToyEnv()
    return _play(planner, task, env.reset(task, 0), env.execute, steps)


def _tabletop_episode(planner: Any, task: Task, steps: int = 3) -> list[str]:
    obs = Observation(skills=list(TABLETOP_SKILLS), state=TabletopLikeState())
    return _play(planner, task, obs, lambda skill: StepResult(False, "failure", obs), steps)


class EnvWithRealTask(Env):
    """``env`` run on ``real`` whatever task the episode names: the planner alone gets the (guarded) task
    of the episode, and the env's action model is built from that task, as the planner is given it."""

    def __init__(self, env: Env, real: Task) -> None:
        self.env, self.real = env, real
        self.name, self.capabilities, self.done_skill = env.name, env.capabilities, env.done_skill

    def tasks(self, families: Sequence[str] | None = None) -> list[Task]:
        return [self.real]

    def reset(self, task: Task, seed: int) -> Observation:
        return self.env.reset(self.real, seed)

    def execute(self, skill: str) -> StepResult:
        return self.env.execute(skill)

    def check_goal(self) -> GoalResult:
        return self.env.check_goal()

    def check_plan(self, task: Task, seed: int, plan: Sequence[str]) -> GoalResult:
        return self.env.check_plan(self.real, seed, plan)

    def episode_metrics(self, task: Task, trace: Any) -> dict[str, float]:
        return self.env.episode_metrics(self.real, trace)

    def action_model(self, task: Task) -> Any:
        return self.env.action_model(task)


def _rollout(planner: Any, task: Task, env: Env, real: Task, steps: int) -> Any:
    """run_episode with ``task`` for the planner and ``real`` for the env; a ground-truth read inside
    the planner (recorded by run_episode as the episode's error) is raised again."""
    from groundplan.rollout.episode import run_episode

    trace = run_episode(planner, EnvWithRealTask(env, real), task, 0, max_steps=steps)
    if trace.error and "GroundTruthRead" in trace.error:
        raise GroundTruthRead(trace.error)
    assert trace.error is None, trace.error
    return trace


def _house_env() -> Any:
    from groundplan.envs import ENVS

    return ENVS.get("house")(houses_per_split=1, splits=["test"])


HOUSE_TASK = _house_env().tasks()[0]


def _house_episode(planner: Any, task: Task, steps: int = 12) -> list[str]:
    """Real steps in the house: the robot looks around and walks, and the planner reads each new observation."""
    env = _house_env()
    trace = _rollout(planner, task, env, HOUSE_TASK, steps)
    assert env.sim.agent.path_m > 0, "the robot never moved"
    assert len(trace.steps) > 2 and any("navigate" in s.chosen for s in trace.steps)
    return [s.chosen for s in trace.steps]


def _babyai_env() -> Any:
    from groundplan.envs import ENVS

    return ENVS.get("babyai")(test_per_family=1, train_per_family=1, generalize_per_family=1)


BABYAI_TASK = _babyai_env().tasks(["unlock_pickup"])[0]


def _babyai_episode(planner: Any, task: Task, steps: int = 8) -> list[str]:
    trace = _rollout(planner, task, _babyai_env(), BABYAI_TASK, steps)
    return [s.chosen for s in trace.steps]


class ProposingLM(FakeLM):
    """Beam search stand-in: after t steps it proposes step t of ``plan`` (then its last), its first step
    and "done", with falling log-probs (the plan is the test's script, not the planner's knowledge)."""

    def __init__(self, plan: Sequence[str], done: str = "done") -> None:
        super().__init__()
        self.plan, self.done = list(plan), done

    def beam_candidates(self, prompt: str, params: Any) -> list[BeamCandidate]:
        t = prompt.rsplit("[Initial State]", 1)[1].count("[Step ") - 1
        texts = [self.plan[min(t, len(self.plan) - 1)], self.plan[0], self.done]
        return [BeamCandidate(text=x, logprob_sum=-0.2 * (i + 1), num_tokens=1, score=-0.2 * (i + 1), group=i,
                              finish_reason="stop") for i, x in enumerate(texts)]


_LEARNED: dict[str, str] = {}


def _learned_source() -> Any:
    """``saycanpay_learned`` over tiny random Can and Pay models (a 1-layer BERT with MiniLM's tokenizer),
    built once per session: the real source, whose reset and scoring see only goal text, o_0 and actions."""
    from groundplan.grounding import AFFORDANCES

    if not _LEARNED:
        import torch
        from transformers import AutoTokenizer, BertConfig, BertModel

        from groundplan.grounding.canpay.config import CanPayModelConfig
        from groundplan.grounding.canpay.model import CanPayModel
        from groundplan.llm.loading import embedded_encoder_path

        folder = tempfile.mkdtemp(prefix="scp-guard-")
        atexit.register(shutil.rmtree, folder, True)
        tok = AutoTokenizer.from_pretrained(embedded_encoder_path("all-minilm-l6-v2"))
        torch.manual_seed(0)
        BertModel(BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                             intermediate_size=64, max_position_embeddings=512)).save_pretrained(f"{folder}/enc")
        tok.save_pretrained(f"{folder}/enc")
        for kind in ("can", "pay"):
            CanPayModel(CanPayModelConfig(kind=kind, encoder=f"{folder}/enc", max_length=64)).save(f"{folder}/{kind}")
            _LEARNED[kind] = f"{folder}/{kind}"
    return AFFORDANCES.get("saycanpay_learned")(can_model=_LEARNED["can"], pay_model=_LEARNED["pay"], device="cpu")


def _babyai_oracle_source() -> Any:
    from groundplan.grounding import AFFORDANCES

    return AFFORDANCES.get("saycanpay_oracle")(
        env="babyai", env_options={"test_per_family": 1, "train_per_family": 1, "generalize_per_family": 1})


TOY_TASK = ToyEnv().tasks()[0]
DEMOS = [("Bring coke", ["find a coke can", "pick up the coke can"])]
IM_THOUGHTS = ["I am not sure.", "Pick the red block and place it on the blue bowl.", "blah", "Robot ask: what next?",
               "Pick the red block and place it on the middle."] * 3


@dataclass
class Case:
    planner: str
    options: dict
    make_lm: Callable[[], FakeLM]
    episode: Callable[[Any, Task], list[str]]
    task: Task
    affordance: Callable[[], Any] | None = None
    oracles: tuple[str, ...] = ()


def _following() -> FakeLM:
    return FakeLM.following(list(ToyEnv.REFERENCE) + ["done"])


def _toy_proposer() -> FakeLM:
    return ProposingLM(list(ToyEnv.REFERENCE) + ["done"])


def _babyai_proposer() -> FakeLM:
    return ProposingLM(BABYAI_TASK.reference_plan, done="done picking up")


SCP = {"num_candidates": 3, "num_groups": 3}
SCP_BABYAI = {**SCP, "prompt": "saycanpay_babyai", "done_skill": "done picking up"}


CASES: list[Case] = [
    Case("saycan", {}, _following, _toy_episode, TOY_TASK, ToyAffordance),
    Case("saycan", {}, _following, _toy_episode, TOY_TASK,
         lambda: __import__("groundplan.grounding.saycan", fromlist=["x"]).LanguageSimAffordance(),
         oracles=("reference-plan affordances",)),
    Case("saycan_novf", {}, _following, _toy_episode, TOY_TASK),
    Case("generative", {}, lambda: FakeLM(generations=["find a coke can", "pick up the coke", "done"]), _toy_episode, TOY_TASK),
    Case("zeroshot", {"demonstrations": DEMOS, "num_samples": 2},
         lambda: FakeLM(generations=["find a coke can", "pick up the coke can", ""]), _toy_episode, TOY_TASK),
    Case("zeroshot_vanilla", {"demonstrations": DEMOS, "num_samples": 2},
         lambda: FakeLM(generations=["find a coke can\nStep 2: pick up the coke can"]), _toy_episode, TOY_TASK),
    Case("open_loop", {}, lambda: FakeLM(generations=["find a coke can\nStep 2: pick up the coke can"]), _toy_episode,
         TOY_TASK),
    *[Case("inner_monologue", {"feedback": fb}, lambda: FakeLM(generations=IM_THOUGHTS), _tabletop_episode, TABLETOP_TASK)
      for fb in ([], ["success"], ["scene"], ["object", "scene"])],
    Case("inner_monologue", {"feedback": ["scene"], "subgoal_fallback": True}, lambda: FakeLM(generations=IM_THOUGHTS),
         _tabletop_episode, TABLETOP_TASK, oracles=("sub-goals",)),
    Case("inner_monologue", {"feedback": ["human"]}, lambda: FakeLM(generations=IM_THOUGHTS), _tabletop_episode,
         TABLETOP_TASK, oracles=("scripted human",)),
    Case("saynav", {"plan_mode": "score"}, FakeLM, _house_episode, HOUSE_TASK),
    # SayCanPay: Greedy-Token; Greedy-Action and Beam-Action with the learned Can/Pay source (Beam-Action in
    # BabyAI, where the rollout gives it the env's action model built from the planner's own task)
    Case("saycanpay", {"decoding": "greedy_token", "score": "say"},
         lambda: FakeLM(generations=["find a coke can\n", "pick up the coke can\n", "done\n"]), _toy_episode, TOY_TASK),
    Case("saycanpay", {**SCP, "decoding": "greedy_action", "score": "saycanpay"}, _toy_proposer, _toy_episode,
         TOY_TASK, _learned_source),
    Case("saycanpay", {**SCP_BABYAI, "decoding": "beam_action", "score": "saycanpay", "beam_size": 2}, _babyai_proposer,
         _babyai_episode, BABYAI_TASK, _learned_source),
    Case("saycanpay", {**SCP, "decoding": "beam_action", "score": "say", "beam_size": 3}, _toy_proposer,
         _toy_episode, TOY_TASK),
    # ... and its oracles: Perfect-Say reads the expert plan, the oracle Can replays the real task
    Case("saycanpay", {**SCP, "decoding": "greedy_action", "score": "saycanpay", "perfect_say": True, "oracle": True},
         _toy_proposer, _toy_episode, TOY_TASK, _learned_source, oracles=("expert plan",)),
    Case("saycanpay", {**SCP_BABYAI, "decoding": "beam_action", "score": "saycan", "oracle": True}, _babyai_proposer,
         _babyai_episode, BABYAI_TASK, _babyai_oracle_source, oracles=("simulator feasibility",)),
    Case("house_explore", {}, FakeLM, _house_episode, HOUSE_TASK),
    Case("house_oracle", {}, FakeLM, _house_episode, HOUSE_TASK, oracles=("target positions",)),
]


def _build(case: Case) -> Any:
    options = dict(case.options)
    demos = options.pop("demonstrations", None)
    kwargs = {"demonstrations": demos} if demos is not None else {}
    affordance = case.affordance() if case.affordance else None
    return PLANNERS.get(case.planner)(lm=case.make_lm(), affordance=affordance, **kwargs, **options)


def _id(case: Case) -> str:
    variant = case.options.get("feedback", case.options.get("decoding", ""))
    return f"{case.planner}-{variant}-{case.episode.__name__.strip('_')}-{'oracle' if case.oracles else 'clean'}"


def test_every_registered_planner_has_a_case():
    own = {n for n in PLANNERS.names() if PLANNERS.origin(n) is None}  # an installed plugin's are its own
    assert own <= {c.planner for c in CASES}, "add a case for the new planner"


@pytest.mark.parametrize("case", [c for c in CASES if not c.oracles], ids=_id)
def test_planners_without_an_oracle_never_read_ground_truth(case):
    planner = _build(case)
    assert planner.oracles == ()
    assert "oracle" not in planner.name
    chosen = case.episode(planner, guarded(case.task))
    assert chosen  # it planned


@pytest.mark.parametrize("case", [c for c in CASES if c.oracles], ids=_id)
def test_oracle_configurations_say_so(case):
    planner = _build(case)
    assert planner.oracles == case.oracles
    assert planner.name.endswith(f"(oracle {', '.join(case.oracles)})")
    assert labelled("+Scene", planner.oracles) == f"+Scene (oracle {', '.join(case.oracles)})"
    assert labelled(labelled("x", planner.oracles), planner.oracles) == labelled("x", planner.oracles)
    case.episode(_build(case), case.task)  # with real ground truth it runs


@pytest.mark.parametrize("oracle,field", [("sub-goals", "metadata"), ("expert plan", "reference_plan"),
                                          ("simulator feasibility", "goal")])
def test_the_guard_catches_a_leak(oracle, field):
    """The oracles do read the task: with the guard in place each is caught (Perfect-Say reads the expert
    plan, the oracle Can the goal, through run_episode too), so a clean case that passes is clean."""
    case = next(c for c in CASES if c.oracles == (oracle,))
    with pytest.raises(GroundTruthRead, match=f"task.{field}"):
        case.episode(_build(case), guarded(case.task))


def test_beam_action_in_babyai_plans_over_the_envs_action_model():
    """The clean Beam-Action case is given BabyAI's action model (not the first observation's list)."""
    case = next(c for c in CASES if c.episode is _babyai_episode and not c.oracles)
    trace = _rollout(_build(case), guarded(case.task), _babyai_env(), BABYAI_TASK, 8)
    assert {s.info["actions_from"] for s in trace.steps} == {"action model"}


def test_perfect_say_is_refused_without_its_oracle_label():
    from groundplan.core.errors import InvalidInputError

    case = next(c for c in CASES if c.oracles == ("expert plan",))
    with pytest.raises((InvalidInputError, ValueError), match="oracle"):
        PLANNERS.get("saycanpay")(lm=case.make_lm(), affordance=case.affordance(),
                                  **{k: v for k, v in case.options.items() if k != "oracle"})


def test_subgoal_fallback_is_off_by_default_and_recorded_when_on():
    from groundplan.planners.inner_monologue import (
        InnerMonologueConfig,
        make_inner_monologue,
    )

    assert InnerMonologueConfig().subgoal_fallback is False
    planner = make_inner_monologue(FakeLM(generations=IM_THOUGHTS), feedback=["scene"], subgoal_fallback=True)
    planner.reset(TABLETOP_TASK, Observation(skills=list(TABLETOP_SKILLS), state=TabletopLikeState()))
    d = planner.next_step(Observation(skills=list(TABLETOP_SKILLS), state=TabletopLikeState()), None)
    assert d.info["subgoals_source"] == "task" and d.info["oracles"] == ["sub-goals"]
    assert d.info["subgoals"] == ["Red block is on the blue bowl."]
    off = make_inner_monologue(FakeLM(generations=IM_THOUGHTS), feedback=["scene"])
    off.reset(guarded(TABLETOP_TASK), Observation(skills=list(TABLETOP_SKILLS), state=TabletopLikeState()))
    d = off.next_step(Observation(skills=list(TABLETOP_SKILLS), state=TabletopLikeState()), None)
    assert d.info["subgoals"] == [] and d.info["subgoals_source"] == "generated" and "oracles" not in d.info
