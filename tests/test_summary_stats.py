"""Error bars and paired tests in the summary, so two planners are compared on more than their means, and
tables that survive non-tty output."""
from __future__ import annotations

import dataclasses
import io
import json
import math
import statistics
from pathlib import Path

import pytest

from groundplan.core.errors import InvalidInputError
from groundplan.core.stats import _wilson_bounds, clustered_wilson, holm_adjust
from groundplan.evaluation.summary import (
    ALL,
    mcnemar_exact,
    paired_tests,
    print_table,
    render_metric_table,
    render_table,
    summarize,
    summary_document,
    wilson_interval,
    write_summary,
)
from groundplan.rollout.traces import EpisodeTrace, StepTrace

ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------------------------ Wilson
@pytest.mark.parametrize("k,n,lo,hi", [
    (5, 10, 0.236590, 0.763410),   # the textbook example: 5 of 10
    (0, 10, 0.0, 0.277540),        # no success: a non-zero upper bound
    (10, 10, 0.722460, 1.0),
    (1, 3, 0.061490, 0.792340),    # "3 episodes decide nothing"
    (81, 263, 0.255288, 0.366211),
])
def test_wilson_known_values(k, n, lo, hi):
    got = wilson_interval(k, n)
    assert got == pytest.approx((lo, hi), abs=1e-5)


def test_wilson_matches_the_closed_form_and_contains_the_rate():
    z = 1.96
    for n in (1, 2, 7, 50):
        for k in range(n + 1):
            lo, hi = wilson_interval(k, n, z)
            p = k / n
            centre = (p + z * z / (2 * n)) / (1 + z * z / n)
            assert lo <= p <= hi and 0.0 <= lo <= centre <= hi <= 1.0
            # the bounds solve |p - q| = z sqrt(q(1-q)/n) (score test inversion)
            for q in (lo, hi):
                if 0.0 < q < 1.0:
                    assert abs(p - q) == pytest.approx(z * math.sqrt(q * (1 - q) / n), abs=1e-9)


def test_wilson_edge_cases():
    assert wilson_interval(0, 0) == (0.0, 1.0)
    with pytest.raises(InvalidInputError):
        wilson_interval(3, 2)
    with pytest.raises(InvalidInputError):
        wilson_interval(-1, 2)


# ------------------------------------------------------------------------------------ McNemar
@pytest.mark.parametrize("b,c,p", [
    (1, 9, 22 / 1024),   # 2 * (C(10,0) + C(10,1)) / 2^10
    (0, 5, 2 / 32),
    (3, 3, 1.0),
    (0, 0, 1.0),
    (2, 8, 2 * (1 + 10 + 45) / 1024),
])
def test_mcnemar_hand_computed(b, c, p):
    assert mcnemar_exact(b, c) == pytest.approx(p, rel=1e-12)
    assert mcnemar_exact(c, b) == pytest.approx(p, rel=1e-12)  # symmetric


def test_mcnemar_matches_scipy_binomtest():
    from scipy import stats  # statsmodels, in the test extra, requires scipy
    for b in range(0, 25, 3):
        for c in range(0, 25, 4):
            if b + c == 0:
                continue
            assert mcnemar_exact(b, c) == pytest.approx(stats.binomtest(b, b + c, 0.5).pvalue, rel=1e-9)


# ------------------------------------------------------------------------------------ from traces
def _trace(planner: str, task: str, seed: int, ok: bool, family: str = "f", plan: bool | None = None,
           metrics: dict | None = None) -> EpisodeTrace:
    return EpisodeTrace(episode_id=f"{planner}|{task}|{seed}", planner=planner, env="toy", task_id=task,
                        family=family, instruction="x", seed=seed, llm="fake", execution_success=ok,
                        plan_success=plan, metrics=metrics or {})


def _paired_traces() -> list[EpisodeTrace]:
    # 12 shared episodes: A wins 1 alone, B wins 8 alone, both 2, neither 1; plus one B-only episode
    outcomes = [(True, True)] * 2 + [(True, False)] * 1 + [(False, True)] * 8 + [(False, False)] * 1
    traces = []
    for i, (a, b) in enumerate(outcomes):
        task, seed = f"t{i // 2}", i % 2
        traces.append(_trace("A", task, seed, a, metrics={"goal_success": float(a), "lcs": 0.5}))
        traces.append(_trace("B", task, seed, b, metrics={"goal_success": float(b), "lcs": 0.25}))
    traces.append(_trace("B", "extra", 0, True, metrics={"goal_success": 1.0, "lcs": 0.0}))
    return traces


def test_paired_tests_count_only_shared_episodes():
    tests = paired_tests(_paired_traces(), planner_order=["A", "B"])
    by_measure = {t["measure"]: t for t in tests}
    assert set(by_measure) == {"execution_success", "goal_success"}  # lcs is not 0/1; no plan verdicts
    t = by_measure["execution_success"]
    assert (t["a"], t["b"], t["n_pairs"]) == ("A", "B", 12)
    assert (t["both"], t["a_only"], t["b_only"], t["neither"]) == (2, 1, 8, 1)
    assert t["p_value"] == pytest.approx(2 * (1 + 9) / 512)
    assert t["a_rate"] == pytest.approx(3 / 12) and t["b_rate"] == pytest.approx(10 / 12)


def test_paired_tests_carry_holm_adjusted_p_values_over_the_env():
    """Two tests in env 'toy' (execution and goal success, the same outcomes): each raw p = 20/512 < 0.05,
    Holm over the family of 2 doubles the smaller: 40/512 > 0.05. Another env is its own family."""
    traces = _paired_traces()
    other = [dataclasses.replace(t, env="other") for t in traces if t.task_id == "t0"]
    tests = paired_tests(traces + other, planner_order=["A", "B"])
    toy = [t for t in tests if t["env"] == "toy"]
    assert len(toy) == 2
    for t in toy:
        assert t["p_value"] == pytest.approx(20 / 512) and t["p_holm"] == pytest.approx(40 / 512)
        assert t["adjustment"] == "Holm-Bonferroni over the 2 paired tests of env 'toy'"
    (lone,) = [t for t in tests if t["env"] == "other" and t["measure"] == "execution_success"]
    assert lone["p_holm"] == pytest.approx(holm_adjust([t["p_value"] for t in tests if t["env"] == "other"])[0])


# ------------------------------------------------------------------------------------ Holm
def test_holm_hand_computed():
    """p = (0.01, 0.04, 0.03, 0.005), m = 4. Sorted: 0.005, 0.01, 0.03, 0.04, times 4, 3, 2, 1:
    0.02, 0.03, 0.06, 0.04; running maximum 0.02, 0.03, 0.06, 0.06; back in input order:"""
    assert holm_adjust([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm_adjust([0.5, 0.4]) == pytest.approx([0.8, 0.8])  # (2 x 0.4 = 0.8; max(0.8, 0.5)) ...
    assert holm_adjust([0.6, 0.7]) == pytest.approx([1.0, 1.0])  # ... capped at 1
    assert holm_adjust([0.03]) == [0.03] and holm_adjust([]) == []
    with pytest.raises(InvalidInputError):
        holm_adjust([0.2, 1.5])


def test_holm_matches_statsmodels():
    """statsmodels (in the test extra, so this runs wherever the tests do) is the independent reference."""
    from statsmodels.stats.multitest import multipletests

    ps = [0.001, 0.2, 0.013, 0.04, 0.04, 0.9, 0.0004, 0.03]
    reference = list(multipletests(ps, method="holm")[1])
    assert len(reference) == len(ps) and holm_adjust(ps) == pytest.approx(reference)
    assert reference[6] == pytest.approx(8 * 0.0004)  # the smallest p, times m: the reference is Holm's


# ------------------------------------------------------------------------------------ SayCanPay tables
def _scp_trace(planner: str, i: int, ok: bool, actions_from: str | None = None) -> EpisodeTrace:
    info = {} if actions_from is None else {"actions_from": actions_from, "search": []}
    return EpisodeTrace(episode_id=f"{planner}|{i}", planner=planner, env="babyai", task_id=f"t{i}", family="f",
                        instruction="x", seed=0, llm="fake", execution_success=ok,
                        steps=[StepTrace(0, "done picking up", True, info=info)])


def test_scp_tables_call_significant_only_after_holm():
    """X beats Y 9 to 1 (raw p = 22/1024 = 0.021) and Z = X: the family of 3 lines adjusts the two 0.021s to
    0.064 and 0.043 -> 0.064 (running maximum), so neither is significant at 0.05."""
    from groundplan.evaluation.saycanpay import paired

    x = [i < 9 for i in range(10)]
    traces = [_scp_trace(row, i, ok if row != "Y" else not ok) for row in "XYZ" for i, ok in enumerate(x)]
    lines = paired(traces, [("X", "Y"), ("X", "Z"), ("Z", "Y")])
    assert lines[0] == ("X vs Y on 10 shared episodes: 9 solved only by X, 1 only by Y; exact McNemar p = 0.02, "
                        "Holm-adjusted p = 0.06 (not significant at 0.05)")
    assert lines[1].endswith("exact McNemar p = 1.00, Holm-adjusted p = 1.00 (not significant at 0.05)")
    assert lines[2].endswith("Holm-adjusted p = 0.06 (not significant at 0.05)")
    alone = paired(traces, [("X", "Y")])  # a family of one: nothing to adjust
    assert alone[0].endswith("exact McNemar p = 0.02, Holm-adjusted p = 0.02 (significant at 0.05)")


def test_scp_tables_refuse_a_decoder_comparison_that_is_not_like_for_like():
    """A Beam-Action row offered the first observation's actions is not compared with a Greedy row in an env
    whose list changes (BabyAI); one offered its beams' predicted lists is; scores within Beam-Action are."""
    from groundplan.evaluation.saycanpay import lists_fixed_actions, not_like_for_like, paired_report

    ga = [_scp_trace("GA-SCP", i, i < 2) for i in range(12)]
    first = [_scp_trace("BA-SCP", i, True, "first observation") for i in range(12)]
    say = [_scp_trace("BA-Say", i, False, "first observation") for i in range(12)]
    pairs = [("BA-SCP", "GA-SCP"), ("BA-SCP", "BA-Say")]
    assert not lists_fixed_actions("babyai") and lists_fixed_actions("hanoi")
    lines = paired_report(ga + first + say, pairs, fixed_actions=False)
    assert lines[0].endswith("(not like-for-like: BA-SCP was offered the first observation's actions at every "
                             "depth; no decoder conclusion)")
    assert lines[1].endswith("Holm-adjusted p = 9.8e-04 (significant at 0.05)")  # same decoder: compared
    assert not_like_for_like(ga + first, fixed_actions=False) == {
        "BA-SCP": "BA-SCP was offered the first observation's actions at every depth"}
    # an env that lists the same actions in every state: the first observation's list is the right one
    assert paired_report(ga + first, pairs[:1], fixed_actions=True)[0].endswith("(significant at 0.05)")
    model = [_scp_trace("BA-SCP", i, True, "action model") for i in range(12)]
    assert paired_report(ga + model, pairs[:1])[0].endswith("(significant at 0.05)")
    old = [dataclasses.replace(t, steps=[StepTrace(0, "done picking up", True, info={"search": []})]) for t in model]
    assert "do not record which actions" in paired_report(ga + old, pairs[:1])[0]


def test_rows_and_summary_json_carry_n_and_intervals(tmp_path):
    traces = _paired_traces()
    rows = summarize(traces, planner_order=["A", "B"])
    b_all = next(r for r in rows if r.planner == "B" and r.family == ALL)
    assert b_all.episodes == 13 and b_all.execution_successes == 11
    assert b_all.execution_ci == pytest.approx(wilson_interval(11, 13))
    assert b_all.metric_cis["goal_success"][:2] == [11, 13] and "lcs" not in b_all.metric_cis
    path = write_summary(tmp_path / "summary.json", rows, traces, ["A", "B"])
    saved = json.loads(path.read_text())
    assert saved == json.loads(json.dumps(summary_document(rows, traces, ["A", "B"])))
    row = next(r for r in saved["rows"] if r["planner"] == "B" and r["family"] == ALL)
    assert row["execution_ci"] == pytest.approx(list(wilson_interval(11, 13)))
    assert row["plan_ci"] is None
    assert saved["paired_tests"][0]["p_value"] == pytest.approx(20 / 512)


def test_plan_success_interval_uses_episodes_with_a_verdict():
    traces = [_trace("A", f"t{i}", 0, ok=i < 2, plan=i < 3) for i in range(4)]
    row = next(r for r in summarize(traces) if r.family == ALL)
    assert (row.plan_successes, row.plan_episodes) == (3, 4)
    assert row.plan_ci == pytest.approx(wilson_interval(3, 4))


# ------------------------------------------------------------------------------------ rendering
LONG = ["Open loop", "+Success", "+Scene", "+Object+Scene (oracle sub-goals)", "SayCan"]


def _wide_rows():
    traces = []
    for p in LONG:
        for fam in ("put_blocks_on_mismatched_bowls (unseen)", "pick_and_place"):
            for i in range(3):
                traces.append(_trace(p, f"{fam}{i}", 0, ok=i == 0, family=fam, plan=i < 2))
    return summarize(traces, planner_order=LONG)


def test_tables_are_not_cut_when_stdout_is_not_a_terminal():
    from rich.console import Console

    buf = io.StringIO()
    console = Console(file=buf)  # a file: not a terminal, as in CI logs or `> out.txt`
    assert not console.is_terminal
    print_table(render_table(_wide_rows(), title="inner_monologue_tabletop"), console)
    print_table(render_metric_table(_wide_rows(), ["execution_success", "plan_success", "mean_steps"]), console)
    text = buf.getvalue()
    assert "…" not in text
    for name in LONG + ["put_blocks_on_mismatched_bowls (unseen)", "execution_success", "plan_success"]:
        assert name in text, name
    assert max(len(line) for line in text.splitlines()) > 80  # it kept its natural width
    assert "33% [6–79]" in text  # 1 of 3, with its interval
    assert "\x1b[" not in text  # no colour codes in a log


def test_eval_command_prints_intervals_when_redirected(monkeypatch, capsys, tmp_path):
    """`groundplan eval` end to end with the sweep stubbed out: the printed table has n and intervals."""
    from groundplan.cli import main
    from groundplan.pipelines.evaluate import sweep
    from groundplan.pipelines.evaluate.sweep import EvalResult

    def fake_run_sweep(cfg, progress=True, resume=True):
        rows = _wide_rows()
        return EvalResult(cfg, [], rows, tmp_path)

    monkeypatch.setattr(sweep, "run_sweep", fake_run_sweep)
    assert main(["eval", str(ROOT / "configs" / "saycan_kitchen.yaml"), "--local", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "…" not in out and "+Object+Scene (oracle sub-goals)" in out
    assert "[95% Wilson interval]" in out and "33% [6–79]" in out


# ------------------------------------------------------------------------------------ declared measures
def test_partial_measures_average_over_the_episodes_that_define_them():
    """Kendall tau exists for successful SayNav episodes only (Sec. 4.2): its mean is over those, not
    diluted by zeros for the failures; SR is declared a proportion, so it gets a Wilson interval."""
    import groundplan.envs.house.env  # noqa: F401  (registers the house measures)

    def trace(i: int, success: bool) -> EpisodeTrace:
        metrics = {"sr": float(success), "spl": 0.5 * success}
        if success:
            metrics["kendall_tau"] = 1.0 if i % 2 else 0.0
        return EpisodeTrace(episode_id=f"e{i}", planner="SayNav", env="house", task_id=f"t{i}", family="multion",
                            instruction="find", seed=0, llm="m", execution_success=success, metrics=metrics)

    traces = [trace(i, success=i < 4) for i in range(10)]  # 4 successes: taus 0, 1, 0, 1
    row = next(r for r in summarize(traces) if r.family == ALL)
    assert row.metrics["kendall_tau"] == pytest.approx(0.5)
    assert row.metrics["spl"] == pytest.approx(0.2)
    assert row.metric_cis["sr"][:2] == [4, 10] and "spl" not in row.metric_cis


def test_mean_interval_is_the_normal_interval_of_the_mean():
    from groundplan.core.stats import mean_interval, mean_se

    m, lo, hi = mean_interval([0.2, 0.4, 0.9])
    se = statistics.stdev([0.2, 0.4, 0.9]) / math.sqrt(3)
    assert m == pytest.approx(0.5) and (lo, hi) == pytest.approx((0.5 - 1.96 * se, 0.5 + 1.96 * se))
    assert mean_interval([0.3]) == (0.3, 0.3, 0.3) and mean_se([0.3]) == (0.3, 0.0)
    assert all(math.isnan(v) for v in mean_se([]))


def test_paired_test_is_mcnemar_for_proportions_and_the_paired_difference_otherwise():
    from groundplan.evaluation.summary import holm, paired_test

    # 0/1: only the discordant pairs count; a None side drops the pair
    record = paired_test([(True, False)] * 2 + [(False, True)] * 7 + [(True, True)] * 3 + [(None, True)],
                         proportion=True)
    counts = (record["n_pairs"], record["both"], record["a_only"], record["b_only"], record["neither"])
    assert counts == (12, 3, 2, 7, 0)
    assert record["p_value"] == pytest.approx(mcnemar_exact(2, 7))
    # continuous: b - a, mean ± 1.96 SE, two-sided normal p
    a, b = [0.1, 0.5, 0.2, 0.4], [0.3, 0.6, 0.6, 0.4]
    diff = paired_test(list(zip(a, b)), proportion=False)
    d = [y - x for x, y in zip(a, b)]
    se = statistics.stdev(d) / math.sqrt(len(d))
    assert diff["diff"] == pytest.approx(statistics.mean(d))
    assert diff["ci"] == pytest.approx([statistics.mean(d) - 1.96 * se, statistics.mean(d) + 1.96 * se])
    assert diff["p_value"] == pytest.approx(2 * (1 - statistics.NormalDist().cdf(statistics.mean(d) / se)))
    assert paired_test([(0.2, 0.5)], proportion=False)["p_value"] is None  # one pair: no spread to test on
    assert paired_test([(None, 1.0)], proportion=False) is None
    # the one Holm adjustment: in place, over the family it names
    family = holm([{"p_value": 0.01}, {"p_value": 0.04}], "tests of this example", alpha=0.05)
    assert [r["p_holm"] for r in family] == pytest.approx(holm_adjust([0.01, 0.04]))
    assert [r["significant"] for r in family] == [True, True]
    assert family[0]["adjustment"] == "Holm-Bonferroni over the 2 tests of this example"


def _wilson_upper(p: float, n: float) -> float:
    return _wilson_bounds(p, n, 1.96)[1]  # the Wilson formula has its own tests above; here n_eff is the point


def test_clustered_wilson_counts_each_cluster_once_when_one_cluster_holds_every_success():
    # 114 episodes in 8 clusters (the Zero-Shot test programs by name)
    sizes = [23, 6, 19, 5, 22, 6, 10, 23]
    _, _, hi_none = clustered_wilson([(0, m) for m in sizes])
    assert hi_none == pytest.approx(_wilson_upper(0.0, 8))
    # one success: the interval is Wilson's at the 8 clusters, not at 114 independent episodes (0.048)
    one = [(1 if i == 1 else 0, m) for i, m in enumerate(sizes)]
    _, _, hi_one = clustered_wilson(one)
    assert hi_one == pytest.approx(_wilson_upper(1 / 114, 8))
    assert hi_one >= hi_none
    # ten successes, all in one cluster: still at most the clusters
    ten = [(10 if i == 2 else 0, m) for i, m in enumerate(sizes)]
    assert clustered_wilson(ten)[2] >= _wilson_upper(10 / 114, 8) - 1e-12
    # successes in two clusters: the cluster-robust variance decides, and here counts more than 8
    spread = [(1 if i in (0, 1) else 0, m) for i, m in enumerate(sizes)]
    assert clustered_wilson(spread)[2] < _wilson_upper(2 / 114, 8)
