"""Say fine-tuning (``groundplan train`` with ``kind: say``): examples are the planner's own prompts, bad input
is refused before work starts, and a tiny random Llama trains on Ray Train, survives a kill, registers with
its lineage and prompt fingerprint, and plans through ``eval``, ``plan`` and the serve app's
``/v1/completions`` by its ``models:/`` URI."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from groundplan.core.errors import InvalidInputError, MissingModelError
from groundplan.llm.embeddings import SentenceEmbedder
from groundplan.rollout.say_examples import ForcedChoiceLM, replay_examples

pytest.importorskip("minigrid")

ROOT = Path(__file__).resolve().parents[1]
from tests.conftest import BABYAI_SMALL as SMALL  # noqa: E402
SCP = {"prompt": "saycanpay_babyai_plain", "done_skill": "done picking up", "decoding": "greedy_action", "score": "say"}


def say_config(data_path: str, out: Path, **kw):
    from groundplan.pipelines.train.say_config import SayTrainConfig

    doc = {"name": "say-test", "env": {"name": "babyai", "options": SMALL},
           "planner": {"name": "saycanpay", "label": "GA-Say", "options": SCP}, "data": [data_path],
           "output_dir": str(out), "tracking_uri": f"sqlite:///{out}/mlflow.db", "seed": 0}
    doc.update(kw)
    return SayTrainConfig.model_validate(doc)


# ------------------------------------------------------------------------------------ examples
def test_examples_are_the_prompts_the_planner_builds(babyai_data, tmp_path):
    from groundplan.planners.saycan import load_prompt
    from groundplan.planners.saycanpay import build_query
    from groundplan.pipelines.train.say import build_say_examples

    train, val, counts, lineage = build_say_examples(say_config(babyai_data, tmp_path))
    assert counts["diverged"] == 0 and counts["trajectories"] == 12
    assert counts["train_examples"] == len(train) and len(val) == counts["val_examples"] > 0
    few_shot = load_prompt("saycanpay_babyai_plain")
    by_traj: dict[str, list] = {}
    for e in train + val:
        by_traj.setdefault(e.traj_id, []).append(e)
    for traj, examples in by_traj.items():
        history: list[str] = []
        for e in sorted(examples, key=lambda e: e.step):
            goal = e.prompt.split("[Goal] ", 1)[1].split("\n", 1)[0]
            init = e.prompt.split("[Initial State] ", 1)[1].split("\n", 1)[0]
            assert e.prompt == build_query(few_shot, goal, init, history)  # exactly what the planner read
            assert e.kind == "beam" and e.completion.startswith(" ") and e.completion.endswith("\n")
            history.append(e.completion.strip())
        assert history[-1] == "done picking up"
    # split by task: no task (and no visible signature) is both train and validation
    roles = {}
    for ex in lineage.examples:
        roles.setdefault(ex.signature, set()).add(ex.role)
    assert all(len(r) == 1 for r in roles.values()) and {"train", "validation"} <= {ex.role for ex in lineage.examples}
    assert {e.task_id for e in train}.isdisjoint({e.task_id for e in val})


def test_a_saycan_decision_is_the_option_it_scores(tmp_path):
    """SayCan scores options (Algorithm 1): the completion is the option string the planner scored."""
    from groundplan.config import PlannerSpec
    from groundplan.factory import build_env, make_affordance, make_planner

    env = build_env("kitchen", {"mode": "language"})
    task = next(t for t in env.tasks() if t.reference_plan)
    spec = PlannerSpec(name="saycan", affordance=env.default_affordance())
    affordance = make_affordance(spec)
    lm = ForcedChoiceLM(SentenceEmbedder())
    steps = list(task.reference_plan)  # the kitchen's reference plans end with the done skill
    assert steps[-1] == env.done_skill
    res = replay_examples(lambda m: make_planner(spec, m, 20, affordance), lm, env, task, 0, steps, "t")
    assert res.diverged is None and len(res.examples) == len(steps)
    assert res.examples[0].prompt.endswith(f"Human: {task.instruction}\nRobot: 1.")
    assert [e.completion.strip() for e in res.examples] == list(steps) and {e.kind for e in res.examples} == {"score"}
    # a step the planner never offers ends the replay there, keeping the decisions before it
    bad = replay_examples(lambda m: make_planner(spec, m, 20, affordance), lm, env, task, 0,
                          [steps[0], "juggle the fridge", *steps[1:]], "t")
    assert bad.diverged is not None and "juggle the fridge" in bad.diverged and len(bad.examples) == 1


@pytest.mark.parametrize("planner, done", [("zeroshot", "\n"), ("inner_monologue", " done\n")])
def test_generation_planners_replay_with_their_own_prompts_and_done(planner, done):
    """Zero-Shot (translated samples; the plan ends on empty samples, Sec. 3) and Inner Monologue (its
    dialog with feedback; the plan ends on "done") replay a kitchen plan: one generation example per
    decision, each prompt the one before it plus that step and what followed, and the done decision written
    the way the planner ends a plan."""
    from groundplan.config import PlannerSpec
    from groundplan.factory import build_env, make_affordance, make_planner

    env = build_env("kitchen", {"mode": "language"})
    task = next(t for t in env.tasks() if t.reference_plan and len(t.reference_plan) > 2)
    steps = list(task.reference_plan)
    spec = PlannerSpec(name=planner)
    affordance = make_affordance(spec)
    res = replay_examples(lambda m: make_planner(spec, m, 20, affordance), ForcedChoiceLM(SentenceEmbedder()), env,
                          task, 0, steps, "t")
    assert res.diverged is None and len(res.examples) == len(steps)
    assert {e.kind for e in res.examples} == {"generate"} and res.examples[-1].completion == done
    for e, nxt, step in zip(res.examples, res.examples[1:], steps):
        assert nxt.prompt.startswith(e.prompt) and step.lower() in nxt.prompt[len(e.prompt):].lower()
        assert e.completion.strip().lower() == step.lower()


def test_an_open_loop_planner_trains_on_its_whole_plan_in_its_answer_format():
    """An open-loop planner writes its whole plan from one prompt: a replay gives one generation example, the
    trajectory's steps written in the planner's answer format and ended with EOS (no stop string), which the
    planner reads back as those steps; a trajectory the format cannot write back gives no example at all."""
    from groundplan.config import PlannerSpec
    from groundplan.factory import build_env, make_planner
    from groundplan.planners.zeroshot import parse_plan

    env = build_env("kitchen", {"mode": "language"})
    task = next(t for t in env.tasks() if t.reference_plan and len(t.reference_plan) > 2)
    steps = list(task.reference_plan)
    spec = PlannerSpec(name="open_loop", options={"answer_format": "steps"})
    res = replay_examples(lambda m: make_planner(spec, m, 20, None), ForcedChoiceLM(SentenceEmbedder()), env, task, 0,
                          steps, "t")
    assert res.diverged is None and len(res.examples) == 1
    (e,) = res.examples
    assert e.kind == "generate" and e.eos and e.prompt == task.instruction
    assert e.completion.startswith(" Step 1: ") and [s.lower() for s in parse_plan(e.completion)] == steps[:-1]
    # a step the format splits in two: the planner plays another plan, and the one example is not kept
    bad = replay_examples(lambda m: make_planner(spec, m, 20, None), ForcedChoiceLM(SentenceEmbedder()), env, task, 0,
                          [steps[0], "go to\nthe moon", *steps[1:]], "t")
    assert bad.diverged is not None and bad.examples == []


# ------------------------------------------------------------------------------------ refusals
@pytest.mark.parametrize("change, words", [
    ({"env": {"name": "babyai", "options": {"split": "test"}}}, "train tasks only"),
    ({"data": []}, "give data"),
    ({"planner": {"name": "saycanpay", "options": SCP, "grid": {"num_candidates": [3, 6]}}}, "one variant"),
    ({"planner": {"name": "house_explore"}}, "declares no prompt format"),
])
def test_bad_configs_are_refused_when_they_load(babyai_data, tmp_path, change, words):
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=words):
        say_config(babyai_data, tmp_path, **change)


def test_empty_or_failed_data_and_test_traces_are_refused_before_training(babyai_data, tmp_path):
    from groundplan.datasets.store import ShardWriter, load_trajectories
    from groundplan.pipelines.train.say import build_say_examples

    rows = load_trajectories(babyai_data).to_pylist()
    failed = tmp_path / "failed"
    with ShardWriter(failed, 100) as w:
        for r in rows:
            w.append({**r, "success": False})
    with pytest.raises(InvalidInputError, match="no successful train trajectories"):
        build_say_examples(say_config(str(failed), tmp_path))
    # a sweep's traces of tasks that are not the env's train tasks (a test set) are not training data
    from groundplan.rollout.traces import EpisodeTrace, StepTrace, write_traces

    sweep = tmp_path / "sweep"
    sweep.mkdir()
    trace = EpisodeTrace(episode_id="e", planner="GA-Say", env="babyai", task_id="babyai/test/pickup/0", family="pickup",
                         instruction="pick up the ball", seed=0, llm="m", execution_success=True,
                         steps=[StepTrace(index=0, chosen="done picking up", done=True)])
    write_traces(sweep / "traces.jsonl", [trace])
    with pytest.raises(InvalidInputError, match="not of this env's train tasks"):
        build_say_examples(say_config(babyai_data, tmp_path, data=[], traces=[str(sweep)]))


def test_a_trajectorys_decisions_train_as_one_sequence_with_the_same_loss(babyai_data, tmp_path):
    """Merged rows hold every decision's completion once, read after the same prompt text, so a model's
    log-probs of the completion tokens are those of the decisions trained one by one (float32, 1e-4)."""
    import torch

    from groundplan.pipelines.train.say import build_say_examples, decision_chains, sft_rows
    from tests.conftest import tiny_llama_lm

    train, _, _, _ = build_say_examples(say_config(babyai_data, tmp_path))
    examples = [e.to_json() for e in train]
    chains = decision_chains(examples)
    assert len(chains) < len(examples) and sum(map(len, chains)) == len(examples)
    lm = tiny_llama_lm(tmp_path / "tiny", seed=1)
    tok, model = lm.tokenizer, lm.model
    merged, dropped = sft_rows(examples, tok, 4096, None, 0, merge=True)
    alone, _ = sft_rows(examples, tok, 4096, None, 0, merge=False)
    assert dropped == 0 and len(merged) == len(chains) and len(alone) == len(examples)
    assert sum(len(r["input_ids"]) for r in merged) < 0.6 * sum(len(r["input_ids"]) for r in alone)

    def completion_logprob(rows):
        total, n = 0.0, 0
        for r in rows:
            ids = torch.tensor([r["input_ids"]])
            with torch.no_grad():
                logp = torch.log_softmax(model(ids).logits[0, :-1].float(), -1)
            target, mask = ids[0, 1:], torch.tensor(r["completion_mask"][1:], dtype=torch.bool)
            total += logp[torch.arange(len(target)), target][mask].sum().item()
            n += int(mask.sum())
        return total, n

    (a, na), (b, nb) = completion_logprob(merged), completion_logprob(alone)
    assert na == nb and abs(a - b) <= 1e-4 * abs(b)
    capped, _ = sft_rows(examples, tok, 4096, 5, 0)  # a decision cap takes whole chains, cut at the cap
    assert 1 <= len(capped) <= 5 and sum(map(sum, (r["completion_mask"] for r in capped))) < nb


@pytest.mark.parametrize("path", [
    pytest.param(p, marks=[pytest.mark.slow] if p.stem.startswith("train_say_eai") else [], id=p.stem)  # EAI's env loads in ~2 min
    for p in sorted(ROOT.joinpath("configs").glob("train_say_*.yaml"))])
def test_every_shipped_say_config_replays_its_envs_expert_trajectories(path, tmp_path):
    """A few expert trajectories of the config's env, collected as its ``data`` are, replay through its planner
    without diverging, and each trajectory's decisions chain into one sequence."""
    from groundplan.pipelines.collect.collect import run_collect
    from groundplan.pipelines.collect.config import CollectConfig
    from groundplan.pipelines.train.say import build_say_examples, decision_chains, load_say_config

    cfg = load_say_config(path)
    options = {k: v for k, v in cfg.env.options.items() if k != "split"}
    if cfg.env.name == "babyai":
        options = SMALL
    collect = CollectConfig.model_validate({
        "name": "c", "env": {"name": cfg.env.name, "options": options}, "splits": ["train"],
        "source": {"kind": "expert"}, "runtime": {"executor": "local", "mlflow": False},
        "limit": 40 if cfg.env.name == "virtualhome" else 6,  # VirtualHome's programs come by name
        "output_dir": str(tmp_path)})
    run_collect(collect, progress=False)
    cfg = cfg.model_copy(update={"data": [str(collect.data_dir)], "max_trajectories": 4, "seed": 1,
                                 "env": cfg.env.model_copy(update={"options": {**options, "split": "train"}})})
    train, val, counts, _ = build_say_examples(cfg)
    # EAI's skills (its action vocabulary over the task's objects) lack a few gold steps such as [SLEEP]: a replay
    # stops there and keeps the decisions before it
    assert counts["diverged"] <= (1 if cfg.env.name == "virtualhome_eai" else 0)
    assert counts["trajectories"] == 4 and train and val
    chains = decision_chains([e.to_json() for e in train + val])
    assert len(chains) == 4  # every trajectory one sequence


# ------------------------------------------------------------------------------------ end to end
@pytest.fixture(scope="module")
def trained(babyai_data, tmp_path_factory):
    """``groundplan train`` on a tiny random Llama, killed (SIGKILL to its process group) once its first
    checkpoint is stored, then run again with the same config: it resumes and registers."""
    from tests.conftest import tiny_llama_lm

    work = tmp_path_factory.mktemp("say")
    tiny_llama_lm(work / "tiny", seed=3)
    cfg = say_config(babyai_data, work, base_model=str(work / "tiny"), epochs=4, batch_size=2, max_length=256,
                     lr=1e-3)
    path = work / "train_say.yaml"
    path.write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    cmd = [sys.executable, "-m", "groundplan.cli", "train", str(path), "--no-progress"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(cmd, cwd=work, env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    storage = work / "say-test" / "ray"
    deadline = time.monotonic() + 600
    # Ray Train writes its checkpoint manager's snapshot once a checkpoint is registered: a kill before that
    # can leave a checkpoint folder it would not resume from
    while time.monotonic() < deadline and proc.poll() is None and not list(
            storage.glob("*/checkpoint_manager_snapshot.json")):
        time.sleep(0.2)
    assert proc.poll() is None, f"training ended before it could be killed: {proc.stderr.read().decode()[-2000:]}"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    from groundplan.pipelines.train.say import run_train_say

    result = run_train_say(cfg, progress=False)
    return cfg, result


def test_a_killed_run_resumes_and_registers_with_lineage_and_fingerprint(trained):
    from groundplan.config import PlannerSpec
    from groundplan.planners.base import prompt_fingerprint

    cfg, result = trained
    assert result.model_uri == "models:/say-test/1"
    card = json.loads((result.model_dir / "say.json").read_text())
    starts = card["starts"]
    assert len(starts) == 2 and starts[0] == 0 and starts[1] > 0, starts  # the second start resumed mid-run
    assert card["metrics"]["epoch"] <= cfg.epochs and "eval_loss" in card["metrics"]
    spec = PlannerSpec(name="saycanpay", options=SCP)
    assert card["prompt_fingerprint"] == prompt_fingerprint("saycanpay", spec.planner_options.prompt_format)
    lineage = json.loads((result.model_dir / "lineage.json").read_text())
    assert {e["role"] for e in lineage["examples"]} == {"train", "validation"}


def test_a_registered_say_model_trains_further_and_keeps_its_bases_lineage(trained, tmp_path):
    """``base_model: models:/...`` trains a registered Say model further; the new model's lineage holds every
    task the base trained on as train (a new split cannot turn one into validation), and a registered base
    without a lineage is refused before any work."""
    from groundplan.grounding.canpay.lineage import load_lineage
    from groundplan.pipelines.train.say import base_lineage, run_train_say

    cfg, result = trained
    more = cfg.model_copy(update={"name": "say-test-more", "base_model": result.model_uri, "epochs": 1, "seed": 1})
    res = run_train_say(more, progress=False)
    assert res.model_uri == "models:/say-test-more/1"
    assert json.loads((res.model_dir / "say.json").read_text())["base_model"] == result.model_uri

    def roles(folder):
        out = {}
        for e in load_lineage(folder, "m").examples:
            out.setdefault(e.signature, set()).add(e.role)
        return out

    base, new = roles(result.model_dir), roles(res.model_dir)
    assert set(base) <= set(new) and all(len(r) == 1 for r in new.values())
    assert all(new[s] == {"train"} for s, r in base.items() if "train" in r)
    bare = tmp_path / "bare"
    bare.mkdir()
    with pytest.raises(InvalidInputError, match="carries no lineage"):
        base_lineage(more, str(bare))


def _eval_config(cfg, result, tmp_path, **kw):
    from groundplan.config import EvalConfig

    doc = {"name": "ft", "env": {"name": "babyai", "options": SMALL},
           "llm": {"model": result.model_uri, "options": {"tracking_uri": cfg.tracking_uri}},
           "planners": [{"name": "saycanpay", "label": "GA-Say", "options": SCP}],
           "tasks": {"per_family": 1}, "seeds": [0], "max_steps": 4, "output_dir": str(tmp_path),
           "runtime": {"executor": "local", "mlflow": False}}
    doc.update(kw)
    return EvalConfig.model_validate(doc)


def test_the_model_plans_in_eval_and_bad_pairings_are_refused(trained, tmp_path):
    from groundplan.pipelines.evaluate.lineage import LineageError
    from groundplan.pipelines.evaluate.sweep import run_sweep

    cfg, result = trained
    res = run_sweep(_eval_config(cfg, result, tmp_path), progress=False)
    assert len(res.traces) == 4 and all(t.llm == result.model_uri and t.error is None for t in res.traces)
    # another prompt format than the model was trained on
    other = {**SCP, "prompt": "saycanpay_babyai"}
    with pytest.raises(InvalidInputError, match="prompt format"):
        run_sweep(_eval_config(cfg, result, tmp_path, planners=[{"name": "saycanpay", "options": other}]),
                  progress=False)
    # a test set that is the model's own train tasks
    with pytest.raises(LineageError, match="the Say model models:/say-test/1"):
        run_sweep(_eval_config(cfg, result, tmp_path, env={"name": "babyai", "options": {**SMALL, "split": "train"}}),
                  progress=False)
    # a model URI that does not exist
    with pytest.raises(MissingModelError, match="say-nope"):
        run_sweep(_eval_config(cfg, type(result)(**{**result.__dict__, "model_uri": "models:/say-nope/1"}), tmp_path),
                  progress=False)


def test_the_model_serves_completions_and_plans_from_the_cli(trained, tmp_path, monkeypatch):
    from fastapi.testclient import TestClient

    from groundplan.llm.hf import HFLanguageModel
    from groundplan.serve.config import ServeConfig
    from groundplan.serve.local import local_app

    cfg, result = trained
    lm = HFLanguageModel(model=result.model_uri, tracking_uri=cfg.tracking_uri, dtype="float32", device_map=None)
    direct = HFLanguageModel(model=str(result.model_dir), dtype="float32", device_map=None)
    serve_cfg = ServeConfig(viewer_dir=None, envs=[{"name": "babyai"}],
                            llm={"model": result.model_uri, "options": {"tracking_uri": cfg.tracking_uri}},
                            planners=[{"name": "saycanpay", "label": "GA-Say", "options": SCP}])
    client = TestClient(local_app(serve_cfg, lm, token="t"))
    prompt, options = "[Goal] pick up the ball\n[Step 1]", [" pick up red ball", " done picking up"]
    body = {"model": result.model_uri, "prompt": [prompt + o for o in options], "echo": True, "logprobs": 1,
            "max_tokens": 0}
    r = client.post("/v1/completions", json=body, headers={"Authorization": "Bearer t"})
    assert r.status_code == 200, r.text
    assert r.json()["model"] == result.model_uri
    want = direct.score(prompt, options)
    for choice, score in zip(r.json()["choices"], want):
        lps = choice["logprobs"]["token_logprobs"][-score.num_tokens:]
        assert sum(lps) == pytest.approx(score.logprob_sum, abs=1e-3)
    # groundplan plan reads the model's own planner options from its card
    from groundplan.cli import main

    monkeypatch.chdir(tmp_path)
    code = main(["plan", "pick up the ball", "--env", "babyai", "--planner", "saycanpay", "--model", result.model_uri,
                 "--set", f"llm.options.tracking_uri={cfg.tracking_uri}", "--max-steps", "3"])
    assert code == 0
