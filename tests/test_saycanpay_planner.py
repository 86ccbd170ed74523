"""SayCanPay planner with fakes: candidate mapping/merging, the three scores, Greedy-Token,
Greedy-Action, Beam-Action lookahead, Perfect-Say, traces, and an episode in the kitchen."""
from __future__ import annotations

import math

import numpy as np
import pytest

from groundplan.core.errors import InvalidInputError
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
    assert first.info["search"][0][0]["kept"] in (True, False)
    assert beam.next_step(OBS).skill == "pick up the coke can"
    last = beam.next_step(OBS)
    assert last.done and last.skill == "done"


def test_perfect_say_needs_oracle_and_offers_the_expert_action():
    with pytest.raises(InvalidInputError, match="oracle"):
        PLANNERS.get("saycanpay")(lm=FakeLM(), affordance=RuleCanPay(), perfect_say=True)
    p = _planner(FakeLM(), RuleCanPay(), perfect_say=True, oracle=True, score="saycan")
    d = p.next_step(OBS)
    assert len(d.candidates) == 3
    assert "find a coke can" in {c.skill for c in d.candidates}
    assert {c.extra["texts"][0] for c in d.candidates} == {"<oracle>", "<distractor>"}


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
