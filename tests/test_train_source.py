"""A training config's data may name the collection as MLflow recorded it (``runs:/<collect run id>``,
``datasets:/<name>[@<digest>]``) instead of its folder; the trained model's run and registered version then
record which collection they read. Errors (an unknown run, a run with no dataset, no store, a folder
changed since it was logged) stop ``groundplan train`` before any work, as input errors."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from groundplan.core.errors import InvalidInputError
from groundplan.datasets.source import (
    COLLECT_CONTEXT,
    DataSource,
    collected_dataset,
    lineage_tags,
    resolve_data,
)
from groundplan.datasets.store import load_trajectories

pytest.importorskip("mlflow")
CONFIG = Path(__file__).resolve().parents[1] / "configs" / "collect_kitchen.yaml"


@pytest.fixture(scope="module")
def collection(tmp_path_factory):
    """The kitchen's train trajectories (seed 0) collected with MLflow on, into the default store under
    the output folder: (tracking URI, collect run id, data folder)."""
    from groundplan.pipelines.collect.collect import run_collect
    from groundplan.pipelines.collect.config import load_collect_config

    out = tmp_path_factory.mktemp("collect")
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("MLFLOW_TRACKING_URI", raising=False)
        cfg = load_collect_config(CONFIG, [f"output_dir={out}", "runtime.executor=local", "runtime.mlflow=true", "seeds=[0]",
                                           "splits=[train]", "name=collect_tiny"])
        result = run_collect(cfg, progress=False)
    assert not result.errors and result.mlflow_run_id
    return f"sqlite:///{out.resolve() / 'mlruns' / 'mlflow.db'}", result.mlflow_run_id, str(cfg.data_dir.resolve())


def _logged(uri: str, run_id: str):
    from mlflow.tracking import MlflowClient

    (dataset_input,) = MlflowClient(tracking_uri=uri).get_run(run_id).inputs.dataset_inputs
    return dataset_input.dataset


def test_a_collect_run_and_its_dataset_resolve_to_its_folder(collection):
    uri, run_id, folder = collection
    dataset = _logged(uri, run_id)
    by_run, by_name, by_digest, path = resolve_data(
        [f"runs:/{run_id}", "datasets:/collect_tiny", f"datasets:/collect_tiny@{dataset.digest}", "some/folder"], uri)
    for source in (by_run, by_name, by_digest):
        assert source.paths == (folder,) and source.run_id == run_id
        assert source.label == f"collect_tiny@{dataset.digest}"
    assert path == DataSource("some/folder", ("some/folder",))  # a path passes as it is
    assert lineage_tags([by_run, path]) == {"groundplan.data.collect_run": run_id,
                                            "groundplan.data.dataset": f"collect_tiny@{dataset.digest}",
                                            "groundplan.data.source": f"{folder}, some/folder"}
    assert lineage_tags([path]) == {"groundplan.data.source": "some/folder"}


@pytest.mark.parametrize("entry, message", [
    ("runs:/0123456789abcdef0123456789abcdef", "no run 0123456789abcdef0123456789abcdef in sqlite"),
    ("runs:/{run_id}/model", "without an artifact path"),
    ("datasets:/no_such_collection", "no collect run in sqlite.* logged the dataset 'no_such_collection'"),
    ("datasets:/collect_tiny@00000000", "of digest 00000000"),
])
def test_an_unknown_run_or_dataset_is_an_input_error(collection, entry, message):
    uri, run_id, _ = collection
    with pytest.raises(InvalidInputError, match=message) as err:
        resolve_data([entry.format(run_id=run_id)], uri)
    assert "same MLflow store" in str(err.value) or "artifact path" in str(err.value)


def test_a_run_that_logged_no_dataset_is_an_input_error_unless_it_names_its_folder(collection, tmp_path):
    from mlflow.tracking import MlflowClient

    uri, collect_run, folder = collection
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_run(collect_run).info.experiment_id
    other = client.create_run(experiment).info.run_id  # e.g. a sweep's run
    with pytest.raises(InvalidInputError, match=f"run {other} logged no collected dataset"):
        resolve_data([f"runs:/{other}"], uri)
    # a collect run whose dataset input failed to log still names its folder
    client.log_param(other, "data_dir", folder)
    (source,) = resolve_data([f"runs:/{other}"], uri)
    assert source.paths == (folder,) and source.run_id == other and source.dataset is None
    gone = client.create_run(experiment).info.run_id
    client.log_param(gone, "data_dir", str(tmp_path / "gone"))
    with pytest.raises(InvalidInputError, match=f"run {gone} collected into .*gone, which is not a folder"):
        resolve_data([f"runs:/{gone}"], uri)


def test_no_tracking_store_is_an_input_error_and_creates_none(tmp_path):
    store = tmp_path / "mlruns" / "mlflow.db"
    with pytest.raises(InvalidInputError, match="no MLflow tracking store at sqlite"):
        resolve_data(["runs:/abc"], f"sqlite:///{store}")
    assert not store.exists()
    with pytest.raises(InvalidInputError, match="no tracking store is set"):
        resolve_data(["datasets:/x"], None)


def test_a_folder_changed_since_it_was_logged_is_refused(collection, tmp_path):
    """The digest is recomputed from the folder: trajectories added or removed since the collect run logged
    it are not trained on under the old dataset's name."""
    import mlflow

    from groundplan.pipelines.tracking import use_experiment

    uri, _, folder = collection
    copy = tmp_path / "data"
    shutil.copytree(folder, copy)
    use_experiment("copied", tmp_path, uri)
    with mlflow.start_run() as run:
        mlflow.log_input(collected_dataset(load_trajectories(copy), copy, "copied"), context=COLLECT_CONTEXT)
    assert resolve_data([f"runs:/{run.info.run_id}"], uri)[0].paths == (str(copy),)
    import pyarrow.parquet as pq

    shard = sorted(copy.glob("part-*.parquet"))[-1]
    table = pq.read_table(shard)
    pq.write_table(table.slice(0, table.num_rows - 1), shard)  # one trajectory fewer
    with pytest.raises(InvalidInputError, match="changed since run .* logged it as dataset 'copied'"):
        resolve_data([f"runs:/{run.info.run_id}"], uri)
    shutil.rmtree(copy)
    with pytest.raises(InvalidInputError, match="not a folder on this machine"):
        resolve_data([f"runs:/{run.info.run_id}"], uri)


def test_train_cli_refuses_an_unknown_collect_run_before_any_work(collection, tmp_path, capsys):
    from groundplan.cli import main

    uri, _, _ = collection
    config = tmp_path / "train.yaml"
    config.write_text(f"name: can-x\nmodel: {{kind: can}}\ndata: [outputs/nowhere]\ntracking_uri: {uri}\n"
                      f"output_dir: {tmp_path / 'out'}\n")
    assert main(["train", str(config), "--set", "data=[runs:/0123456789abcdef0123456789abcdef]"]) == 2
    out = " ".join(capsys.readouterr().out.split())  # the console wraps long lines
    assert "no run 0123456789abcdef0123456789abcdef" in out and "Traceback" not in out
    assert not (tmp_path / "out" / "can-x").exists()  # nothing trained, no run folder


def _assert_lineage(uri: str, run_id: str, model: str, version: str, collect_run: str, folder: str) -> None:
    """The training run and its registered version name the collect run, its dataset and folder; the run's
    input is the collect run's dataset (same name, digest and source) under the context ``training``."""
    from mlflow.tracking import MlflowClient

    dataset = _logged(uri, collect_run)
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    run = client.get_run(run_id)
    expected = {"groundplan.data.collect_run": collect_run, "groundplan.data.dataset": f"collect_tiny@{dataset.digest}",
                "groundplan.data.source": folder}
    assert {k: run.data.tags.get(k) for k in expected} == expected
    (used,) = run.inputs.dataset_inputs
    assert (used.dataset.name, used.dataset.digest, used.dataset.source) == (dataset.name, dataset.digest, dataset.source)
    assert {(t.key, t.value) for t in used.tags} == {("mlflow.data.context", "training")}
    assert {k: client.get_model_version(model, version).tags.get(k) for k in expected} == expected


def test_the_training_run_and_its_model_version_record_the_collection(collection, tmp_path):
    """What run_train logs about its data, on a run of its own (the Ray Train part is the slow test below)."""
    import mlflow

    from groundplan.pipelines.tracking import use_experiment
    from groundplan.pipelines.train.canpay import log_training_inputs, register_version

    uri, collect_run, folder = collection
    sources = resolve_data([f"runs:/{collect_run}"], uri)
    use_experiment("lineage-logging", tmp_path, uri)
    with mlflow.start_run() as run:
        tags = lineage_tags(sources)
        mlflow.set_tags(tags)
        log_training_inputs(run.info.run_id, sources, uri)
    version = register_version("can-logged", str(tmp_path), run.info.run_id, uri, tags=tags)
    _assert_lineage(uri, run.info.run_id, "can-logged", version.version, collect_run, folder)


@pytest.mark.slow
def test_train_from_the_collect_run_records_its_lineage(collection, tiny_encoder, tmp_path):
    """Collect (MLflow on) → train from ``runs:/<collect run>`` for one tiny epoch on Ray Train: the model's
    run has the collect run's dataset as its training input and the lineage tags, so has its registered
    version, and the lineage file the evaluation checks is saved with the model as before. (About 50 s on
    two shared cores, most of it starting Ray and the trainer: hence slow.)"""
    from groundplan.grounding.canpay.config import TrainConfig
    from groundplan.grounding.canpay.lineage import load_lineage
    from groundplan.grounding.canpay.model import resolve_model_folder
    from groundplan.pipelines.train.canpay import run_train

    uri, collect_run, folder = collection
    cfg = TrainConfig(name="can-lineage", model={"kind": "can", "encoder": tiny_encoder, "max_length": 64},
                      data=[f"runs:/{collect_run}"], env="kitchen", epochs=1, batch_size=8, max_trajectories=10,
                      tracking_uri=uri, output_dir=str(tmp_path / "out"))
    result = run_train(cfg, progress=False)
    _assert_lineage(uri, result.run_id, "can-lineage", str(result.version), collect_run, folder)
    lineage = load_lineage(resolve_model_folder(result.model_uri, uri), result.model_uri)
    assert lineage is not None and {e.role for e in lineage.examples} == {"train", "validation"}
