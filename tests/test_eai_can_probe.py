"""The probe that chooses SayCan's learned Can and LLM score on EAI's validation tasks: it ranks the gold
step under each scorer, reads SayCan's prompt exactly as the planner builds it, and its table, paired tests
and choice render from the rows alone."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("virtualhome_eval")

from groundplan.envs import ENVS  # noqa: E402
from groundplan.envs.virtualhome.eai.env import task_skills  # noqa: E402
from groundplan.envs.virtualhome.eai.tasks import load_task  # noqa: E402
from groundplan.evaluation.eai import can_probe  # noqa: E402
from groundplan.grounding.canpay.lineage import Example, Lineage, save_lineage  # noqa: E402
from groundplan.planners.saycan import SayCanPlanner  # noqa: E402
from tests.fakes import FakeLM, FixedAffordance  # noqa: E402


class GoldCan:
    """p_can ``hit`` for the gold program's next step after the given history, ``miss`` for every other."""

    def __init__(self, gold: list[str], hit: float, miss: float) -> None:
        self.gold, self.hit, self.miss = gold, hit, miss

    def score_sequences(self, goal, init_obs, items):
        return SimpleNamespace(can=np.array([self.hit if a == self.gold[len(h)] else self.miss for h, a in items]))


def test_the_gold_step_is_ranked_under_every_scorer_through_the_planners_own_prompt():
    gold = list(load_task("124_1").reference_skills)
    n = len(task_skills("124_1"))
    lm = FakeLM()  # -5 a whitespace token: every option's mean is equal (ties favour the gold step)
    rows = list(can_probe.probe(["124_1"], {"good": GoldCan(gold, 0.9, 0.1), "bad": GoldCan(gold, 0.1, 0.9)}, lm, steps=2))
    assert [(r["task"], r["step"], r["gold"], r["skills"]) for r in rows] == [("124_1", 1, gold[0], n), ("124_1", 2, gold[1], n)]
    for r in rows:
        ranks = r["ranks"]
        assert ranks["can good"] == 1 and ranks["can bad"] == n
        assert ranks["LLM mean"] == 1 and ranks["SayCan mean × good"] == 1 and ranks["SayCan mean × bad"] == n
        # the sum favours fewer tokens: every shorter skill (done among them) outranks a two-token gold step
        shorter = sum(len(s.split()) < len(r["gold"].split()) for s in task_skills("124_1"))
        assert ranks["LLM sum"] == 1 + shorter
    # the prompts are SayCan's own: the planner's after reset, then amended with the gold step
    env = ENVS.get("virtualhome_eai")(ids=["124_1"])
    task = env.tasks()[0]
    planner = SayCanPlanner(FakeLM(), FixedAffordance(), prompt="saycan_eai", max_instruction_chars=20000)
    planner.reset(task, env.reset(task, 0))
    assert lm.score_calls[0][0] == planner.prompt
    assert lm.score_calls[1][0] == planner.prompt + f" {gold[0]}, 2."
    assert lm.score_calls[0][1] == [" " + s for s in task_skills("124_1")]


class CheckCan:
    """p_can 0.9 for the skills the simulator allows after the given history, 0.2 for the others: a Can that
    separates them perfectly, computed from the env's own check."""

    def __init__(self, task_id: str) -> None:
        self.task_id = task_id

    def score_sequences(self, goal, init_obs, items):
        env = ENVS.get("virtualhome_eai")(task_set="all", ids=[self.task_id])
        obs = env.reset(env.tasks()[0], 0)
        for action in items[0][0]:
            obs = env.execute(action).observation
        return SimpleNamespace(can=np.array([0.9 if a == "done" or obs.state.check(a)[0] else 0.2 for _, a in items]))


def test_feasibility_auc_measures_the_separation_of_feasible_from_infeasible_skills():
    assert can_probe.feasibility_auc(np.array([0.9, 0.8, 0.1]), np.array([True, True, False])) == 1.0
    assert can_probe.feasibility_auc(np.array([0.1, 0.9]), np.array([True, False])) == 0.0
    assert can_probe.feasibility_auc(np.array([0.5, 0.5]), np.array([True, False])) == 0.5
    assert can_probe.feasibility_auc(np.array([0.5, 0.5]), np.array([True, True])) is None
    gold = list(load_task("124_1").reference_skills)
    rows = list(can_probe.probe(["124_1"], {"check": CheckCan("124_1"), "flat": GoldCan(gold, 0.5, 0.5)}, steps=2,
                                feasibility=True))
    assert len(rows) == 2 and all(0 < r["feasible"] < r["skills"] for r in rows)
    assert [r["auc"]["check"] for r in rows] == [1.0, 1.0] and [r["auc"]["flat"] for r in rows] == [0.5, 0.5]
    assert "auc" not in next(can_probe.probe(["124_1"], {"flat": GoldCan(gold, 0.5, 0.5)}, steps=1))
    summary, pairs = can_probe.feasibility_summary(rows)
    assert [(f["can"], f["steps"], f["tasks"], f["mean"]) for f in summary] == [("check", 2, 1, 1.0), ("flat", 2, 1, 0.5)]
    assert [(c["a"], c["b"], c["tasks"], c["a_higher"], c["b_higher"]) for c in pairs] == [("check", "flat", 1, 1, 0)]
    page = can_probe.render_markdown({"rows": rows})
    assert "| `check` | 2 (1) | 1.000" in page and "| `check` vs `flat` | 1 | 1 | 0 |" in page
    assert "AUC" not in can_probe.render_markdown({"rows": [{k: v for k, v in r.items() if k != "auc"} for r in rows]})


def _row(task, step, skills, **ranks):
    return {"task": task, "step": step, "skills": skills, "gold": "[WALK] <x>", "ranks": ranks}


def test_the_table_the_paired_tests_and_the_choice_come_from_the_rows():
    rows = [_row("a", 1, 101, **{"can x": 1, "can y": 30}), _row("a", 2, 101, **{"can x": 3, "can y": 20}),
            _row("b", 1, 201, **{"can x": 50, "can y": 10}), _row("c", 1, 301, **{"can x": 2, "can y": 9})]
    summary = {s["scorer"]: s for s in can_probe.summarise(rows)}
    assert summary["random"]["median"] == 76 and summary["random"]["top10"] is None  # (n + 1) / 2 of 101, 101, 201, 301
    assert summary["can x"]["median"] == 2.5 and summary["can x"]["top10"] == 3 and summary["can x"]["tasks"] == 3
    assert summary["can y"]["median"] == 15 and summary["can y"]["mean"] == pytest.approx(17.25)
    (c,) = can_probe.compare(rows, [("can x", "can y")])
    assert (c["a_better"], c["b_better"], c["tasks"]) == (2, 1, 3) and c["p"] == pytest.approx(1.0)
    assert can_probe.choice(list(summary.values()), ["can x", "can y"]) == "can x"
    text = can_probe.render_markdown({"title": "T", "pairs": [["can x", "can y"]], "choices": {"Can": ["can x", "can y"]},
                                      "rows": rows})
    assert "| `can x` | 4 (3) | 2.5 |" in text and "| `can x` vs `can y` | 3 | 2 | 1 |" in text
    assert "Chosen Can (lowest median gold rank, then mean): **`can x`**" in text


def test_validation_tasks_come_from_the_lineage(tmp_path):
    save_lineage(tmp_path, Lineage("m", [Example("train", "1_1", "s1", "i1"), Example("validation", "9_2", "s2", "i2"),
                                         Example("validation", "3_1", "s3", "i3")]))
    assert can_probe.validation_tasks(tmp_path, "m") == ["3_1", "9_2"]
    save_lineage(tmp_path, Lineage("m", [Example("train", "1_1", "s1", "i1")]))
    with pytest.raises(Exception, match="no validation tasks"):
        can_probe.validation_tasks(tmp_path, "m")
