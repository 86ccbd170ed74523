"""SayCanPay planner with fakes: candidate mapping/merging, the three scores, Greedy-Token,
Greedy-Action, Beam-Action lookahead, Perfect-Say, traces, and an episode in the kitchen."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from groundplan.core.errors import InvalidInputError
from groundplan.core.truth import OracleDeclaration, Truth
from groundplan.core.types import Observation, Task
from groundplan.grounding.saycanpay import CanPayScores
from groundplan.llm.beam_search import BeamCandidate
from groundplan.planners import PLANNERS
from groundplan.planners.saycanpay import edit_distance, nearest_action
from tests.fakes import FakeLM

ACTIONS = ["find a coke can", "pick up the coke can", "bring it to you", "put down the coke can", "find an apple",
           "pick up the apple", "done"]
TASK = Task(task_id="t/0", instruction="bring me a coke can", family="f", goal=None,
            reference_plan=("find a coke can", "pick up the coke can", "bring it to you", "put down the coke can", "done"))
OBS = Observation(skills=ACTIONS, text="The robot is at the user.")


class BeamLM(FakeLM):
    """A FakeLM whose beam search proposes, after a history, the texts ``table[len(history)]`` with
    the given mean log-probs (the history length is read from the prompt's last [Step n])."""

    def __init__(self, table, **kw):
        super().__init__(**kw)
        self.table = table
        self.beam_calls: list[str] = []

    def beam_candidates(self, prompt, params):
        self.beam_calls.append(prompt)
        step = int(prompt.rsplit("[Step ", 1)[1].rstrip("]")) - 1
        history = tuple(line.split("] ", 1)[1] for line in prompt.split("[Goal] bring me a coke can", 1)[1].splitlines()
                        if line.startswith("[Step ") and "] " in line)
        rows = self.table(history) if callable(self.table) else self.table[min(step, len(self.table) - 1)]
        return [BeamCandidate(text=t, logprob_sum=lp * 3, num_tokens=3, score=lp, group=i % 3, finish_reason="stop")
                for i, (t, lp) in enumerate(rows)]


class RuleCanPay:
    """score_sequences from rules: can(history, action), pay(history, action)."""

    declaration = None  # reads no simulator truth

    def __init__(self, can=lambda h, a: 1.0, pay=lambda h, a: 1.0):
        self.can, self.pay, self.calls = can, pay, []

    def reset(self, task, seed):
        pass

    def score_sequences(self, goal, init_obs, items, one_by_one=False):
        self.calls.append(list(items))
        return CanPayScores(can=np.array([self.can(tuple(h), a) for h, a in items]),
                            pay=np.array([self.pay(tuple(h), a) for h, a in items]))


def _planner(lm, source=None, **opts):
    p = PLANNERS.get("saycanpay")(lm=lm, affordance=source, **opts)
    p.reset(TASK, OBS, seed=0)
    return p


def test_edit_distance_and_nearest_action():
    assert edit_distance("kitten", "sitting") == 3
    assert nearest_action("pick up coke can", ACTIONS) == "pick up the coke can"
    assert nearest_action("ab", ["xb", "ay", "ab"]) == "ab"
    assert nearest_action("ab", ["ay", "xb"]) == "ay" and nearest_action("ab", ["xb", "ay"]) == "xb"  # ties: first


def test_candidates_are_mapped_and_merged_keeping_the_best_say():
    lm = BeamLM([[(" pick up the coke can.", -0.5), ("pick up coke", -0.2), ("find coke can", -1.0), ("", -2.0)]])
    p = _planner(lm, score="say")
    cands = {c.action: c for c in p.candidates([], ACTIONS)}
    assert set(cands) == {"pick up the coke can", "find a coke can", "done"}
    assert cands["pick up the coke can"].say_logp == pytest.approx(-0.2)  # merged: the highest p_say
    assert len(cands["pick up the coke can"].texts) == 2


def test_greedy_action_scores_say_saycan_saycanpay():
    lm = BeamLM([[("pick up the coke can", -0.1), ("find a coke can", -0.7)]])
    infeasible_pick = RuleCanPay(can=lambda h, a: 0.0 if a.startswith("pick") else 0.9)
    say = _planner(lm, score="say", decoding="greedy_action").next_step(OBS)
    assert say.skill == "pick up the coke can"
    sc = _planner(lm, infeasible_pick, score="saycan", decoding="greedy_action").next_step(OBS)
    assert sc.skill == "find a coke can"
    c = {x.skill: x for x in sc.candidates}["find a coke can"]
    assert c.combined == pytest.approx(math.log(math.exp(-0.7) + 1e-3) + math.log(0.9 + 1e-3))
    assert c.extra["can"] == 0.9 and c.extra["say"] == pytest.approx(math.exp(-0.7))
    # Pay breaks a Can tie
    tie = RuleCanPay(pay=lambda h, a: 0.9 if a.startswith("find") else 0.05)
    scp = _planner(lm, tie, score="saycanpay").next_step(OBS)
    assert scp.skill == "find a coke can" and len(tie.calls) == 1 and len(tie.calls[0]) == 2  # one batched call


def test_greedy_token_maps_the_generation():
    lm = FakeLM(generations=[" find coke can\n"])
    d = _planner(lm, decoding="greedy_token", score="say").next_step(OBS)
    assert d.skill == "find a coke can" and not d.done


def test_beam_action_looks_ahead_where_greedy_action_does_not():
    """Step 1: 'find an apple' looks best to Say, but after it only poor continuations follow; the
    'find a coke can' path continues with high-probability, high-payoff steps."""

    def table(history):
        if not history:
            return [("find an apple", -0.1), ("find a coke can", -0.4)]
        if history[-1] == "find an apple":
            return [("pick up the apple", -3.0), ("done", -3.0)]
        if history[-1] == "find a coke can":
            return [("pick up the coke can", -0.05), ("done", -2.5)]
        return [("done", -0.01), ("bring it to you", -3.0)]

    greedy = _planner(BeamLM(table), score="say", decoding="greedy_action", num_candidates=3, num_groups=3)
    assert greedy.next_step(OBS).skill == "find an apple"
    source = RuleCanPay()
    beam = _planner(BeamLM(table), source, score="saycanpay", decoding="beam_action", num_candidates=3, num_groups=3,
                    beam_size=2)
    first = beam.next_step(OBS)
    assert first.skill == "find a coke can"
    assert first.info["plan"] == ["find a coke can", "pick up the coke can", "done"]
    assert all(len(call) <= 2 * 2 for call in source.calls)  # k×m items per batched call
    assert {c.skill for c in first.candidates} == {"find an apple", "find a coke can"}
    depth0, depth1 = first.info["search"][:2]
    assert all(r["kept"] for r in depth0)  # k = 2: both first actions stay
    # depth 1: the apple beam's continuations (acc ~ -3.1) lose to both of the coke beam's (-0.45, -2.9):
    # the look-ahead drops the action Greedy-Action committed to
    kept = {(depth0[r["beam"]]["action"], r["action"]) for r in depth1 if r["kept"]}
    assert kept == {("find a coke can", "pick up the coke can"), ("find a coke can", "done")}
    assert sorted(r["acc"] for r in depth1 if r["kept"]) == sorted(r["acc"] for r in depth1)[-2:]
    assert beam.next_step(OBS).skill == "pick up the coke can"
    last = beam.next_step(OBS)
    assert last.done and last.skill == "done"


def test_perfect_say_needs_oracle_and_offers_the_expert_action():
    with pytest.raises(InvalidInputError, match="oracle"):
        PLANNERS.get("saycanpay")(lm=FakeLM(), affordance=RuleCanPay(), perfect_say=True)
    p = _planner(FakeLM(), RuleCanPay(), perfect_say=True, oracle=True, score="saycan")
    assert p.oracles == ("expert plan",) and p.name == "saycanpay (oracle expert plan)"  # declared by the planner
    d = p.next_step(OBS)
    assert len(d.candidates) == 3
    assert "find a coke can" in {c.skill for c in d.candidates}
    assert {c.extra["texts"][0] for c in d.candidates} == {"<oracle>", "<distractor>"}


class Oracular(RuleCanPay):
    declaration = OracleDeclaration("simulator feasibility", frozenset({Truth.SIMULATOR}), "replays the task")


def test_oracle_sources_are_declared_and_need_oracle_true():
    with pytest.raises(InvalidInputError, match="reads ground truth"):
        PLANNERS.get("saycanpay")(lm=FakeLM(), affordance=Oracular(), score="saycan")
    p = PLANNERS.get("saycanpay")(lm=FakeLM(), affordance=Oracular(), score="saycan", perfect_say=True, oracle=True)
    assert p.oracles == ("expert plan", "simulator feasibility")
    assert PLANNERS.get("saycanpay")(lm=FakeLM(), affordance=RuleCanPay(), score="saycan").oracles == ()


# ------------------------------------------------------------------------------------ offered actions
class Listing:
    """An action model of the toy kitchen's list: the coke can's pick-up is listed only while it is not
    held, its put-down only while it is (the state: held or not); picking up twice fails."""

    def __init__(self):
        self.lists = []

    def initial(self):
        return False

    def step(self, held, action):
        if action == "pick up the coke can":
            return None if held else True
        return False if action == "put down the coke can" else held

    def actions(self, held):
        acts = [a for a in ACTIONS if a != ("put down the coke can" if not held else "pick up the coke can")]
        self.lists.append((held, acts))
        return acts


def test_beam_action_offers_each_beam_the_list_of_its_predicted_state():
    """With an action model, a proposal is mapped onto the list of the state the beam predicts: after
    'pick up the coke can' the LM's repeat of it maps to the nearest action still listed; without one,
    onto the first observation's list at every depth (and the decision says which)."""

    def table(history):
        if not history:
            return [("pick up the coke can", -0.1), ("find a coke can", -0.2), ("done", -4.0)]
        if len(history) == 1:
            return [("pick up the coke can", -0.1), ("done", -3.0), ("bring it to you", -3.5)]
        return [("done", -0.1), ("bring it to you", -3.0), ("find an apple", -3.5)]

    opts = dict(score="say", decoding="beam_action", num_candidates=3, num_groups=3, beam_size=2)
    plain = _planner(BeamLM(table), **opts)
    d = plain.next_step(OBS)
    assert d.info["actions_from"] == "first observation" and "first_list_agrees" not in d.info
    assert ["pick up the coke can", "pick up the coke can"] == d.info["plan"][:2]  # a repeat, offered again
    listing = Listing()
    modelled = _planner(BeamLM(table), **opts)
    modelled.use_action_model(listing)
    d = modelled.next_step(OBS)
    assert d.info["actions_from"] == "action model"
    assert d.info["first_list_agrees"] is False  # the model lists no put-down at the start; OBS does
    assert d.info["plan"][0] == "pick up the coke can" and d.info["plan"][1] != "pick up the coke can"
    after_pick = [r for r in d.info["search"][1] if d.info["search"][0][r["beam"]]["action"] == "pick up the coke can"]
    assert {r["action"] for r in after_pick} <= set(ACTIONS) - {"pick up the coke can"}
    assert "put down the coke can" in {r["action"] for r in after_pick}  # 'pick up ...' maps onto it now
    assert (True, [a for a in ACTIONS if a != "pick up the coke can"]) in listing.lists
    assert modelled.next_step(OBS).info["actions_from"] == "action model"  # every decision says it
    modelled.reset(TASK, OBS)  # a new episode forgets the model until the rollout gives one again
    assert modelled.next_step(OBS).info["actions_from"] == "first observation"


def test_a_step_the_model_says_fails_leaves_the_beam_state():
    listing = Listing()
    planner = _planner(BeamLM([[("done", -0.1)]]), score="say", decoding="beam_action", num_candidates=3,
                       num_groups=3, beam_size=2)
    planner.use_action_model(listing)
    assert planner._advance(True, "pick up the coke can") is True  # picking up twice: the model says it fails
    assert planner._advance(False, "pick up the coke can") is True


def test_babyai_beam_action_plans_over_the_lists_the_env_would_offer():
    """run_episode gives Beam-Action BabyAI's action model: at each depth each beam is offered exactly the
    list the env shows after the beam's actions (the expert's plan, which succeeds step by step), and the
    decisions record it; Greedy-Action reads the observation it is given."""
    pytest.importorskip("minigrid")
    from groundplan.envs import ENVS
    from groundplan.envs.base import listed_actions, planning_model
    from groundplan.rollout.episode import run_episode

    env = ENVS.get("babyai")(test_per_family=1, train_per_family=1, generalize_per_family=1)
    task = env.tasks(["blocked_unlock_pickup"])[0]
    expert = list(task.reference_plan)
    assert expert[-1] == "done picking up" and len(expert) > 3

    class ExpertLM(BeamLM):
        def beam_candidates(self, prompt, params):
            self.beam_calls.append(prompt)
            t = prompt.rsplit("[Initial State]", 1)[1].count("[Step ") - 1  # steps after the few-shot examples
            return [BeamCandidate(text=text, logprob_sum=lp, num_tokens=1, score=lp, group=i, finish_reason="stop")
                    for i, (text, lp) in enumerate([(expert[min(t, len(expert) - 1)], -0.1), (expert[0], -2.0),
                                                    ("done picking up", -3.0)])]

    planner = PLANNERS.get("saycanpay")(lm=ExpertLM(None), affordance=None, score="say", decoding="beam_action",
                                        num_candidates=3, num_groups=3, beam_size=3, done_skill="done picking up")
    offered = []
    original = planner.candidates
    def spy(history, actions):
        offered.append((tuple(history), list(actions)))
        return original(history, actions)

    planner.candidates = spy
    trace = run_episode(planner, env, task, seed=0)
    assert trace.error is None, trace.error
    assert [s.chosen for s in trace.steps] == expert and trace.execution_success
    assert {s.info["actions_from"] for s in trace.steps} == {"action model"}
    assert "first_list_agrees" not in trace.steps[0].info
    obs = env.reset(task, 0)
    model = planning_model(env, task, obs)
    lists = {(): listed_actions(obs)}
    for t, action in enumerate(expert[:-1]):
        obs = env.execute(action).observation
        lists[tuple(expert[: t + 1])] = listed_actions(obs)
    on_path = [(h, acts) for h, acts in offered if h in lists]
    assert len(on_path) >= len(expert) - 1
    for history, acts in on_path:
        assert acts == lists[history], history  # the env's own list after the same actions
    assert any(lists[h] != lists[()] for h, _ in on_path)  # the list did change along the plan
    assert model.actions(model.initial()) == lists[()]


def test_babyai_action_model_follows_the_env_when_its_verdicts_do():
    """The light model's list equals the env's after every action whose success it predicts right (it
    cannot see reachability, so it may not); it never reads the goal."""
    pytest.importorskip("minigrid")
    import random

    from groundplan.envs import ENVS
    from groundplan.envs.base import listed_actions, planning_model

    env = ENVS.get("babyai")(test_per_family=2, train_per_family=1, generalize_per_family=1)
    rng = random.Random(0)
    agreed = 0
    for task in env.tasks():
        obs = env.reset(task, 0)
        model = planning_model(env, dataclasses.replace(task, goal=None, reference_plan=None), obs)
        state = model.initial()
        assert model.actions(state) == listed_actions(obs)
        for _ in range(12):
            action = rng.choice(listed_actions(obs)[:-1])
            result, after = env.execute(action), model.step(state, action)
            if result.success != (after is not None):
                assert not result.success and ("reach" in result.feedback or "locked" in result.feedback)
                break
            state = after if after is not None else state
            obs = result.observation
            assert model.actions(state) == listed_actions(obs), (task.task_id, action)
            agreed += 1
    assert agreed > 20
    fresh = ENVS.get("babyai")(test_per_family=2, train_per_family=1, generalize_per_family=1)
    task = env.tasks()[0]  # not reset in ``fresh``: the model is built from the task's seed
    assert fresh.action_model(task).actions(fresh.action_model(task).initial()) == listed_actions(env.reset(task, 0))


@pytest.mark.parametrize("name", ["hanoi", "blocks_bowls"])
def test_tabletop_symbolic_models_list_the_envs_actions(name):
    pytest.importorskip("pybullet")
    from groundplan.envs import ENVS
    from groundplan.envs.base import WithoutGoal, listed_actions, planning_model

    env = ENVS.get(name)(split="test", test_size=2, train_size=5, place_noise_std=0.0)
    task = env.tasks()[0]
    obs = env.reset(task, 0)
    model = planning_model(env, task, obs)
    assert isinstance(model, WithoutGoal) and not hasattr(model, "goal_holds")
    state = model.initial()
    for action in task.reference_plan[:2]:
        assert model.actions(state) == listed_actions(obs)
        obs, state = env.execute(action).observation, model.step(state, action)
    assert model.actions(state) == listed_actions(obs)
    env.close()


def test_missing_canpay_source_is_refused():
    with pytest.raises(InvalidInputError, match="needs a Can/Pay grounding source"):
        PLANNERS.get("saycanpay")(lm=FakeLM(), affordance=None, score="saycan")
    with pytest.raises(InvalidInputError, match="must be a Can/Pay source"):  # a SayCan affordance is not one
        PLANNERS.get("saycanpay")(lm=FakeLM(), affordance=lambda obs, skills, history: [1.0] * len(skills), score="say")


def test_episode_in_the_kitchen_with_oracle_can(tmp_path):
    """End to end: run_episode in the kitchen, Beam-Action with the simulator's own preconditions."""
    from groundplan.envs.kitchen import KitchenEnv
    from groundplan.grounding import AFFORDANCES
    from groundplan.rollout.episode import run_episode

    env = KitchenEnv(mode="language")
    task = next(t for t in env.tasks() if t.task_id == "kitchen/structured/01")
    plan = list(task.reference_plan)

    def table(history):  # Say favours an infeasible 'pick up' first; the oracle Can rules it out
        t = len(history)
        wanted = plan[min(t, len(plan) - 1)]
        return [(plan[1] if t == 0 else "done", -0.1), (wanted, -0.5), ("go to the table", -1.0)]

    lm = BeamLM(table)
    lm.beam_candidates = lambda prompt, params, _orig=lm.beam_candidates: _orig(
        prompt.replace(f"[Goal] {task.instruction}", "[Goal] bring me a coke can"), params)
    source = AFFORDANCES.get("saycanpay_oracle")(env="kitchen", env_options={"mode": "language"})
    planner = PLANNERS.get("saycanpay")(lm=lm, affordance=source, decoding="beam_action", score="saycan", oracle=True,
                                        num_candidates=3, num_groups=3)
    trace = run_episode(planner, env, task, seed=0)
    assert trace.error is None, trace.error
    assert [s.chosen for s in trace.steps] == plan
    assert trace.execution_success
    # each step's delta is what the planner appended to its prompt ("done" appends nothing), so the trace gives
    # back the prompt of every decision, the first one being the episode's opening
    prompts = trace.step_prompts()
    assert trace.steps[-1].done and trace.steps[-1].prompt_delta == "" and prompts[-1] == trace.prompt
    assert prompts[0].endswith("[Step 1]") and all(p.startswith(prompts[0]) for p in prompts)


@pytest.mark.parametrize("env", ["kitchen", "babyai", "hanoi", "blocks", "virtualhome"])
def test_eval_configs_load_with_every_row(env):
    from groundplan.config import load_config
    from groundplan.planners.saycanpay import SayCanPayConfig

    cfg = load_config(f"configs/saycanpay_{env}.yaml")
    labels = [p.display for p in cfg.planners]
    for row in ["GT", "GA-Say", "GA-SC", "GA-SCP", "BA-Say", "BA-SC", "BA-SCP"]:
        assert row in labels
    for p in cfg.planners:
        c = SayCanPayConfig(**p.options)  # each env's shipped prompt exists
        assert c.oracle == ("oracle" in p.display.lower())
        if p.affordance == "saycanpay_oracle":
            assert p.affordance_options["env"] == cfg.env.name  # the oracle replays in the evaluated env
            if c.score == "saycan":  # SC ignores Pay: these rows need no trained model at all
                assert "pay_model" not in p.affordance_options
