"""``groundplan compare RUN_A RUN_B``: two runs paired on the episodes they share, per planner, with Wilson
intervals, Holm-adjusted McNemar tests and paired differences of the env's measures."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from groundplan import cli
from groundplan.core.errors import InvalidInputError
from groundplan.core.stats import (
    mcnemar_exact,
    mean_interval,
    wilson_interval,
)
from groundplan.evaluation.compare import compare_folders, compare_runs, pair_runs
from groundplan.rollout.traces import EpisodeTrace, write_traces

ROOT = Path(__file__).resolve().parents[1]


def trace(planner: str, task: int, success: bool, seed: int = 0, spl: float | None = None) -> EpisodeTrace:
    """A house episode: SR (a proportion) = success, SPL, Kendall tau on successes only (partial)."""
    metrics = {"sr": float(success), "spl": 0.5 * success if spl is None else spl}
    if success:
        metrics["kendall_tau"] = 1.0 if task % 2 else 0.0
    return EpisodeTrace(episode_id=f"{planner}|t{task}|{seed}", planner=planner, env="house", task_id=f"t{task}",
                        family="multion", instruction="find", seed=seed, llm="m", execution_success=success,
                        metrics=metrics)


def run_folder(path: Path, traces: list[EpisodeTrace], options: dict | None = None) -> Path:
    """A run folder as ``groundplan eval`` writes it: config.json and traces.jsonl."""
    path.mkdir(parents=True)
    labels = list(dict.fromkeys(t.planner for t in traces))
    config = {"name": path.name, "env": {"name": "house", "options": options or {}},
              "planners": [{"name": "saynav", "label": label} for label in labels]}
    (path / "config.json").write_text(json.dumps(config))
    write_traces(path / "traces.jsonl", traces)
    return path


def runs() -> tuple[list[EpisodeTrace], list[EpisodeTrace]]:
    """SayNav: A solves t0-t2, B t0-t7 of t0-t9 (5 discordant, all B's); A has t10 alone, B has t11 and
    (t0, seed 1) alone. Explore: A solves t0-t5, B t0-t3 and t6 (2 only A, 1 only B). Old only in A,
    New only in B."""
    a = [trace("SayNav", i, i < 3) for i in range(10)] + [trace("SayNav", 10, True)]
    a += [trace("Explore", i, i < 6) for i in range(8)] + [trace("Old", 0, True)]
    b = [trace("SayNav", i, i < 8) for i in range(10)] + [trace("SayNav", 11, True), trace("SayNav", 0, True, seed=1)]
    b += [trace("Explore", i, i < 4 or i == 6) for i in range(8)] + [trace("New", 0, False)]
    return a, b


def test_pairing_counts_shared_and_one_sided_episodes():
    a, b = runs()
    paired = pair_runs(a, b)
    assert [(x.task_id, y.task_id) for x, y in paired.shared["SayNav"]] == [(f"t{i}", f"t{i}") for i in range(10)]
    assert (paired.only_a, paired.only_b) == ({"SayNav": 1, "Explore": 0}, {"SayNav": 2, "Explore": 0})
    assert (paired.planners_only_a, paired.planners_only_b) == (["Old"], ["New"])
    assert set(pair_runs(a, b, planners=["Explore"]).shared) == {"Explore"}
    with pytest.raises(InvalidInputError, match="Nope"):
        pair_runs(a, b, planners=["Nope"])


def test_discordant_counts_mcnemar_and_holm_over_every_test():
    a, b = runs()
    result = compare_runs(pair_runs(a, b))
    assert (result["n_shared"], result["only_a"], result["only_b"]) == (18, 1, 2)
    rows = {r["planner"]: r for r in result["planners"]}
    saynav = rows["SayNav"]
    assert saynav["success"]["a"]["ci"] == pytest.approx(wilson_interval(3, 10))
    assert saynav["success"]["b"]["ci"] == pytest.approx(wilson_interval(8, 10))
    tests = {(t["planner"], t["measure"]): t for r in result["planners"] for t in r["tests"]}
    # execution success and SR (declared a proportion) for both planners; no plan success in the house
    assert set(tests) == {(p, m) for p in ("SayNav", "Explore") for m in ("execution_success", "sr")}
    ex = tests[("SayNav", "execution_success")]
    assert (ex["a_only"], ex["b_only"], ex["n_pairs"]) == (0, 5, 10)
    assert ex["p_value"] == pytest.approx(mcnemar_exact(0, 5)) == pytest.approx(2 / 32)
    assert (tests[("Explore", "sr")]["a_only"], tests[("Explore", "sr")]["b_only"]) == (2, 1)
    everything = [t for r in result["planners"] for t in r["tests"]]
    # Holm over the 4 tests, by hand: raw p 1/16 (SayNav's 0 vs 5, twice) and 1.0 (Explore's 2 vs 1, twice);
    # sorted 1/16, 1/16, 1, 1 times 4, 3, 2, 1 = 1/4, 3/16, 2, 1, running maximum capped at 1: 1/4, 1/4, 1, 1
    assert tests[("Explore", "execution_success")]["p_value"] == pytest.approx(1.0)
    holm = {key: t["p_holm"] for key, t in tests.items()}
    assert holm == pytest.approx({("SayNav", "execution_success"): 0.25, ("SayNav", "sr"): 0.25,
                                  ("Explore", "execution_success"): 1.0, ("Explore", "sr"): 1.0})
    from statsmodels.stats.multitest import multipletests  # an independent implementation agrees

    assert [t["p_holm"] for t in everything] == pytest.approx(list(multipletests([t["p_value"] for t in everything],
                                                                                  method="holm")[1]))
    assert not any(t["significant"] for t in everything)  # 0.0625 raw: nothing after Holm either


def test_measure_differences_with_intervals_and_partial_pairing():
    a, b = runs()
    saynav = next(r for r in compare_runs(pair_runs(a, b))["planners"] if r["planner"] == "SayNav")
    diffs = {d["measure"]: d for d in saynav["differences"]}
    spl = diffs["spl"]
    expected = mean_interval([0.5 * (i < 8) - 0.5 * (i < 3) for i in range(10)])
    assert spl["diff"] == pytest.approx(0.25) and (spl["diff"], *spl["ci"]) == pytest.approx(expected)
    tau = diffs["kendall_tau"]  # only on t0-t2, where both sides solved and so both have a tau
    assert tau["partial"] and tau["n_pairs"] == 3 and tau["diff"] == 0.0
    assert "path_m" not in diffs  # declared, but no episode reports it


def test_folders_report_and_refusal_on_different_env_options(tmp_path, capsys):
    a, b = runs()
    run_a = run_folder(tmp_path / "a" / "house", a, {"noise": 0.1})
    run_b = run_folder(tmp_path / "b" / "house", b, {"noise": 0.1})
    other = run_folder(tmp_path / "c" / "house", b, {"noise": 0.3})
    result, text = compare_folders(tmp_path / "a", run_b)  # a folder of runs reads as tables reads it
    assert result["n_shared"] == 18
    assert "shared episodes: 18; only in A: 1; only in B: 2" in text
    assert "planners only in A: Old" in text and "planners only in B: New" in text
    assert "solved only in A 0 / only in B 5 of 10" in text and "Holm p=" in text

    assert cli.main(["compare", str(run_a), str(other)]) == 2
    out = capsys.readouterr().out
    assert "env options differ" in out and "noise" in out and "--ignore-env-options" in out
    path = tmp_path / "cmp.json"
    assert cli.main(["compare", str(run_a), str(other), "--ignore-env-options", "--json", str(path)]) == 0
    assert "paired anyway" in capsys.readouterr().out
    assert json.loads(path.read_text())["env_option_differences"]


def test_pair_compares_a_planner_with_a_differently_labelled_one(tmp_path, capsys):
    """A fine-tuned row and its frozen twin whose labels name different prompts: --pair A=B pairs them."""
    a, b = runs()
    run_a = run_folder(tmp_path / "a" / "house", a)
    run_b = run_folder(tmp_path / "b" / "house", [replace(t, planner="SayNav [ft]") if t.planner == "SayNav" else t
                                                  for t in b])
    result, text = compare_folders(run_a, run_b)
    assert "SayNav" not in result["planners"] or not result["planners"].get("SayNav")
    result, text = compare_folders(run_a, run_b, pairs={"SayNav": "SayNav [ft]"})
    assert "solved only in A 0 / only in B 5 of 10" in text and "A's planner 'SayNav' is paired with B's 'SayNav [ft]'" in text
    assert cli.main(["compare", str(run_a), str(run_b), "--pair", "SayNav=Nope"]) == 2
    assert "not a planner of" in capsys.readouterr().out
    assert cli.main(["compare", str(run_a), str(run_b), "--pair", "SayNav"]) == 2


def test_compare_two_real_eval_runs_end_to_end(tmp_path, monkeypatch, capsys):
    """Two tiny kitchen evals (fake LM), the second with one more seed; compare pairs the first's episodes."""
    from groundplan.pipelines.evaluate import sweep
    from tests.fakes import FakeLM

    real = sweep.run_sweep
    monkeypatch.setattr(sweep, "run_sweep", lambda cfg, **kw: real(cfg, lm=FakeLM(), **kw))
    args = ["eval", str(ROOT / "configs" / "saycan_kitchen.yaml"), "--local", "--no-mlflow", "--no-progress",
            "--planners", "SayCan,No-VF", "--set", "max_steps=2", "--set", "tasks.per_family=1",
            "--set", "tasks.families=[nl_single_primitive,nl_nouns]"]
    assert cli.main([*args, "--output", str(tmp_path / "before")]) == 0
    assert cli.main([*args, "--set", "seeds=[0,1]", "--output", str(tmp_path / "after")]) == 0
    capsys.readouterr()
    before, after = tmp_path / "before" / "saycan_kitchen", tmp_path / "after" / "saycan_kitchen"
    assert cli.main(["compare", str(before), str(after)]) == 0
    out = capsys.readouterr().out
    assert "shared episodes: 4; only in A: 0; only in B: 4" in out
    assert "## SayCan: 2 shared episodes (0 only in A, 2 only in B)" in out
    assert "## No-VF: 2 shared episodes" in out
