"""EAI's tasks as a closed-loop env (``virtualhome_eai``): steps, the goal check against the judge, the
leaderboard built from a sweep's traces, and `groundplan tables` printing it beside the stored rows."""
from __future__ import annotations

import pytest

pytest.importorskip("virtualhome_eval")

from groundplan.envs import ENVS  # noqa: E402
from groundplan.envs.virtualhome.eai.env import parse_skill, script_line, task_skills  # noqa: E402
from groundplan.envs.virtualhome.eai.tasks import load_task, sample_ids  # noqa: E402
from groundplan.evaluation.eai.judge import EAIJudge  # noqa: E402
from groundplan.evaluation.eai.semantics import CORRECTED  # noqa: E402

#: six official tasks, named so that a clean machine loads only these (deciding every task's set loads 342)
IDS = ["124_1", "409_2", "57_1", "628_1", "772_1", "813_2"]
SAMPLE = dict(task_set="official", ids=IDS)


@pytest.fixture(scope="module")
def env():
    return ENVS.get("virtualhome_eai")(**SAMPLE)


def test_tasks_are_the_named_sample_and_read_eai_prompt(env):
    tasks = env.tasks()
    assert [t.task_id for t in tasks] == sorted(IDS)
    sampled = ENVS.get("virtualhome_eai")(task_set="official", ids=IDS, limit=2, sample_seed=0).tasks()
    assert [t.task_id for t in sampled] == sample_ids("official", 2, 0, ids=IDS) == ["628_1", "813_2"]
    with pytest.raises(Exception, match="not in EAI's official set"):
        ENVS.get("virtualhome_eai")(task_set="official", ids=["27_2"])  # dropped by the official evaluator
    for t in tasks:
        assert t.instruction == load_task(t.task_id).prompt and t.instruction.lstrip().startswith("The task is")


def test_skills_are_eai_vocabulary_over_relevant_objects(env):
    task = env.tasks()[0]
    obs = env.reset(task, 0)
    eai = load_task(task.task_id)
    assert obs.skills == list(task_skills(task.task_id)) and obs.skills[-1] == "done"
    assert "[STANDUP]" in obs.skills
    named = {a for s in obs.skills[:-1] for a in parse_skill(s)[1]}
    assert named == set(eai.name_to_id) - {"character"}
    assert parse_skill("[PUTBACK] <cup> <sink>") == ("PUTBACK", ["cup", "sink"])
    with pytest.raises(ValueError):
        parse_skill("walk to the sink")
    assert script_line("[WALK] <%s>" % next(iter(named)), eai.name_to_id).endswith(")")


def test_bad_steps_fail_without_raising(env):
    task = env.tasks()[0]
    env.reset(task, 0)
    r = env.execute("walk to the moon")
    assert not r.success and r.info["error"] == "parse"
    r = env.execute("[WALK] <moon>")
    assert not r.success and "not in this task" in r.feedback


def test_goal_check_equals_the_judge_on_gold_and_broken_programs(env):
    """The env's goal check is the corrected semantics' verdict on the program it executed, for each gold
    program and for its first step alone (which reaches no task's goal here)."""
    judge = EAIJudge()
    agree = successes = 0
    for task in env.tasks():
        for labels in (list(load_task(task.task_id).reference_skills), list(load_task(task.task_id).reference_skills)[:1]):
            env.reset(task, 0)
            results = [env.execute(label) for label in labels]
            executed = [parse_skill(label) for label, r in zip(labels, results) if r.success]
            verdict = judge.score_steps(task.task_id, executed, CORRECTED)
            goal = env.check_goal()
            agree += goal.success == verdict.success
            successes += goal.success
    assert agree == 2 * len(env.tasks())
    assert successes == len(env.tasks())  # every gold program succeeds, no first step alone does


def test_goals_gained_counts_what_the_episode_brought_about(env):
    """``goals_gained``: the goals satisfied at the end less those at the start; done at once gains none, the gold
    program every goal it did not find holding, so a validation search can rank variants that all fail."""
    from types import SimpleNamespace

    from groundplan.envs.virtualhome.eai.goals import StateObjectView, count_goals

    for task in env.tasks():
        eai = load_task(task.task_id)
        env.reset(task, 0)
        at_start = count_goals(StateObjectView(env._state), eai.node_goals, eai.edge_goals, list(eai.action_goals),
                               (), every_edge=True).satisfied
        done = SimpleNamespace(steps=[SimpleNamespace(done=True, success=True)])
        assert env.episode_metrics(task, done)["goals_gained"] == 0.0
        labels = list(eai.reference_skills)
        steps = [SimpleNamespace(done=False, success=env.execute(label).success) for label in labels]
        total = len(eai.node_goals) + len(eai.edge_goals) + len(eai.action_goals)
        gained = env.episode_metrics(task, SimpleNamespace(steps=steps))["goals_gained"]
        assert gained == total - at_start and gained > 0


def test_preconditions_affordance_prunes_to_feasible_steps(env):
    from groundplan.grounding import AFFORDANCES

    task = env.tasks()[0]
    obs = env.reset(task, 0)
    affordance = AFFORDANCES.get("virtualhome_preconditions")()
    values = affordance(obs, obs.skills, ())
    feasible = [s for s, v in zip(obs.skills, values) if v == 1.0]
    assert 0 < len(feasible) < len(obs.skills) // 2
    assert all(env.execute(s).success for s in feasible[:3] if s.startswith("[WALK]"))


def test_sweep_traces_become_leaderboard_rows(tmp_path):
    """A SayCan sweep (fake LM, the oracle preconditions) on two EAI tasks; `groundplan tables` on its run
    prints its summary and EAI's leaderboard with the 15 stored rows on the same two tasks."""
    from fakes import FakeLM

    from groundplan.config import EvalConfig
    from groundplan.evaluation.eai import leaderboard
    from groundplan.evaluation.tables import run_folders, run_tables, run_traces
    from groundplan.pipelines.evaluate.sweep import run_sweep

    cfg = EvalConfig.model_validate({
        "name": "eai_t", "env": {"name": "virtualhome_eai", "options": {"ids": IDS[:2]}},
        "planners": [{"name": "saycan", "label": "SayCan", "affordance": "virtualhome_preconditions",
                      "options": {"prompt": "saycan_eai", "max_instruction_chars": 20000, "llm_score": "mean"}}],
        "seeds": [0], "max_steps": 4, "output_dir": str(tmp_path),
        "runtime": {"executor": "local", "mlflow": False}})
    run_sweep(cfg, lm=FakeLM(), progress=False)
    run = tmp_path / "eai_t"
    traces = list(run_traces(run_folders([run])))
    assert len(traces) == 2 and all(not t.error for t in traces)
    assert all(t.steps and t.steps[0].success for t in traces)  # the oracle offers only feasible steps
    board = leaderboard.build([*leaderboard.stored_entries(), *leaderboard.run_entries(traces)])
    assert board.task_ids == sorted(t.task_id for t in traces)
    names = {r.model for r in board.rows["official"]}
    assert len(names) == 16 and any(n.startswith("SayCan") for n in names)
    ours = next(n for n in names if n.startswith("SayCan"))
    assert all(r["a"] == ours for r in board.paired["official"]) and len(board.paired["official"]) == 15
    assert {r["measure"] for r in board.paired["official"]} == {"success"}  # no executability across loops
    attempts = board.attempts[ours]
    assert attempts["episodes"] == 2 and attempts["episodes_without_failed_attempts"] == 2  # the oracle: none
    assert attempts["without_failed_lo"] < 1.0 == attempts["without_failed_hi"]
    text = run_tables([run])
    assert "EAI action sequencing, official semantics, 2 shared tasks" in text and "gpt-4o-2024-05-13" in text
    assert "rank" in text
    # the exported outcomes carry the judge's verdicts, so a page renders the row from data
    from groundplan.evaluation.outcomes import export_outcomes

    episodes = {e["task_id"]: e for e in export_outcomes([run])["episodes"]}
    for s in ("official", "corrected"):
        want = {v.task_id: float(v.success) for v in board.verdicts[s][ours] if v.scored}
        assert {i: e[f"success_{s}"] for i, e in episodes.items() if f"success_{s}" in e} == want
    # closed loop: refused steps (none for the oracle), no executability (it holds by construction)
    assert all(e["refused_steps"] == 0.0 and e["no_refused_step"] == 1.0 for e in episodes.values())
    assert not any(k.startswith("executable") for e in episodes.values() for k in e)


def test_inner_monologue_plays_eai_skills_with_success_feedback(env):
    """Inner Monologue on EAI (success feedback, no demonstration): no object line (EAI's prompt lists the
    objects), a line that opens with a break is read on the next line, a generated skill is taken verbatim,
    each step's outcome is told back, and "done" ends the episode."""
    from tests.fakes import FakeLM
    from groundplan.planners.inner_monologue import make_inner_monologue

    task = env.tasks()[0]
    obs = env.reset(task, 0)
    gold = list(load_task(task.task_id).reference_skills)
    lm = FakeLM(generations=["", gold[0], "[WALK] <moon>", "Done."])
    planner = make_inner_monologue(lm, prompt="inner_monologue_eai", feedback=["success"], skip_leading_break=True,
                                   max_instruction_chars=20000)
    planner.reset(task, obs)
    assert "Scene:" not in planner.prompt and planner.prompt.endswith(f"Human: {task.instruction.strip()}\n")
    d1 = planner.next_step(obs, None)
    assert d1.skill == gold[0] and d1.info["parsed"] and d1.info["generated"] == gold[0]
    r1 = env.execute(d1.skill)
    d2 = planner.next_step(r1.observation, r1)
    assert d2.info["projection"]["reason"] == "unparseable" and d2.skill in obs.skills  # not a skill: nearest one
    r2 = env.execute(d2.skill)
    d3 = planner.next_step(r2.observation, r2)
    assert d3.done and d3.skill == "done"
    assert f"Robot action: {gold[0]}\nSuccessful action: {r1.success}\n" in planner.prompt
    assert f"Successful action: {r2.success}\nRobot action: Done.\n" in planner.prompt
