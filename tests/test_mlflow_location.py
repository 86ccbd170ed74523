"""MLflow all in one place: store and artifacts under <output_dir>/mlruns, nothing in the working
directory, artifacts (traces, summary, frames, HTML report) readable through mlflow.artifacts."""
from __future__ import annotations

import json

from groundplan.pipelines.evaluate.sweep import run_sweep
from tests.fakes import FakeLM, small_kitchen_config, with_runtime

PLAN = ["find a coke can", "pick up the coke can", "bring it to you", "put down the coke can", "done"]


def test_sweep_writes_nothing_to_the_working_directory_and_its_artifacts_are_readable(tmp_path, monkeypatch):
    import mlflow

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    out = tmp_path / "out"
    cfg = with_runtime(small_kitchen_config(out, name="where", seeds=[0], tasks={"families": ["nl_nouns"], "per_family": 1}),
                       mlflow=True)
    result = run_sweep(cfg, lm=FakeLM.following(PLAN), progress=False)
    assert list(cwd.iterdir()) == []
    uri = f"sqlite:///{(out / 'mlruns' / 'mlflow.db').resolve()}"
    run_id = result.stats["mlflow_run_id"]
    client = mlflow.MlflowClient(tracking_uri=uri)
    location = client.get_experiment(client.get_run(run_id).info.experiment_id).artifact_location
    assert location.startswith((out / "mlruns").resolve().as_uri())
    mlflow.set_tracking_uri(uri)
    summary = json.loads(mlflow.artifacts.load_text(f"runs:/{run_id}/summary.json"))
    assert {r["planner"] for r in summary["rows"]} == {"SayCan", "No-VF"} and "paired_tests" in summary
    assert "<html" in mlflow.artifacts.load_text(f"runs:/{run_id}/report/index.html").lower()
    assert len(mlflow.artifacts.load_text(f"runs:/{run_id}/traces.jsonl").splitlines()) == len(result.traces)
    assert list(cwd.iterdir()) == []


def test_a_run_leaves_mlflow_tracking_uri_as_the_user_set_it(tmp_path, monkeypatch):
    """MLflow writes the store it is given into MLFLOW_TRACKING_URI; groundplan puts the user's value back,
    so a second run in the same process (its own output_dir) is not logged into the first run's store."""
    import os

    from groundplan.pipelines.tracking import resolve_tracking_uri, use_experiment

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    first = resolve_tracking_uri(tmp_path / "a")
    use_experiment("x", tmp_path / "a", first)
    assert "MLFLOW_TRACKING_URI" not in os.environ
    assert resolve_tracking_uri(tmp_path / "b") != first
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///" + str(tmp_path / "mine.db"))
    use_experiment("x", tmp_path / "c", resolve_tracking_uri(tmp_path / "c", "sqlite:///" + str(tmp_path / "c.db")))
    assert os.environ["MLFLOW_TRACKING_URI"] == "sqlite:///" + str(tmp_path / "mine.db")
