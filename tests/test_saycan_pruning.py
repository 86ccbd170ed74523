"""SayCan's exact affordance-bound pruning (options whose best possible combined score cannot win are not
scored): the same decisions and plans as full scoring on every kitchen task x 3 seeds, with fewer options
scored; pruned options are marked in the trace."""
from __future__ import annotations

import json
import math

import pytest

from groundplan.config import PlannerSpec
from groundplan.envs import ENVS
from groundplan.factory import make_planner
from groundplan.rollout.episode import run_episode
from tests.fakes import FakeLM, FixedAffordance, ToyEnv, hashed_logprob

SEEDS = (0, 1, 2)


class CountingLM(FakeLM):
    """FakeLM that counts the options it scores."""

    def __init__(self, *a, **k) -> None:
        super().__init__(*a, **k)
        self.options_scored = 0

    def score(self, prompt, options):
        self.options_scored += len(options)
        return super().score(prompt, options)


def _run(env, task, seed: int, lm, prune: bool, llm_score: str = "sum", max_steps: int = 12):
    spec = PlannerSpec(name="saycan", affordance="kitchen_value", options={"prune": prune, "llm_score": llm_score})
    return run_episode(make_planner(spec, lm, max_steps), env, task, seed, max_steps=max_steps)


def _decisions(trace) -> list[tuple[str, bool, bool]]:
    return [(s.chosen, s.done, s.success) for s in trace.steps]


@pytest.mark.parametrize("rule", ["hashed", "reference"])
def test_pruning_gives_identical_decisions_and_plans_on_every_kitchen_task(rule):
    env = ENVS.get("kitchen")()
    tasks = env.tasks()
    full_n = pruned_n = episodes = 0
    for task in tasks:
        for seed in SEEDS:
            def lm():
                if rule == "hashed":
                    return CountingLM(hashed_logprob)
                plan = [*(task.reference_plan or ()), "done"]
                return CountingLM(FakeLM.following(plan)._scores)  # exact 0.0 log-probs: ties at the bound

            full_lm, pruned_lm = lm(), lm()
            full = _run(env, task, seed, full_lm, prune=False)
            pruned = _run(env, task, seed, pruned_lm, prune=True)
            where = f"{task.task_id} seed {seed}"
            assert _decisions(pruned) == _decisions(full), where
            assert pruned.plan == full.plan and pruned.execution_success == full.execution_success, where
            for fs, ps in zip(full.steps, pruned.steps):
                chosen = next(c for c in ps.candidates if c.skill == ps.chosen)
                want = next(c for c in fs.candidates if c.skill == fs.chosen)
                assert chosen.combined == want.combined and not chosen.extra.get("pruned"), where
                for fc, pc in zip(fs.candidates, ps.candidates):
                    if pc.extra.get("pruned"):
                        assert pc.llm is None and pc.combined == -math.inf
                        assert fc.combined < want.combined or fc.affordance == 0, where  # it could not win
                    else:
                        assert (pc.llm, pc.combined) == (fc.llm, fc.combined), where
            full_n += full_lm.options_scored
            pruned_n += pruned_lm.options_scored
            episodes += 1
    assert episodes == len(tasks) * len(SEEDS) == 252
    assert pruned_n < 0.7 * full_n, (pruned_n, full_n)  # it does save work (counts, not time)


class CountingAffordance:
    """Wraps a planner's affordance source and counts the skills it is asked about."""

    def __init__(self, inner) -> None:
        self.inner, self.skills_asked = inner, 0
        self.declaration = inner.declaration

    def reset(self, task, seed) -> None:
        self.inner.reset(task, seed)

    def __call__(self, observation, skills, history):
        self.skills_asked += len(skills)
        return self.inner(observation, skills, history)


@pytest.mark.parametrize("rule", ["hashed", "reference"])
def test_llm_bound_pruning_gives_identical_decisions_with_fewer_affordances(rule):
    """``prune_by: llm`` (the affordance computed only where log p_LLM can still win): the same decisions
    and plans as full scoring on every kitchen task x 3 seeds, the affordance asked about fewer skills."""
    env = ENVS.get("kitchen")()
    full_n = pruned_n = 0
    for task in env.tasks():
        for seed in SEEDS:
            def lm():
                if rule == "hashed":
                    return FakeLM(hashed_logprob)
                return FakeLM(FakeLM.following([*(task.reference_plan or ()), "done"])._scores)  # ties at 0.0

            traces, asked = [], []
            for options in ({"prune": False}, {"prune": True, "prune_by": "llm", "prune_chunk": 4}):
                planner = make_planner(PlannerSpec(name="saycan", affordance="kitchen_value", options=options), lm(), 12)
                planner.affordance = counting = CountingAffordance(planner.affordance)
                traces.append(run_episode(planner, env, task, seed, max_steps=12))
                asked.append(counting.skills_asked)
            full, pruned = traces
            where = f"{task.task_id} seed {seed}"
            assert _decisions(pruned) == _decisions(full) and pruned.plan == full.plan, where
            for fs, ps in zip(full.steps, pruned.steps):
                want = next(c for c in fs.candidates if c.skill == fs.chosen)
                for fc, pc in zip(fs.candidates, ps.candidates):
                    assert pc.llm == fc.llm, where  # the LM scored every option
                    if pc.extra.get("pruned"):
                        assert pc.affordance is None and pc.combined == -math.inf
                        assert fc.llm < want.combined, where  # its bound was below the winner: it could not win
                    else:
                        assert (pc.affordance, pc.combined) == (fc.affordance, fc.combined), where
            full_n, pruned_n = full_n + asked[0], pruned_n + asked[1]
    assert pruned_n < 0.2 * full_n, (pruned_n, full_n)  # 8% of the affordances here (counts, not time)


def test_llm_bound_pruning_keeps_ties_and_zero_affordances_exact():
    from groundplan.planners.saycan import SayCanPlanner

    task = ToyEnv().tasks()[0]
    for llm_score in ("sum", "mean"):
        for aff in ({}, {"done": 0.1, "find a coke can": 0.0}, {"done": 0.0}):
            runs = [SayCanPlanner(FakeLM(default_token_logprob=0.0), FixedAffordance(aff), llm_score=llm_score,
                                  prune=prune, prune_by="llm", prune_chunk=1) for prune in (True, False)]
            a, b = (run_episode(p, ToyEnv(), task, 0, max_steps=4) for p in runs)
            assert _decisions(a) == _decisions(b), (llm_score, aff)


def test_mean_scoring_and_ties_are_pruned_exactly():
    env = ToyEnv()
    task = env.tasks()[0]
    for llm_score in ("sum", "mean"):
        lm = lambda: FakeLM(default_token_logprob=0.0)  # noqa: E731 -- every option 0: all ties
        from groundplan.planners.saycan import SayCanPlanner

        for aff in ({}, {"done": 0.1, "find a coke can": 0.0}):
            a = SayCanPlanner(lm(), FixedAffordance(aff), llm_score=llm_score, prune=True)
            b = SayCanPlanner(lm(), FixedAffordance(aff), llm_score=llm_score, prune=False)
            ta, tb = run_episode(a, ToyEnv(), task, 0, max_steps=4), run_episode(b, ToyEnv(), task, 0, max_steps=4)
            assert _decisions(ta) == _decisions(tb)


def test_power_score_interpolates_sum_and_mean_with_and_without_pruning():
    # done: one token, log p -3; "find a coke can": four tokens, log p -8 in all (mean -2)
    from groundplan.planners.saycan import SayCanPlanner

    env = ToyEnv()
    task = env.tasks()[0]
    expected = {("sum", 0.5): "done", ("mean", 0.5): "find a coke can", ("power", 0.0): "done",
                ("power", 0.5): "done", ("power", 0.8): "find a coke can", ("power", 1.0): "find a coke can"}
    for (llm_score, alpha), skill in expected.items():
        for prune in (True, False):
            lm = FakeLM({"done": -3.0, "find a coke can": -8.0}, default_token_logprob=-50.0)
            p = SayCanPlanner(lm, FixedAffordance({}), llm_score=llm_score, length_alpha=alpha, prune=prune)
            observation = env.reset(task, 0)
            p.reset(task, observation)
            assert p.next_step(observation, None).skill == skill, (llm_score, alpha, prune)


def test_positive_logprobs_turn_pruning_off_rather_than_change_the_answer():
    # a broken backend returning log p > 0: the bound does not hold, so every option is scored
    lm = FakeLM({"done": 6.0, "find a coke can": 0.5}, default_token_logprob=-1.0)
    from groundplan.planners.saycan import SayCanPlanner

    aff = FixedAffordance({"done": 0.01})
    env = ToyEnv()
    task = env.tasks()[0]
    p = SayCanPlanner(lm, aff, prune=True, prune_chunk=1)
    p.reset(task, env.reset(task, 0))
    d = p.next_step(env.reset(task, 0), None)
    assert d.skill == "done"  # 6 + log .01 = 1.39 beats 0.5 + log 1 although log .01 < 0.5
    assert not any(c.extra.get("pruned") for c in d.candidates)


def test_pruned_trace_is_json_and_renders(tmp_path):
    from groundplan.plots import plot_step_scores
    from groundplan.pipelines.evaluate.report import render_episode

    env = ENVS.get("kitchen")()
    task = env.tasks()[0]
    trace = _run(env, task, 0, FakeLM(hashed_logprob), prune=True)
    assert any(c.extra.get("pruned") for s in trace.steps for c in s.candidates)
    assert all(s.info.get("pruned_options", 0) > 0 for s in trace.steps)
    text = json.dumps(trace.to_dict())
    assert json.loads(text)["steps"][0]["candidates"]
    assert plot_step_scores(trace, tmp_path / "s.png").exists()
    assert "pruned" in render_episode(trace, [])


def test_plan_command_keeps_full_scores(monkeypatch, capsys):
    """``groundplan plan`` prints and charts every option's scores, so it builds SayCan without pruning:
    every candidate of every step it plays carries its LLM score (the same model prunes in eval)."""
    from groundplan import cli
    import groundplan.factory as factory
    import groundplan.rollout.episode as episode

    seen: dict = {}
    make, play = factory.make_planner, episode.run_episode

    def spy_make(spec, lm, max_steps, affordance=None):
        seen["options"] = dict(spec.options)
        return make(spec, lm, max_steps, affordance)

    def spy_play(*a, **k):
        seen["trace"] = play(*a, **k)
        return seen["trace"]

    monkeypatch.setattr(factory, "make_planner", spy_make)
    monkeypatch.setattr(episode, "run_episode", spy_play)
    monkeypatch.setattr("groundplan.llm.load_llm", lambda *a, **k: FakeLM(hashed_logprob))
    assert cli.main(["plan", "bring me a coke", "--max-steps", "2"]) == 0
    assert seen["options"] == {"prune": False}
    steps = seen["trace"].steps
    assert steps and all(len(s.candidates) > 1 for s in steps)
    assert all(c.llm is not None and not c.extra.get("pruned") for s in steps for c in s.candidates)
    out = capsys.readouterr().out  # bracketed text ("[ok]", EAI's "[WALK] <laptop>") is printed, not read as markup
    assert f"step 1: {steps[0].chosen}" in out and ("[ok]" in out or "[failed]" in out or steps[0].done)


def test_pruning_with_the_real_model_small(lm):
    env = ENVS.get("kitchen")()
    task = env.tasks()[0]
    full = _run(env, task, 0, lm, prune=False, max_steps=3)
    pruned = _run(env, task, 0, lm, prune=True, max_steps=3)
    assert _decisions(pruned) == _decisions(full)
    assert sum(s.info["scored_options"] for s in pruned.steps) < sum(len(s.candidates) for s in full.steps)
    for fs, ps in zip(full.steps, pruned.steps):
        for fc, pc in zip(fs.candidates, ps.candidates):
            if not pc.extra.get("pruned"):
                assert abs(pc.llm - fc.llm) < 1e-4  # chunks are packed differently: float rounding only


@pytest.mark.slow
def test_pruning_with_the_real_model_on_a_few_tasks(lm):
    env = ENVS.get("kitchen")()
    tasks = env.tasks()[::21]  # one task of each of 4 families
    for task in tasks:
        full = _run(env, task, 0, lm, prune=False)
        pruned = _run(env, task, 0, lm, prune=True)
        assert _decisions(pruned) == _decisions(full), task.task_id
