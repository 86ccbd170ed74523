"""``groundplan collect``: schema, exactly-once across an interrupted and resumed run, journal
recovery, a Ray pool that reruns the episode of a dead worker, MLflow under the output folder, the CLI."""
from __future__ import annotations

import os

import pyarrow as pa
import pytest

from groundplan.datasets import TRAJECTORY_SCHEMA, load_trajectories, prompt_examples
from groundplan.datasets.store import JOURNAL, ShardWriter, finished_ids
from groundplan.pipelines.collect.collect import CollectInterrupted, plan_items, run_collect
from groundplan.pipelines.collect.config import CollectConfig

pytest.importorskip("minigrid")

EXPECTED = {
    "traj_id": pa.string(), "env": pa.string(), "split": pa.string(), "task_id": pa.string(), "goal": pa.string(),
    "init_obs": pa.string(), "actions": pa.list_(pa.string()), "observations": pa.list_(pa.string()),
    "feasible": pa.list_(pa.bool_()), "rewards": pa.list_(pa.float64()), "success": pa.bool_(),
    "source": pa.string(), "admissible": pa.list_(pa.list_(pa.string())),
    "listed_feasible": pa.list_(pa.list_(pa.bool_())),
}


SMALL = {"train_per_family": 2, "test_per_family": 1, "generalize_per_family": 1}


def config(tmp_path, runtime=None, **kw):
    data = {"name": "t", "env": {"name": "babyai", "options": SMALL},
            "runtime": {"executor": "local", "mlflow": False, **(runtime or {})},
            "shard_size": 3, "output_dir": str(tmp_path / "out")}
    data.update(kw)
    return CollectConfig.model_validate(data)


def test_schema_is_the_contract():
    assert {f.name: f.type for f in TRAJECTORY_SCHEMA} == EXPECTED


def test_collect_writes_every_trajectory_with_the_schema(tmp_path):
    cfg = config(tmp_path)
    r = run_collect(cfg, progress=False)
    table = load_trajectories(cfg.data_dir)
    assert table.schema.equals(TRAJECTORY_SCHEMA)
    assert r.appended == table.num_rows == 16 and r.counts == {"train": 8, "test": 4, "test-generalize": 4}
    rows = table.to_pylist()
    assert all(row["success"] and row["source"] == "babyai_oracle" for row in rows)
    for row in rows:
        n = len(row["actions"])
        assert n == len(row["observations"]) == len(row["feasible"]) == len(row["rewards"]) == len(row["admissible"])
        assert row["actions"][-1] == "done picking up" and row["rewards"][-1] == 1.0 and sum(row["rewards"]) == 1.0
        assert row["observations"][0] == row["init_obs"] and all(row["feasible"])
        assert all(a in adm for a, adm in zip(row["actions"], row["admissible"]))
    # the few-shot examples: the successful expert train trajectories, in traj_id order whatever order the
    # shards hold them in, built here from the rows read above
    train = sorted((row for row in rows if row["split"] == "train"), key=lambda row: row["traj_id"])
    expected = [(row["goal"], row["init_obs"], row["actions"]) for row in train]
    assert len(expected) == 8 and all(g and o and a[-1] == "done picking up" for g, o, a in expected)
    assert prompt_examples(cfg.data_dir) == expected
    assert prompt_examples(cfg.data_dir, n=2) == expected[:2]


def test_interrupted_then_resumed_run_is_exactly_once(tmp_path):
    cfg = config(tmp_path)
    with pytest.raises(CollectInterrupted):
        run_collect(cfg, progress=False, stop_after=5)  # dies with an open journal (shard_size 3)
    assert list(cfg.data_dir.glob(f"*{JOURNAL}"))
    assert len(finished_ids(cfg.data_dir)) == 5  # the journal's trajectories were recovered
    r = run_collect(cfg, progress=False)
    assert r.skipped == 5 and r.appended == 11
    ids = load_trajectories(cfg.data_dir).column("traj_id").to_pylist()
    assert sorted(ids) == sorted(i.traj_id for i in plan_items(cfg)) and len(ids) == len(set(ids))
    again = run_collect(cfg, progress=False)
    assert again.appended == 0 and again.skipped == 16
    assert load_trajectories(cfg.data_dir).num_rows == 16


def test_torn_journal_keeps_complete_trajectories(tmp_path):
    cfg = config(tmp_path, shard_size=100)
    with pytest.raises(CollectInterrupted):
        run_collect(cfg, progress=False, stop_after=4)
    journal = next(cfg.data_dir.glob(f"*{JOURNAL}"))
    data = journal.read_bytes()
    journal.write_bytes(data[: len(data) - 40])  # a crash in the middle of the 4th write
    assert len(finished_ids(cfg.data_dir)) == 3
    run_collect(cfg, progress=False)
    ids = load_trajectories(cfg.data_dir).column("traj_id").to_pylist()
    assert len(ids) == len(set(ids)) == 16


def test_writer_refuses_a_stored_id(tmp_path):
    cfg = config(tmp_path)
    run_collect(cfg, progress=False)
    row = load_trajectories(cfg.data_dir).to_pylist()[0]
    with ShardWriter(cfg.data_dir) as w:
        assert w.append(row) is False


def test_mlflow_store_under_output_and_nothing_in_cwd(tmp_path, monkeypatch):
    mlflow = pytest.importorskip("mlflow")
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    cfg = config(tmp_path, runtime={"mlflow": True}, splits=["test"])
    r = run_collect(cfg, progress=False)
    assert r.mlflow_run_id and (tmp_path / "out" / "mlruns" / "mlflow.db").exists()
    assert os.listdir(work) == []
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'out' / 'mlruns' / 'mlflow.db'}")
    run = mlflow.get_run(r.mlflow_run_id)
    assert run.data.metrics["count.test"] == 4.0 and run.data.params["env"] == "babyai"


def test_cli_collect(tmp_path, capsys):
    from groundplan.cli import main

    path = tmp_path / "c.yaml"
    path.write_text(f"name: c\nenv: {{name: babyai, options: {{test_per_family: 1}}}}\nsplits: [test]\n"
                    f"runtime: {{executor: local, mlflow: false}}\noutput_dir: {tmp_path / 'o'}\n")
    assert main(["collect", str(path), "--no-progress"]) == 0
    assert "4 new" in capsys.readouterr().out
    assert main(["collect", str(path), "--no-progress", "--set", "bogus=1"]) == 2  # unknown field named
    capsys.readouterr()
    assert main(["collect", str(path), "--no-progress", "--set", "workers=3"]) == 2  # a key that moved
    out = " ".join(capsys.readouterr().out.split())
    assert "'workers' is runtime.workers" in out and "Traceback" not in out


@pytest.mark.parametrize("old, new", [("executor", "runtime.executor"), ("workers", "runtime.workers"),
                                      ("worker_cpus", "runtime.worker_cpus"), ("ray_address", "runtime.address"),
                                      ("max_retries", "runtime.max_episode_retries"), ("mlflow", "runtime.mlflow")])
def test_a_runtime_key_of_the_old_layout_is_refused_naming_its_new_place(tmp_path, old, new):
    """A collect config written before the runtime: section fails at load, saying where the key went."""
    from pydantic import ValidationError

    data = {"name": "t", "env": {"name": "babyai"}, "output_dir": str(tmp_path), old: None}
    with pytest.raises(ValidationError, match=f"'{old}' is {new}"):
        CollectConfig.model_validate(data)


def test_the_runtime_section_is_the_eval_one_less_the_scorers(tmp_path):
    """Collection takes the eval config's runtime fields it has a use for, with its own defaults (2 workers
    of a whole CPU, 2 reruns); a scorer field, which it would silently ignore, is refused."""
    from pydantic import ValidationError

    from groundplan.config import RuntimeSpec

    rt = CollectConfig.model_validate({"name": "t", "env": {"name": "babyai"}, "output_dir": str(tmp_path)}).runtime
    assert isinstance(rt, RuntimeSpec) and (rt.executor, rt.workers, rt.worker_cpus, rt.max_episode_retries) == (
        "ray", 2, 1.0, 2)
    for field, value in (("scorers", 2), ("scorer_gpus", 1.0), ("batch_window_ms", 1.0), ("remote_affordance", True)):
        with pytest.raises(ValidationError, match=f"collection does not use runtime.{field}"):
            config(tmp_path, runtime={field: value})
    assert config(tmp_path, runtime={"envs_per_worker": 2, "worker_resources": {"sim": 1}}).runtime.envs_per_worker == 2


def test_ray_pool_reruns_the_episode_of_a_dead_worker(tmp_path, ray_crash_once):
    """A worker process that exits in the middle of a trajectory (the test env ``babyai_crash_once``,
    tests/faults.py) is replaced and that trajectory rerun on a fresh worker: every trajectory is stored
    once, none recorded as failed."""
    marker = tmp_path / "crashed"
    victim = plan_items(config(tmp_path, splits=["train"]))[3]
    cfg = config(tmp_path, runtime={"executor": "ray", "workers": 2, "worker_cpus": 1.0}, splits=["train"],
                 env={"name": ray_crash_once, "options": {**SMALL, "crash_task": victim.task.task_id,
                                                          "crash_seed": victim.seed, "marker": str(marker)}})
    r = run_collect(cfg, progress=False)
    assert marker.exists() and r.reruns == 1 and not r.errors
    ids = load_trajectories(cfg.data_dir).column("traj_id").to_pylist()
    assert sorted(ids) == sorted(i.traj_id for i in plan_items(cfg)) and len(ids) == len(set(ids)) == 8


def test_resume_refuses_a_store_collected_for_other_tasks(tmp_path):
    """A trajectory id names a task by its index in the split; a store whose row under an id holds another
    instruction (collected with other env options) is refused before anything runs, naming the id."""
    import pyarrow.parquet as pq

    from groundplan.pipelines.collect.collect import StaleDataError

    cfg = config(tmp_path)
    run_collect(cfg, progress=False)
    shard = sorted(cfg.data_dir.glob("part-*.parquet"))[0]
    table = pq.read_table(shard)
    goals = table.column("goal").to_pylist()
    changed_id = table.column("traj_id")[0].as_py()
    goals[0] = goals[0] + " and then open the door"
    pq.write_table(table.set_column(table.schema.get_field_index("goal"), "goal", pa.array(goals)), shard)
    with pytest.raises(StaleDataError, match="1 trajectories") as err:
        run_collect(cfg, progress=False)
    assert changed_id in str(err.value)
    assert run_collect(cfg, progress=False, fresh=True).appended == 16  # --fresh starts over


def test_listed_actions_are_labelled_by_the_simulators_own_check(tmp_path):
    """label_listed: each step's listed actions with their feasibility there, one label each; the expert's own
    steps are among the feasible ones, and the env lists infeasible ones too (what a Can of feasibility trains on)."""
    pytest.importorskip("virtualhome_eval")
    cfg = config(tmp_path, env={"name": "virtualhome_eai", "options": {"task_set": "official", "limit": 20}},
                 splits=["train"], limit=2, max_steps=40, label_listed=True)
    run_collect(cfg, progress=False)
    rows = load_trajectories(cfg.data_dir).to_pylist()
    assert len(rows) == 2
    labelled = [r for r in rows if any(r["admissible"])]
    assert labelled
    for row in labelled:
        assert [len(a) for a in row["admissible"]] == [len(f) for f in row["listed_feasible"]]
        for action, listed, labels in zip(row["actions"], row["admissible"], row["listed_feasible"]):
            if action in listed:  # the expert's step ran: the check allowed it
                assert labels[listed.index(action)], action
        assert not all(all(f) for f in row["listed_feasible"])


def test_label_listed_is_refused_before_collecting_where_the_env_has_no_check(tmp_path):
    from groundplan.core.errors import InvalidInputError

    cfg = config(tmp_path, label_listed=True)
    with pytest.raises(InvalidInputError, match="does not declare feasibility_labels"):
        run_collect(cfg, progress=False)
    assert not cfg.data_dir.exists()


def test_a_shard_written_before_the_labels_column_reads_it_as_null(tmp_path):
    import pyarrow.parquet as pq

    old = pa.schema([f for f in TRAJECTORY_SCHEMA if f.name != "listed_feasible"])
    row = {"traj_id": "t0", "env": "babyai", "split": "train", "task_id": "0", "goal": "g", "init_obs": "o",
           "actions": ["done"], "observations": ["o"], "feasible": [True], "rewards": [1.0], "success": True,
           "source": "babyai_oracle", "admissible": [["done"]]}
    (tmp_path / "d").mkdir()
    pq.write_table(pa.Table.from_pylist([row], schema=old), tmp_path / "d" / "part-00000.parquet")
    assert load_trajectories(tmp_path / "d").to_pylist() == [{**row, "listed_feasible": None}]
