"""Results tables from committed episode outcomes: export from run folders, render with clustered intervals
and Holm-adjusted paired tests, and every marked block of ``docs/results`` equal to its re-rendering."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from groundplan.core.errors import InvalidInputError
from groundplan.core.stats import clustered_wilson, mcnemar_exact
from groundplan.evaluation import outcomes
from groundplan.core.truth import OracleDeclaration, Truth
from groundplan.rollout.traces import EpisodeTrace, read_traces, write_traces

ROOT = Path(__file__).resolve().parents[1]


def _run(folder: Path, name: str, model: str, wins: dict[str, bool]) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"name": name, "env": {"name": "virtualhome", "options": {}},
                                                    "llm": {"model": model}}))
    traces = [EpisodeTrace(episode_id=f"{name}-{tid}", planner="Translated", env="virtualhome", task_id=tid,
                           family="f", instruction=("Drink" if tid < "3" else "Work ") + "", seed=0, llm=model,
                           config_hash="h", execution_success=won, metrics={"executability": float(won), "lcs": 0.5})
              for tid, won in wins.items()]
    traces.append(EpisodeTrace(episode_id=f"{name}-err", planner="Translated", env="virtualhome", task_id="9",
                               family="f", instruction="Pet cat", seed=0, llm=model, error="RuntimeError: boom\nmore"))
    write_traces(folder / "traces.jsonl", traces)
    return folder


def test_export_and_render_pair_the_twins_with_clustered_intervals(tmp_path):
    a = _run(tmp_path / "a", "frozen", "smollm2", {"1": False, "2": False, "3": True, "4": False})
    b = _run(tmp_path / "b", "ft", "models:/say/1", {"1": True, "2": True, "3": True, "4": False})
    doc = outcomes.export_outcomes([a, b])
    path = outcomes.write_outcomes(tmp_path / "o.json", doc)
    assert outcomes.load_outcomes(path) == json.loads(json.dumps(doc))
    assert "prompt" not in path.read_text() and len(doc["episodes"]) == 10
    table = outcomes.render_markdown(outcomes.load_outcomes(path))
    rows = [line for line in table.splitlines() if line.startswith("| Translated |")]
    _, lo, hi = clustered_wilson([(0, 2), (1, 2)])  # frozen: Drink 0/2, Work 1/2
    assert f"| 25% [{100 * lo:.0f}–{100 * hi:.0f}] (1/4) |" in rows[0]
    assert rows[0].split(" | ")[1:6] == ["frozen", "`smollm2`", "5", "3", "1"]  # episodes, clusters, errors
    assert f"75% [{100 * clustered_wilson([(2, 2), (1, 2)])[1]:.0f}–" in rows[1]
    paired = [line for line in table.splitlines() if line.startswith("| Translated (frozen) | Translated (ft) |")]
    by_episode = next(line for line in paired if "execution_success | episodes" in line)
    assert by_episode.split(" | ")[4:7] == ["4", "0", "2"] and f"{mcnemar_exact(0, 2):.3g}" in by_episode
    by_cluster = next(line for line in paired if "execution_success | clusters" in line)
    assert by_cluster.split(" | ")[4:7] == ["2", "0", "1"]  # tasks 1 and 3 open their clusters
    solo = outcomes.export_outcomes([a, b])
    for e in solo["episodes"]:
        e["cluster"] = e["task_id"]  # one episode a cluster: the per-cluster test would be the same test again
    assert "clusters (first episode each)" not in outcomes.render_markdown(solo)
    assert "Holm over the 2 tests" in outcomes.render_markdown(solo)  # execution and executability, per episode
    with pytest.raises(InvalidInputError, match="different models"):
        outcomes.export_outcomes([a, b], names=["same", "same"])
    with pytest.raises(InvalidInputError, match="no episode"):
        outcomes.export_outcomes([a, b], pairs=["frozen:Nope=ft:Translated"])
    crossed = outcomes.render_markdown(outcomes.export_outcomes([a, b], pairs=["frozen:Translated=ft:Translated"]))
    assert crossed.count("| Translated (frozen) | Translated (ft) | execution_success |") == 4
    for folder in (a, b):  # a grid variant's label holds "=": the pair splits where a run's name follows
        traces = list(read_traces(folder / "traces.jsonl"))
        for t in traces:
            t.planner = "T [epsilon=0.4]"
        (folder / "traces.jsonl").unlink()
        write_traces(folder / "traces.jsonl", traces)
    pair = outcomes.export_outcomes([a, b], pairs=["frozen:T [epsilon=0.4]=ft:T [epsilon=0.4]"])["pairs"]
    assert pair == [{"a": ["T [epsilon=0.4]", "frozen"], "b": ["T [epsilon=0.4]", "ft"]}]
    with pytest.raises(InvalidInputError, match="a pair is RUN:LABEL=RUN:LABEL"):
        outcomes.export_outcomes([a, b], pairs=["frozen:Translated"])
    with pytest.raises(InvalidInputError, match="format"):
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps({"format": 99}))
        outcomes.load_outcomes(bad)


def test_a_marker_chooses_measures_and_a_family_breakdown_and_marks_rows_that_read_truth(tmp_path):
    a = _run(tmp_path / "a", "kitchen", "smollm2", {"1": False, "2": True, "3": True, "4": False})
    traces = [t for t in read_traces(a / "traces.jsonl")]
    for t in traces:
        t.family, t.plan_success = ("nouns" if t.task_id < "3" else "verbs"), t.task_id == "2"
        t.oracles = [OracleDeclaration(name="value_functions", wording="stand-in value functions",
                                       reads=frozenset({Truth.STATE}), stands_in=True).to_dict()]
    (a / "traces.jsonl").unlink()
    write_traces(a / "traces.jsonl", traces)
    outcomes.write_outcomes(tmp_path / "data" / "o.json", outcomes.export_outcomes([a]))
    page = tmp_path / "page.md"
    page.write_text("<!-- outcomes: data/o.json by=family measures=plan_success,execution_success -->\n<!-- /outcomes -->\n")
    text = outcomes.render_page(page)
    assert "| family | episodes | Translated ‡ |" in text  # one run: rows named by planner alone
    assert "| nouns | 2 | 50% / 50% |" in text and "| verbs | 3 | 0% / 50% |" in text  # task 9 errs, in verbs
    assert "| planner | run | model | episodes | clusters | errors | plan_success | execution_success |" in text
    assert "| Translated ‡ | kitchen |" in text and "stand-in value functions" in text
    page.write_text("<!-- outcomes: data/o.json measures=nope -->\n<!-- /outcomes -->\n")
    with pytest.raises(InvalidInputError, match="no measure nope"):
        outcomes.render_page(page)
    page.write_text("<!-- outcomes: data/o.json colour=red -->\n<!-- /outcomes -->\n")
    with pytest.raises(InvalidInputError, match="unknown option 'colour'"):
        outcomes.render_page(page)


def test_a_cluster_is_what_the_planner_read_before_it_acted():
    from groundplan.rollout.traces import StepTrace

    def trace(prompt, deltas, instruction="Drink"):
        return EpisodeTrace(episode_id="e", planner="p", env="virtualhome", task_id="1", family="f",
                            instruction=instruction, seed=0, llm="m", prompt=prompt,
                            steps=[StepTrace(index=i, chosen="x", done=False, prompt_delta=d) for i, d in enumerate(deltas)])

    opening = outcomes.cluster_key(trace("Task: Drink\nStep 1:", []))
    assert outcomes.cluster_key(trace("Task: Drink\nStep 1: Walk\nStep 2:", [" Walk\nStep 2:"])) == opening
    assert outcomes.cluster_key(trace("Task: Work\nStep 1:", [])) != opening
    assert outcomes.cluster_key(trace("", [], "Drink")) == outcomes.cluster_key(trace("", [], " drink "))


def test_a_page_block_is_rendered_from_its_file(tmp_path):
    a = _run(tmp_path / "a", "frozen", "m", {"1": True, "3": False})
    outcomes.write_outcomes(tmp_path / "data" / "o.json", outcomes.export_outcomes([a]))
    page = tmp_path / "page.md"
    page.write_text("# t\n\n<!-- outcomes: data/o.json -->\nstale\n<!-- /outcomes -->\n\nafter\n")
    text = outcomes.render_page(page)
    assert "stale" not in text and "| Translated | frozen |" in text and text.endswith("<!-- /outcomes -->\n\nafter\n")
    assert outcomes.render_page(page, write=False) == page.read_text()
    page.write_text("<!-- outcomes: data/none.json -->\n<!-- /outcomes -->\n")
    with pytest.raises(InvalidInputError, match="does not exist"):
        outcomes.render_page(page)


def test_the_hanoi_say_rows_rerun_from_scratch_give_the_tables_outcomes():
    """say.md's claim about its Hanoi rerun on a fresh machine (collection, training and both Say rows again):
    every rerun episode has the committed table's outcome in every measure the data holds."""
    data = ROOT / "docs" / "results" / "data" / "say"
    measures = ("execution_success", "cost_effective", "illegal_moves", "length", "picks", "sim_steps")

    def by_episode(doc: dict) -> dict:
        return {(e["run"], e["planner"], e["task_id"], e["seed"]): [e.get(m) for m in measures] for e in doc["episodes"]}

    table = by_episode(outcomes.load_outcomes(data / "saycanpay_hanoi.json"))
    rerun = by_episode(outcomes.load_outcomes(data / "saycanpay_hanoi_reproduced.json"))
    assert len(rerun) == 64 and {(r, p) for r, p, _, _ in rerun} == {
        (r, p) for r in ("frozen", "fine-tuned") for p in ("GA-Say", "BA-Say")}
    assert {k: table.get(k) for k in rerun} == rerun


@pytest.mark.parametrize("page", [ROOT / "README.md", ROOT / "docs" / "models.md", *sorted((ROOT / "docs" / "results").glob("*.md"))],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_every_table_block_in_the_results_pages_is_what_its_data_renders(page):
    from groundplan.evaluation.pages import render_page

    text = page.read_text(encoding="utf-8")
    assert render_page(page, write=False, required=False) == text, f"re-render {page}: groundplan tables --render {page}"


# The tables of the results pages that are not rendered from data, by page and the heading they sit under, with
# why. The list only shrinks: a table outside a rendered block under any other heading fails, and so does an
# entry whose table is gone (remove it). Headline tables cite the page of each figure they summarise.
TYPED_TABLES: dict[str, dict[str, str]] = {
    "README.md": {"## Results": "headlines, each row citing its results page"},
    "docs/results/README.md": {"## Headlines": "headlines, each row citing its results page"},
    "docs/results/eai.md": {
        "## The tasks": "the task sets' sizes and what the loader drops (counts, not outcomes)",
        "## The corrections": "what each evaluator correction changes (definitions and counts), typed",
    },
}


def _tables_outside_blocks(text: str) -> list[tuple[int, str]]:
    """(line, heading above) of every markdown table whose separator row is outside a rendered block."""
    import re

    inside, heading, found = False, "", []
    for n, line in enumerate(text.splitlines(), 1):
        if re.match(r"<!-- [a-z][a-z -]*: ", line):
            inside = True
        elif line.startswith("<!-- /"):
            inside = False
        elif line.startswith("#") and not inside:
            heading = line.strip()
        elif not inside and re.fullmatch(r"\|(?: *:?-+:? *\|)+", line.strip()):
            found.append((n, heading))
    return found


@pytest.mark.parametrize("page", [ROOT / "README.md", *sorted((ROOT / "docs" / "results").glob("*.md"))],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_a_results_table_is_rendered_from_data_unless_listed_as_typed(page):
    rel = str(page.relative_to(ROOT))
    allowed = TYPED_TABLES.get(rel, {})
    tables = _tables_outside_blocks(page.read_text(encoding="utf-8"))
    stray = [(n, h) for n, h in tables if h not in allowed]
    assert not stray, (f"{rel}: tables outside a rendered block (render them from committed data with "
                       f"groundplan tables --render, or cite their page): {stray}")
    gone = set(allowed) - {h for _, h in tables}
    assert not gone, f"{rel}: no typed table left under {sorted(gone)}: remove them from TYPED_TABLES"


def test_the_typed_table_check_sees_tables_only_outside_blocks():
    text = ("# P\n\n| a |\n|---|\n| 1 |\n\n## R\n<!-- outcomes: x.json -->\n| b |\n| --- |\n<!-- /outcomes -->\n"
            "<!-- improve table: y -->\n| c |\n|:--:|:-|\n<!-- /improve table: y -->\n")
    assert _tables_outside_blocks(text) == [(4, "# P")]


def _nav_doc() -> dict:
    """Two runs (settings, not models) of two planners on the same three houses; tau only where it succeeded."""
    eps = []
    for run, bump in (("gt", 0.0), ("noisy", -0.1)):
        for planner, spl in (("SayNav", [0.5, 0.6, 0.4]), ("Explore", [0.3, 0.5, 0.2])):
            for i, s in enumerate(spl):
                e = {"run": run, "planner": planner, "config_hash": "h", "task_id": f"house{i}", "family": "all",
                     "seed": 0, "cluster": f"c{i}", "execution_success": 1.0, "sr": float(i != 2), "spl": s + bump}
                eps.append({**e, "kendall_tau": 0.5} if i != 2 else e)
    runs = [{"name": r, "config_hash": "h", "env": "house", "env_options": {}, "model": "smollm2"} for r in ("gt", "noisy")]
    pairs = [{"a": ["Explore", r], "b": ["SayNav", r]} for r in ("gt", "noisy")]
    return {"format": outcomes.FORMAT, "runs": runs, "pairs": pairs, "episodes": eps}


def test_table_options_show_means_with_intervals_partial_measures_and_test_what_they_name():
    from groundplan.core.stats import clustered_mean_interval, mean_interval

    doc = _nav_doc()
    spec = outcomes.TableSpec.parse("measures=sr,spl,kendall_tau tests=sr,spl paired=listed group=run")
    table = outcomes.render_markdown(doc, spec)
    rows = [line for line in table.splitlines() if line.startswith(("| SayNav |", "| Explore |"))]
    assert [r.split(" | ")[1] for r in rows[:4]] == ["gt", "gt", "noisy", "noisy"]  # each run's rows together
    m, lo, hi = mean_interval([0.5, 0.6, 0.4])
    assert f"| {m:.3f} [{lo:.3f}, {hi:.3f}] | 0.500 [0.500, 0.500] (n=2) |" in rows[0]  # tau over the 2 with it
    assert clustered_mean_interval([[0.5, 0.6], [0.4]])[0] == pytest.approx(0.5)
    paired = [line for line in table.splitlines() if line.startswith("| Explore (")]
    assert len(paired) == 4 and "Holm over the 4 tests" in table  # the listed pairs only, sr and spl
    spl_gt = next(line for line in paired if "(gt) | SayNav (gt) | spl" in line)
    assert "| - | - | +0.167 [" in spl_gt  # a mean difference, no discordant counts
    everything = outcomes.render_markdown(doc, outcomes.TableSpec.parse("measures=sr,spl"))
    assert "| SayNav (gt) | SayNav (noisy) | sr |" in everything  # paired=all: a planner's runs against its first
    for bad, match in (("group=house", "group"), ("tests=nope", "tests: no measure nope"), ("measures", "key=value")):
        with pytest.raises(InvalidInputError, match=match):
            outcomes.render_markdown(doc, outcomes.TableSpec.parse(bad))


def test_a_count_its_env_declares_is_a_mean_even_where_every_value_is_0_or_1():
    """House's ``targets_found`` is a count: at 0 and 1 only it is still averaged, never shown as a rate."""
    doc = _nav_doc()
    for i, e in enumerate(doc["episodes"]):
        e["targets_found"] = float(i % 2)
    table = outcomes.render_markdown(doc, outcomes.TableSpec.parse("measures=sr,targets_found paired=listed"))
    row = next(line for line in table.splitlines() if line.startswith("| SayNav | gt |"))
    assert row.endswith("| 67% [16–95] (2/3) | 0.333 [-0.320, 0.987] |")  # sr a rate; targets_found a mean


def test_a_row_that_reads_a_tasks_truth_as_an_oracle_clusters_by_task():
    """Two houses with one instruction and one logged "prompt": one question to a planner that reads only
    those, two to an oracle that reads each house's target positions (a stand-in's reading does not split)."""
    def trace(task: str, declared: list[dict]) -> EpisodeTrace:
        return EpisodeTrace(episode_id=task, planner="Baseline", env="house", task_id=task, family="all",
                            instruction="Find a mug.", seed=0, llm="m", prompt="done", oracles=declared)

    oracle = [OracleDeclaration(name="targets", wording="target positions", reads=frozenset({Truth.GOAL})).to_dict()]
    stand_in = [{**oracle[0], "stands_in": True}]
    assert outcomes.cluster_key(trace("a", [])) == outcomes.cluster_key(trace("b", []))
    assert outcomes.cluster_key(trace("a", stand_in)) == outcomes.cluster_key(trace("b", stand_in))
    assert outcomes.cluster_key(trace("a", oracle)) != outcomes.cluster_key(trace("b", oracle))
    assert outcomes.prompt_key(trace("a", oracle)) == outcomes.prompt_key(trace("b", oracle)) is not None
    assert outcomes.prompt_key(trace("a", [])) is None and outcomes.prompt_key(trace("a", stand_in)) is None


def test_an_oracle_rows_pairs_are_tested_again_per_distinct_prompt(tmp_path):
    """Four tasks, two prompts: the oracle rows are four clusters, and their pair is tested over the four
    episodes (each its own cluster: no second test) and over the two prompts' first episodes."""
    oracle = [OracleDeclaration(name="pre", wording="preconditions", reads=frozenset({Truth.STATE})).to_dict()]
    folders = []
    for name, wins in (("frozen", "0001"), ("tuned", "1110")):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps({"name": name, "env": {"name": "virtualhome", "options": {}},
                                                        "llm": {"model": name}}))
        write_traces(folder / "traces.jsonl", [
            EpisodeTrace(episode_id=f"{name}{i}", planner="SayCan", env="virtualhome", task_id=str(i), family="f",
                         instruction="Drink" if i < 2 else "Work", seed=0, llm=name, prompt=f"Task: {i // 2}",
                         config_hash="h", execution_success=w == "1", oracles=oracle)
            for i, w in enumerate(wins)])
        folders.append(folder)
    doc = outcomes.export_outcomes(folders)
    assert len({e["cluster"] for e in doc["episodes"] if e["run"] == "frozen"}) == 4
    assert len({e["prompt"] for e in doc["episodes"] if e["run"] == "frozen"}) == 2
    table = outcomes.render_markdown(doc)
    assert "| 4 | 4 | 0 |" in table  # episodes, clusters, errors
    units = [line.split(" | ")[3:7] for line in table.splitlines() if line.startswith("| SayCan † (frozen) |")]
    assert units == [["episodes", "4", "1", "3"], ["prompts (first episode each)", "2", "0", "2"]]
    assert "Holm over the 2 tests" in table


def test_a_missing_or_broken_outcomes_file_is_a_clear_error(tmp_path):
    with pytest.raises(InvalidInputError, match="no such outcomes file"):
        outcomes.load_outcomes(tmp_path / "none.json")
    for text, match in (("{", "not an outcomes file"), ("[1]", "format 'list'"), ('{"format": 0}', "format 0")):
        (tmp_path / "o.json").write_text(text)
        with pytest.raises(InvalidInputError, match=match):
            outcomes.load_outcomes(tmp_path / "o.json")
