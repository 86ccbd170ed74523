"""EAI's open-loop row as a groundplan planner (``open_loop``): the model is given EAI's stored prompt and
nothing else, its answer is kept in the trace and judged as text beside the stored LLMs, its steps are
played in the env; the sweep resumes, records a failing episode, runs on Ray, and over
``llm.backend: openai`` against ``groundplan serve``'s ``/v1/completions``; ``groundplan eai run`` runs a
sweep per model and prints the leaderboard."""
from __future__ import annotations

import dataclasses
import functools
import json
import socket
import threading
import time
import zlib
from pathlib import Path

import pytest

pytest.importorskip("virtualhome_eval")

from tests.fakes import FakeLM  # noqa: E402

from groundplan.config import EvalConfig  # noqa: E402
from groundplan.core.errors import InvalidInputError  # noqa: E402
from groundplan.envs.virtualhome.eai.answer import parse_output, program_skills, program_text  # noqa: E402
from groundplan.envs.virtualhome.eai.prompts import stored_prompts  # noqa: E402
from groundplan.evaluation.eai import leaderboard  # noqa: E402
from groundplan.evaluation.eai.judge import EAIJudge  # noqa: E402
from groundplan.evaluation.eai.semantics import SEMANTICS  # noqa: E402
from groundplan.evaluation.tables import run_folders, run_traces  # noqa: E402
from groundplan.llm.base import Generation  # noqa: E402
from groundplan.pipelines.evaluate.sweep import run_sweep  # noqa: E402

#: three official-set tasks with short prompts, each prompt its task's alone (28 stored prompt texts are
#: shared by two to six program ids, e.g. 1035_1, 113_2 and 137_2, so those could not tell tasks apart)
IDS = ["38_1", "549_2", "563_1"]
OPEN_LOOP = {"name": "open_loop", "label": "Open loop",
             "options": {"answer_format": "eai_json", "max_new_tokens": 64, "max_instruction_chars": 20000}}


def answer_for(prompt: str) -> str:
    """The scripted answer to one prompt: two steps, and the prompt's checksum so a trace shows which
    prompt it answered (in a key EAI's executor does not know: a failed third step)."""
    return f'{{"WALK": ["bathroom"], "STANDUP": [], "P{zlib.crc32(prompt.encode())}": ["x"]}}'


class PromptKeyedLM(FakeLM):
    """A FakeLM that answers each prompt with :func:`answer_for` and raises for the prompt ``fail_on``."""

    def __init__(self, fail_on: str | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.fail_on = fail_on

    def generate(self, prompt, params):
        self.generate_calls.append({"prompt": prompt, **dataclasses.asdict(params)})
        if prompt == self.fail_on:
            raise RuntimeError("server went away")
        return [Generation(text=answer_for(prompt), logprob_mean=-1.0, num_tokens=3, finish_reason="stop")]


def _config(tmp_path: Path, ids=IDS, **extra) -> EvalConfig:
    return EvalConfig.model_validate({
        "name": "eai_ol", "env": {"name": "virtualhome_eai", "options": {"task_set": "official", "ids": list(ids)}},
        "planners": [OPEN_LOOP], "seeds": [0], "max_steps": 8,
        "output_dir": str(tmp_path), "runtime": {"executor": "local", "mlflow": False}, **extra})


def test_the_answer_to_eai_prompt_is_kept_played_judged_as_text_and_resumed(tmp_path):
    prompts = stored_prompts()
    cfg = _config(tmp_path)
    lm = PromptKeyedLM()
    result = run_sweep(cfg, lm=lm, progress=False)
    # each task's prompt is EAI's exact prompt for it, and nothing else; greedy, one answer
    assert sorted(c["prompt"] for c in lm.generate_calls) == sorted(prompts[i] for i in IDS)
    assert all(c["temperature"] == 0.0 and c["max_new_tokens"] == 64 and c["n"] == 1 for c in lm.generate_calls)
    by_task = {t.task_id: t for t in result.traces}
    for task_id, t in by_task.items():
        answer = answer_for(prompts[task_id])
        assert t.steps[0].info["answer"] == answer and t.steps[0].info["answer_steps"] == 3
        played = [s.chosen for s in t.steps if not s.done]
        assert played == program_skills(answer) == ["[WALK] <bathroom>", "[STANDUP]", played[2]]
        assert t.steps[-1].done and t.steps[-1].info["stop"] == "end_of_plan"
        assert t.steps[2].success is False  # an action EAI's executor does not know fails in the env too
    # the leaderboard judges the row on the answers it wrote, exactly as it judges a stored answer file
    entries = leaderboard.run_entries(run_traces(run_folders([cfg.run_dir])))
    assert [(e.name, e.kind) for e in entries] == [("Open loop [smollm2-135m-instruct]", "open_loop")]
    judge = EAIJudge()
    board = leaderboard.build(entries, judge=judge)
    for s in ("official", "corrected"):
        expected = [judge.score_text(i, answer_for(prompts[i]), SEMANTICS[s]) for i in sorted(IDS)]
        assert board.verdicts[s][entries[0].name] == expected
        # the exported outcomes: the same verdicts, executability included (open loop), no refused steps
        measures = leaderboard.episode_measures(run_traces(run_folders([cfg.run_dir])), judge=judge)
        by_task = {t.task_id: measures[t.episode_id] for t in result.traces}
        assert [(by_task[v.task_id][f"success_{s}"], by_task[v.task_id][f"executable_{s}"]) for v in expected] == [
            (float(v.success), float(v.executable)) for v in expected]
        assert not any("refused_steps" in m for m in by_task.values())

    # a rerun asks the model nothing: every episode is in the run folder
    again = PromptKeyedLM()
    rerun = run_sweep(cfg, lm=again, progress=False)
    assert again.generate_calls == [] and rerun.skipped == 3

    # a task whose generation raised is a recorded episode error, judged as an empty answer, with a note
    more = _config(tmp_path, ids=[*IDS, "415_1"])
    run_sweep(more, lm=PromptKeyedLM(fail_on=prompts["415_1"]), progress=False)
    entries = leaderboard.run_entries(run_traces(run_folders([more.run_dir])))
    assert entries[0].answers["415_1"] == "" and entries[0].note == "1 episode(s) ended in an error"
    board = leaderboard.build(entries)
    assert len(board.task_ids) == 4


def test_a_stored_llm_is_exported_as_a_row_on_the_runs_tasks_and_pairs_with_them(tmp_path):
    """``groundplan tables --export --eai-stored MODEL``: the stored answers, judged as the leaderboard judges
    them, become a row on the EAI run's tasks (same clusters), so a run's row is tested against it."""
    from groundplan.evaluation import outcomes
    from groundplan.evaluation.eai.leaderboard import load_outputs, stored_dir, stored_models

    cfg = _config(tmp_path)
    run_sweep(cfg, lm=PromptKeyedLM(), progress=False)
    model = "gpt-3.5-turbo-0125"
    doc = outcomes.export_outcomes([cfg.run_dir], ["ours"], ["ours:Open loop=gpt-3.5-turbo-0125:stored answers"],
                                   eai_stored=[model])
    stored = [e for e in doc["episodes"] if e["run"] == model]
    ours = {e["task_id"]: e for e in doc["episodes"] if e["run"] == "ours"}
    assert sorted(e["task_id"] for e in stored) == sorted(IDS) and all(e["planner"] == "stored answers" for e in stored)
    judge, answers = EAIJudge(), load_outputs(stored_dir() / f"{model}_outputs.json")
    for e in stored:
        v = judge.score_text(e["task_id"], answers[e["task_id"]], SEMANTICS["official"])
        assert e["success_official"] == e["execution_success"] == float(v.success)
        assert e["executable_official"] == float(v.executable) and e["cluster"] == ours[e["task_id"]]["cluster"]
    assert doc["pairs"] == [{"a": ["Open loop", "ours"], "b": ["stored answers", model]}]
    text = outcomes.render_markdown(doc, outcomes.TableSpec.parse("measures=success_official paired=listed", "t"))
    assert "stored answers" in text and "| Open loop | ours |" in text
    with pytest.raises(InvalidInputError, match="no stored answers"):
        outcomes.export_outcomes([cfg.run_dir], eai_stored=["gpt-9"])
    every = outcomes.export_outcomes([cfg.run_dir], eai_stored=["all"])  # the whole leaderboard, each model once
    assert [r["name"] for r in every["runs"][1:]] == stored_models(stored_dir()) and len(every["runs"]) == 16


def test_a_stored_llm_beside_an_oracle_row_is_clustered_by_prompt_not_by_task():
    """An oracle row's episodes are clusters of one task each, with their prompt's key beside: the stored
    answers, which read only the prompt, take the prompt grouping (two tasks of one prompt are one cluster)."""
    from groundplan.evaluation import outcomes
    from groundplan.evaluation.eai.leaderboard import EAI_ENV

    runs = [{"name": "oracle", "config_hash": "h", "env": EAI_ENV, "env_options": {}, "model": "m"}]
    episodes = [{"run": "oracle", "planner": "SayCan (oracle x)", "config_hash": "h", "task_id": t, "family": "f",
                 "seed": 0, "cluster": f"task-{t}", "prompt": "same" if i < 2 else "other", "execution_success": 0.0}
                for i, t in enumerate(IDS)]
    outcomes._add_stored_rows(runs, episodes, ["gpt-3.5-turbo-0125"])
    stored = {e["task_id"]: e for e in episodes if e["run"] == "gpt-3.5-turbo-0125"}
    assert [stored[t]["cluster"] for t in IDS] == ["same", "same", *["other"] * (len(IDS) - 2)]
    assert not any("prompt" in e for e in stored.values())


def test_open_loop_options_are_checked_when_the_config_loads(tmp_path):
    with pytest.raises(Exception, match="unknown answer format 'yaml'"):
        _config(tmp_path, planners=[{**OPEN_LOOP, "options": {"answer_format": "yaml"}}])
    with pytest.raises(Exception, match="must contain {instruction}"):
        _config(tmp_path, planners=[{**OPEN_LOOP, "options": {"template": "Plan:"}}])


def test_open_loop_on_ray_runners(tmp_path, ray_local):
    """The row as a batch over Ray: runner actors, the answers from the scorer actors' model."""
    answer = '{"WALK": ["bathroom"]}'
    cfg = _config(tmp_path, ids=IDS[:2], runtime={"executor": "ray", "workers": 2, "mlflow": False})
    result = run_sweep(cfg, lm_factory=functools.partial(FakeLM, generations=[answer] * 4), progress=False)
    assert sorted(t.task_id for t in result.traces) == sorted(IDS[:2])
    assert all(not t.error and t.steps[0].info["answer"] == answer and t.steps[0].chosen == "[WALK] <bathroom>"
               for t in result.traces)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_openai_backend_against_groundplan_serve_then_scored(tmp_path, monkeypatch):
    """The row over ``llm.backend: openai`` against the serve API's ``/v1/completions`` (``local_app``,
    what ``groundplan serve --local`` runs, in a thread), then scored by ``groundplan eai score --runs``."""
    pytest.importorskip("uvicorn")
    import uvicorn
    from tests.conftest import tiny_llama_lm

    from groundplan.pipelines.eai.score import EAIScoreConfig, score
    from groundplan.serve.api import build_api
    from groundplan.serve.config import ServeConfig
    from groundplan.serve.local import LocalBackend

    lm = tiny_llama_lm(tmp_path / "tiny", seed=0)
    serve_cfg = ServeConfig(viewer_dir=None)
    token = "eai-open-loop-token"
    monkeypatch.setenv("GP_EAI_TEST_KEY", token)
    port = _free_port()
    app = build_api(serve_cfg, LocalBackend(serve_cfg, lm), llm_name="tiny", token=token)
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    try:
        for _ in range(400):
            if srv.started:
                break
            time.sleep(0.05)
        llm = {"backend": "openai", "model": "tiny", "options": {"base_url": f"http://127.0.0.1:{port}/v1",
                                                                 "api_key_env": "GP_EAI_TEST_KEY", "max_retries": 0}}
        cfg = _config(tmp_path, ids=IDS[:2], llm=llm,
                      planners=[{**OPEN_LOOP, "options": {**OPEN_LOOP["options"], "max_new_tokens": 12}}])
        result = run_sweep(cfg, progress=False)
    finally:
        srv.should_exit = True
        thread.join(timeout=10)
    assert sorted(t.task_id for t in result.traces) == sorted(IDS[:2])
    assert all(not t.error and isinstance(t.steps[0].info["answer"], str) for t in result.traces)

    # one stored model's answers on these tasks (scoring its whole file would load all its tasks)
    stored = json.loads((leaderboard.stored_dir() / "gpt-4o-2024-05-13_outputs.json").read_text())
    (tmp_path / "responses").mkdir()
    (tmp_path / "responses" / "gpt-4o-2024-05-13_outputs.json").write_text(
        json.dumps([r for r in stored if r["identifier"] in IDS[:2]]))
    scored = score(EAIScoreConfig(output=tmp_path / "scored", responses=tmp_path / "responses", semantics="official",
                                  count_corrections=False, runs=[cfg.run_dir]))
    board = scored["leaderboard"]
    assert board["task_ids"] == sorted(IDS[:2])
    assert board["entries"]["Open loop [tiny]"]["kind"] == "open_loop"
    assert [r["n"] for r in board["rows"]["official"]] == [2, 2]


def test_eai_run_config_runs_a_sweep_per_model_then_the_leaderboard(tmp_path, monkeypatch):
    """``groundplan eai run``: the sweep once per model (its own run folder), resumable, then the
    leaderboard over the stored rows and every model's rows; a sweep of another env is refused."""
    import yaml

    from groundplan.pipelines.eai import run as eai_run

    sweep = {"name": "eai_small", "env": {"name": "virtualhome_eai", "options": {"task_set": "official", "ids": IDS[:2]}},
             "planners": [OPEN_LOOP], "max_steps": 4,
             "output_dir": str(tmp_path / "runs"), "runtime": {"executor": "local", "mlflow": False}}
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(sweep))
    (tmp_path / "board.yaml").write_text(yaml.safe_dump({
        "sweep": "sweep.yaml", "models": [{"model": "m-one"}, {"model": "org/m-two"}],
        "semantics": "official", "output": str(tmp_path / "board")}))
    cfg = eai_run.load_run_config(tmp_path / "board.yaml")
    assert [s.name for s in eai_run.model_sweeps(cfg)] == ["eai_small-m-one", "eai_small-m-two"]

    built = []

    def fake_llm(spec):
        built.append(spec.model)
        return PromptKeyedLM(name=spec.model)

    monkeypatch.setattr("groundplan.pipelines.evaluate.sweep.make_llm", fake_llm)
    from groundplan.cli import main

    assert main(["eai", "run", str(tmp_path / "board.yaml"), "--local", "--no-mlflow", "--no-progress"]) == 0
    assert built == ["m-one", "org/m-two"]
    result = json.loads((tmp_path / "board" / "summary.json").read_text())
    assert {k: v["episodes_run"] for k, v in result["sweeps"].items()} == {"eai_small-m-one": 2, "eai_small-m-two": 2}
    rows = {r["model"] for r in result["leaderboard"]["rows"]["official"]}
    assert {"Open loop [m-one]", "Open loop [org/m-two]"} <= rows and len(rows) == 17
    table = (tmp_path / "board" / "table.txt").read_text()
    assert "rank" in table
    # the table's rows name each run's model: "[m-one]" is text, not rich markup that swallows it
    assert "│ Open loop [m-one]" in table and "│ Open loop [org/m-two]" in table
    header = next(line for line in table.splitlines() if "┃ model" in line)
    row = next(line for line in table.splitlines() if "│ Open loop [m-one]" in line)
    assert row.count("│") == header.count("┃")  # every column has its cell
    assert [c.strip() for c in row.split("│")[2:5]] == ["2", "0% [0–66]", "0% [0–66]"]  # n, success, executable
    again = eai_run.run(cfg, progress=False)  # resumable: nothing runs twice
    assert built == ["m-one", "org/m-two"]  # no model was even built
    assert all(v["episodes_run"] == 0 and v["episodes_reused"] == 2 for v in again["sweeps"].values())

    (tmp_path / "kitchen.yaml").write_text(yaml.safe_dump({**sweep, "env": {"name": "kitchen"}, "tasks": {}}))
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump({"sweep": "kitchen.yaml", "models": [{"model": "x"}]}))
    with pytest.raises(InvalidInputError, match="needs 'virtualhome_eai'"):
        eai_run.model_sweeps(eai_run.load_run_config(tmp_path / "bad.yaml"))
    assert main(["eai", "run", str(tmp_path / "bad.yaml"), "--local"]) == 2  # a clear error, no traceback


def test_chat_template_sends_the_prompt_as_a_users_turn_and_a_base_model_is_refused(tmp_path):
    """``chat_template``: the engine wraps EAI's prompt in the model's own template (the tokenizer's, not a
    copy of it), the trace keeps what the model read; a model without a template is refused, and a backend
    that does not declare the capability is refused when the config loads."""
    from groundplan.core.types import Observation, Task
    from groundplan.llm.base import GenerationParams
    from groundplan.planners.open_loop import OpenLoopPlanner
    from tests.conftest import tiny_llama_lm

    lm = tiny_llama_lm(tmp_path / "tiny", seed=0)
    want = lm.tokenizer.apply_chat_template([{"role": "user", "content": "Task: x"}], tokenize=False,
                                            add_generation_prompt=True)
    assert lm.chat_prompt("Task: x") == want and want.endswith("<|im_start|>assistant\n") and "Task: x" in want
    planner = OpenLoopPlanner(lm, template="Task: {instruction}", chat_template=True, max_new_tokens=4)
    planner.reset(Task("t", "x", "f", None), Observation(skills=["done"]))
    assert planner.prompt == want
    bare = OpenLoopPlanner(lm, template="Task: {instruction}", max_new_tokens=4)
    bare.reset(Task("t", "x", "f", None), Observation(skills=["done"]))
    assert bare.prompt == "Task: x"
    lm.tokenizer.chat_template = None
    with pytest.raises(InvalidInputError, match="has no chat template"):
        lm.chat_prompt("x")
    assert lm.generate("x", GenerationParams(max_new_tokens=1))  # the model itself still writes
    with pytest.raises(Exception, match="chat_template"):
        _config(tmp_path, planners=[{**OPEN_LOOP, "options": {**OPEN_LOOP["options"], "chat_template": True}}],
                llm={"backend": "llamacpp", "model": "smollm2-135m-instruct"})


def test_a_program_written_as_eai_json_reads_back_as_the_same_steps():
    """The fine-tuning target of an open-loop model: the steps as one JSON object in order, a repeated action a
    repeated key (as the stored LLMs write them), which the corrected reading gives back step for step and the
    official one reads as EAI's evaluator does (first position, last value); a label that is no EAI step is refused."""
    steps = ["[WALK] <bathroom>", "[STANDUP]", "[WALK] <sink>", "[PUTBACK] <cup> <sink>"]
    text = program_text(steps)
    assert text == '{"WALK": ["bathroom"], "STANDUP": [], "WALK": ["sink"], "PUTBACK": ["cup", "sink"]}'
    assert program_skills(text) == steps
    assert parse_output(text, repeated_keys=False).steps == (("WALK", ("sink",)), ("STANDUP", ()), ("PUTBACK", ("cup", "sink")))
    with pytest.raises(ValueError, match="not an EAI step"):
        program_text(["walk to the sink"])
