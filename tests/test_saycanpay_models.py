"""SayCanPay's Can/Pay models: examples (Sec. 6), losses, save/load by MLflow model URI, the batched
grounding source, and (slow) the Ray Train pipeline end to end on a tiny encoder."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from groundplan.core.errors import InvalidInputError, MissingModelError
from groundplan.grounding.canpay.config import (
    CanPayModelConfig,
    TrainConfig,
    default_delta,
)
from groundplan.grounding.canpay.data import (
    Trajectory,
    can_examples,
    discounted_returns,
    format_input,
    pay_examples,
)


@pytest.fixture(scope="module")
def kitchen_data(tmp_path_factory):
    from tests.kitchen_data import collect_kitchen

    return str(collect_kitchen(tmp_path_factory.mktemp("kitchen"), seeds=[0], splits=("train",)))


def _traj(i, actions, goal="g", obs="o", success=True):
    return Trajectory(f"t{i}", "kitchen", "train", f"task{i}", goal, obs, tuple(actions), (True,) * len(actions),
                      (0.0,) * (len(actions) - 1) + (1.0,), success)


def test_input_format_follows_appendix_b():
    assert format_input("pick up the box", "Room 1 has a key.", ["pick up key"], "toggle door") == \
        "<Goal> pick up the box <Initial State> Room 1 has a key. <Step 1> pick up key <NXT> toggle door"


def test_discounted_returns_and_deltas():
    assert discounted_returns([0, 0, 1], 0.6) == pytest.approx([0.36, 0.6, 1.0])
    assert default_delta("babyai") == 0.6 and default_delta("virtualhome") == 0.9 and default_delta("hanoi3") == 0.3


def test_can_triples_and_pay_targets():
    trajs = [_traj(0, ["a", "b", "done"], goal="g0"), _traj(1, ["x", "y", "done"], goal="g1")]
    can = can_examples(trajs, seed=0)
    assert len(can) == 6
    first = can[0].texts
    assert first[0].endswith("<NXT> a") and first[1].rsplit("<NXT> ", 1)[1] in {"b", "done"}
    assert first[2].rsplit("<NXT> ", 1)[1] in {"x", "y", "done"}  # from the other trajectory
    pay = pay_examples(trajs, 0.5, seed=0)
    pos = [p for p in pay if p.target > 0]
    assert [p.target for p in pos[:3]] == pytest.approx([0.25, 0.5, 1.0])
    assert all(p.target == 0.0 for p in pay if p not in pos)
    # "done" before the end of a trajectory is a zero-return negative after each earlier history
    premature = [p.text for p in pay if p.text.endswith("<NXT> done") and p.target == 0.0]
    assert "<Goal> g0 <Initial State> o <NXT> done" in premature
    assert "<Goal> g0 <Initial State> o <Step 1> a <NXT> done" in premature
    assert not any(t.endswith("<Step 2> b <NXT> done") for t in premature)  # there it is the expert's action
    # repeating an earlier action of the trajectory is a zero-return negative from the same scene
    repeats = {p.text for p in pay if p.target == 0.0 and "<Goal> g0" in p.text and p.text.endswith("<NXT> a")}
    assert repeats == {"<Goal> g0 <Initial State> o <Step 1> a <NXT> a", "<Goal> g0 <Initial State> o <Step 1> a <Step 2> b <NXT> a"} \
        or repeats == {"<Goal> g0 <Initial State> o <Step 1> a <NXT> a"}
    again = pay_examples([_traj(3, ["p", "q", "p", "done"], goal="g3")], 0.5)
    assert not [e for e in again if e.target == 0.0 and e.text.endswith("<Step 1> p <NXT> p")]  # the expert repeats p
    # a failed trajectory gives no Pay positives
    failed = _traj(2, ["q", "done"], goal="g2", success=False)
    assert not [p for p in pay_examples([failed, trajs[0]], 0.5) if "<Goal> g2" in p.text]


def test_info_nce_is_cross_entropy_of_the_positive():
    from groundplan.grounding.canpay.losses import f1_score, info_nce_loss

    logits = torch.tensor([[2.0, 0.0, -1.0]])
    expected = -math.log(math.exp(2) / (math.exp(2) + 1 + math.exp(-1)))
    assert float(info_nce_loss(logits)) == pytest.approx(expected, rel=1e-5)
    assert float(info_nce_loss(logits, bce_weight=1.0)) > expected
    assert f1_score([1, 0, 0, 1], [1, 1, 0, 0]) == pytest.approx(0.5)


def test_model_round_trip_through_the_mlflow_registry(tiny_encoder, tmp_path):
    """Save, register a version in a fresh SQLite registry, load it by 'models:/name/1' through the
    registered source; batched and one-by-one scoring agree; the batch runs one forward pass."""
    import mlflow

    from groundplan.grounding import AFFORDANCES
    from groundplan.grounding.canpay.model import CanPayModel
    from groundplan.pipelines.tracking import use_experiment
    from groundplan.pipelines.train.canpay import register_version

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    model = CanPayModel(CanPayModelConfig(kind="can", encoder=tiny_encoder, max_length=64))
    use_experiment("t", tmp_path, uri)
    with mlflow.start_run() as run:
        folder = model.save(tmp_path / "m")
        mlflow.log_artifacts(str(folder), artifact_path="model")
        register_version("can-test", f"{run.info.artifact_uri}/model", run.info.run_id, uri)
    assert run.info.artifact_uri.startswith((tmp_path / "mlruns" / "artifacts").as_uri())  # not ./mlruns
    source = AFFORDANCES.get("saycanpay_learned")(can_model="models:/can-test/1", tracking_uri=uri, device="cpu")
    items = [([], "find a coke can"), (["find a coke can"], "pick up the coke can"), ([], "done")] * 4
    before = source.can.forward_calls
    batched = source.score_sequences("bring me a coke", "The robot is at the user.", items)
    assert source.can.forward_calls - before == 1 and batched.forwards == 1
    single = source.score_sequences("bring me a coke", "The robot is at the user.", items, one_by_one=True)
    assert single.forwards == len(items)
    np.testing.assert_allclose(batched.can, single.can, atol=1e-5)
    np.testing.assert_allclose(batched.can, model.predict([format_input("bring me a coke", "The robot is at the user.", h, a)
                                                           for h, a in items]), atol=1e-5)
    assert np.all(batched.pay == 1.0)  # no Pay model: p_pay = 1
    with pytest.raises(MissingModelError):
        AFFORDANCES.get("saycanpay_learned")(can_model="models:/can-test/7", tracking_uri=uri)
    with pytest.raises(InvalidInputError, match="pay_model is a 'can' model"):
        AFFORDANCES.get("saycanpay_learned")(pay_model=str(folder), tracking_uri=uri)


def test_long_inputs_keep_goal_and_candidate(tiny_encoder):
    from groundplan.grounding.canpay.model import load_tokenizer, tokenize

    tok = load_tokenizer(tiny_encoder)
    text = format_input("GOALWORD", "obs", [f"step {i}" for i in range(200)], "LASTACTION")
    ids, mask = tokenize(tok, [text, "short"], 40)
    assert ids.shape == (2, 40) and int(mask[1].sum()) < 40
    decoded = tok.decode(ids[0])
    assert "goalword" in decoded and "lastaction" in decoded


def test_train_config_is_validated():
    with pytest.raises(Exception):
        TrainConfig(name="x", model={"kind": "maybe"}, data=["a"])
    with pytest.raises(Exception):
        TrainConfig(name="x", model={"kind": "can"}, data=[], bogus=1)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["can", "pay"])
def test_train_on_ray_registers_a_loadable_model(tiny_encoder, kitchen_data, tmp_path, kind):
    """``run_train`` end to end: Ray Train (1 worker), MLflow metrics per epoch, registry, load by name."""
    from mlflow.tracking import MlflowClient

    from groundplan.grounding.canpay.model import load_model
    from groundplan.pipelines.train.canpay import run_train

    cfg = TrainConfig(name=f"{kind}-tiny", model={"kind": kind, "encoder": tiny_encoder, "max_length": 96},
                      data=[kitchen_data], env="kitchen", epochs=2, batch_size=8, lr_head=1e-2, lr_encoder=1e-3,
                      max_trajectories=16, output_dir=str(tmp_path / "out"))
    result = run_train(cfg, progress=False)
    assert result.model_uri == f"models:/{kind}-tiny/1"
    from groundplan.grounding.canpay.lineage import load_lineage
    from groundplan.grounding.canpay.model import resolve_model_folder

    lineage = load_lineage(resolve_model_folder(result.model_uri, result.tracking_uri), result.model_uri)
    assert lineage is not None and {e.role for e in lineage.examples} == {"train", "validation"}  # logged with it
    metric = "val_f1" if kind == "can" else "val_mse"
    history = MlflowClient(result.tracking_uri).get_metric_history(result.run_id, metric)
    assert [m.step for m in history] == [1, 2]
    model = load_model(result.model_uri, result.tracking_uri, device="cpu")
    assert model.kind == kind
    p = model.predict(["<Goal> g <Initial State> o <NXT> done"])
    assert p.shape == (1,) and 0.0 <= p[0] <= 1.0
    source = MlflowClient(result.tracking_uri, registry_uri=result.tracking_uri).get_model_version(f"{kind}-tiny", "1").source
    assert source.startswith((tmp_path / "out").resolve().as_uri())  # artifacts under output_dir, not ./mlruns


def test_affordance_server_batches_episodes_into_one_forward(tiny_encoder, tmp_path):
    """Two episodes' k×m requests arriving together go through each model once (no Ray needed:
    the server class is driven on an event loop directly)."""
    import asyncio

    from groundplan.actors.affordance_server import AffordanceServer
    from groundplan.core.types import Task
    from groundplan.grounding.canpay.model import CanPayModel, load_model

    can = str(CanPayModel(CanPayModelConfig(kind="can", encoder=tiny_encoder, max_length=64)).save(tmp_path / "can"))
    pay = str(CanPayModel(CanPayModelConfig(kind="pay", encoder=tiny_encoder, max_length=64)).save(tmp_path / "pay"))
    server = AffordanceServer({"cp": {"source": "saycanpay_learned", "options": {"can_model": can, "pay_model": pay,
                                                                                 "device": "cpu"}}}, batch_window_ms=50)
    task = Task(task_id="t", instruction="g", family="f", goal=None)
    items = [([], "find a coke can"), (["find a coke can"], "pick up the coke can")]

    async def go():
        await server.reset("e1", "cp", task, 0)
        await server.reset("e2", "cp", task, 0)
        return await asyncio.gather(server.score_sequences("e1", "cp", "g1", "o1", items),
                                    server.score_sequences("e2", "cp", "g2", "o2", items[:1]))

    model = load_model(can, None, "cpu")
    before = model.forward_calls
    first, second = asyncio.run(go())
    assert model.forward_calls - before == 1
    assert first.can.shape == (2,) and second.can.shape == (1,) and first.pay.shape == (2,)
    np.testing.assert_allclose(second.can, model.predict([format_input("g2", "o2", [], "find a coke can")]), atol=1e-5)


def test_train_cli_refuses_a_missing_config_before_work(capsys):
    from groundplan.cli import main

    assert main(["train", "configs/no_such_train.yaml"]) == 2
    assert "training config file not found" in capsys.readouterr().out


def test_shipped_train_configs_validate():
    from groundplan.pipelines.train.canpay import load_train_config

    can = load_train_config("configs/train_can_kitchen.yaml")
    pay = load_train_config("configs/train_pay_kitchen.yaml", ["epochs=1"])
    assert (can.model.kind, pay.model.kind, pay.epochs) == ("can", "pay", 1)
    assert pay.resolved_delta == 0.6


def test_wilson_interval_and_tables():
    from groundplan.evaluation.saycanpay import Row, wilson_interval

    lo, hi = wilson_interval(7, 10)
    assert (round(lo, 3), round(hi, 3)) == (0.397, 0.892)
    assert wilson_interval(0, 0) == (0.0, 1.0)
    assert Row("GA-SCP", 10, 7, 5, 4.0, 0).cell(7) == "70% [40, 89]"


def test_tables_cli_reads_several_run_dirs_and_the_envs_done_skill(tmp_path, capsys):
    """BabyAI's done skill is "done picking up": neither the expert's length nor a plan's counts it, and
    planners run side by side in two folders make one table."""
    pytest.importorskip("minigrid")
    from groundplan.cli import main
    from groundplan.envs import ENVS
    from groundplan.rollout.traces import EpisodeTrace, StepTrace

    opts = {"test_per_family": 1, "train_per_family": 1, "generalize_per_family": 1}
    task = ENVS.get("babyai")(**opts).tasks(["pickup"])[0]
    expert = list(task.reference_plan)
    assert expert[-1] == "done picking up"
    for label, plan, ok in (("A", expert, True), ("B", ["pick up red ball"] + expert, True)):
        d = tmp_path / label
        d.mkdir()
        steps = [StepTrace(i, a, a == "done picking up") for i, a in enumerate(plan)]
        trace = EpisodeTrace(f"e{label}", label, "babyai", task.task_id, task.family, task.instruction, 0, "fake",
                             steps=steps, execution_success=ok)
        (d / "traces.jsonl").write_text(trace.to_json() + "\n")
        (d / "config.json").write_text(json.dumps({"env": {"name": "babyai"}, "planners": [{"name": "saycanpay",
                                                                                            "label": label}]}))
    assert main(["tables", str(tmp_path / "A"), str(tmp_path / "B"), "--split", "test"]) == 0
    out = capsys.readouterr().out
    n = len(expert) - 1
    assert f"| A | 1 | 100% [21, 100] | 100% [21, 100] | {n:.1f} | 0 |" in out  # the expert's length: cost-effective
    assert f"| B | 1 | 100% [21, 100] | 0% [0, 79] | {n + 1:.1f} | 0 |" in out  # one action longer: not


def test_paired_comparison_of_cost_effectiveness():
    """Table 4's measure is paired like success: same success, but only the shorter plan is cost-effective."""
    from groundplan.evaluation.saycanpay import paired, with_cost_effectiveness
    from groundplan.rollout.traces import EpisodeTrace, StepTrace

    def trace(planner, task, plan, ok):
        steps = [StepTrace(i, a, a == "done") for i, a in enumerate(plan)]
        return EpisodeTrace(f"{planner}{task}", planner, "toy", f"t{task}", "f", "do it", 0, "fake", steps=steps,
                            execution_success=ok)

    short, long = ["a", "b", "done"], ["a", "x", "b", "done"]
    traces = [trace("GA-SCP", i, short, True) for i in range(5)] + [trace("GA-Say", i, long, True) for i in range(5)]
    annotated = with_cost_effectiveness(traces, {f"t{i}": 2 for i in range(5)})
    assert [t.metrics["cost_effective"] for t in annotated] == [1.0] * 5 + [0.0] * 5
    assert paired(annotated, [("GA-SCP", "GA-Say")]) == [
        "GA-SCP vs GA-Say on 5 shared episodes: 0 solved only by GA-SCP, 0 only by GA-Say; exact McNemar p = 1.00, "
        "Holm-adjusted p = 1.00 (not significant at 0.05)"]
    assert paired(annotated, [("GA-SCP", "GA-Say")], measure="cost_effective") == [
        "GA-SCP vs GA-Say on 5 shared episodes: 5 cost-effective only by GA-SCP, 0 only by GA-Say; exact McNemar p = 0.06, "
        "Holm-adjusted p = 0.06 (not significant at 0.05)"]


def test_oracle_can_names_a_registered_env():
    """A typo in the oracle's env is refused when the config is read, not when its first episode starts."""
    from pydantic import ValidationError

    from groundplan.grounding.canpay.config import OracleCanPayOptions

    assert OracleCanPayOptions(env="blocks_bowls").env == "blocks_bowls"
    with pytest.raises(ValidationError, match="unknown env 'blocks'"):
        OracleCanPayOptions(env="blocks")


def test_paired_comparison_counts_discordant_episodes():
    from groundplan.evaluation.saycanpay import paired
    from groundplan.rollout.traces import EpisodeTrace

    def trace(planner, task, ok):
        return EpisodeTrace(f"{planner}{task}", planner, "toy", f"t{task}", "f", "do it", 0, "fake", execution_success=ok)

    ga = [True, True, True, False, False, True]
    gt = [False, False, False, False, True, True]
    traces = [trace("GA-SCP", i, ok) for i, ok in enumerate(ga)] + [trace("GT", i, ok) for i, ok in enumerate(gt)]
    traces.append(trace("GT", 99, True))  # no GA-SCP episode on that task: not compared
    assert paired(traces, [("GA-SCP", "GT"), ("BA-SCP", "GT")]) == [
        "GA-SCP vs GT on 6 shared episodes: 3 solved only by GA-SCP, 1 only by GT; exact McNemar p = 0.62, "
        "Holm-adjusted p = 0.62 (not significant at 0.05)"]


def test_small_p_values_keep_their_digits():
    from groundplan.evaluation.saycanpay import format_p

    assert format_p(0.1849) == "0.18" and format_p(6.1e-5) == "6.1e-05"


def test_can_negatives_from_the_listed_actions():
    """'listed' draws the second negative from the actions listed at that step, never one of the
    trajectory's own; a step with no recorded list falls back to another trajectory."""
    import dataclasses

    listed = (("a", "b", "done", "switch on room", "eat door"),) * 2 + ((),)
    trajs = [dataclasses.replace(_traj(0, ["a", "b", "done"], goal="g0"), listed=listed),
             _traj(1, ["x", "y", "done"], goal="g1")]
    can = can_examples(trajs, seed=0, negatives="listed")
    mine = [e.texts for e in can if e.texts[0].startswith("<Goal> g0")]
    assert [t[2].rsplit("<NXT> ", 1)[1] in {"switch on room", "eat door"} for t in mine] == [True, True, False]
    assert mine[2][2].rsplit("<NXT> ", 1)[1] in {"x", "y"}  # no list at the last step: another trajectory


def test_can_negatives_of_feasibility_come_from_the_simulators_labels():
    """'feasibility' takes both negatives from listed actions labelled infeasible at that step and adds a
    triple whose positive is another feasible listed action; a step without labels, or with nothing
    infeasible listed, falls back to 'listed'."""
    import dataclasses

    listed = (("a", "b", "c", "switch on room", "eat door"),) * 3
    labels = ((True, False, True, False, False), (True, True, True, True, True), ())
    traj = dataclasses.replace(_traj(0, ["a", "b", "done"], goal="g0"), listed=listed, listed_feasible=labels)
    can = can_examples([traj, _traj(1, ["x", "y", "done"], goal="g1")], seed=0, negatives="feasibility")
    mine = [[t.rsplit("<NXT> ", 1)[1] for t in e.texts] for e in can if e.texts[0].startswith("<Goal> g0")]
    assert mine[0][0] == "a" and set(mine[0][1:]) <= {"b", "switch on room", "eat door"}
    assert mine[1][0] == "c" and set(mine[1][1:]) <= {"b", "switch on room", "eat door"}  # the other feasible one
    # step 1 lists nothing infeasible and step 2 has no labels: 'listed' triples, negatives off the trajectory's own
    assert [m[0] for m in mine[2:]] == ["b", "done"] and mine[2][2] in {"c", "switch on room", "eat door"}
    assert len(mine) == 4


def test_a_can_of_feasibility_is_refused_before_training_on_data_without_labels(tmp_path):
    from groundplan.datasets.store import ShardWriter
    from groundplan.pipelines.train.canpay import build_examples, load_train_config

    rows = [{"traj_id": f"t{i}", "env": "kitchen", "split": "train", "task_id": f"task{i}", "goal": f"g{i}",
             "init_obs": "o", "actions": ["a", "done"], "observations": ["o", "o"], "feasible": [True, True],
             "rewards": [0.0, 1.0], "success": True, "source": "reference_plan", "admissible": [["a", "b"], ["a"]]}
            for i in range(4)]
    with ShardWriter(tmp_path / "data") as writer:
        for row in rows:
            writer.append(row)
    cfg_path = tmp_path / "can.yaml"
    cfg_path.write_text(f"name: can-x\nmodel: {{kind: can}}\ndata: [{tmp_path / 'data'}]\nenv: kitchen\n"
                        f"can_negatives: feasibility\noutput_dir: {tmp_path / 'out'}\n")
    with pytest.raises(InvalidInputError, match="collect with label_listed: true"):
        build_examples(load_train_config(cfg_path))
