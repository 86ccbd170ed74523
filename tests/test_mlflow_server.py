"""groundplan against a real MLflow tracking server (``mlflow server`` on loopback, SQLite backend, proxied
artifacts), the way a cluster uses one: a sweep logs its run, metrics and artifacts through it; ``groundplan
train`` registers a Can model there and an eval loads it back by ``models:/`` through it (slow: Ray Train);
a server that is down fails a command at once naming its URI; one that dies during a sweep costs the MLflow
run, not the traces and summary, and ``groundplan log`` logs them later.

A sweep with the Ray job of cluster/README.md logging through such a server is in tests/test_ray_job.py.
"""
from __future__ import annotations

import contextlib
import json
import logging
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
import yaml

from groundplan.cli import main
from groundplan.pipelines.evaluate.sweep import run_sweep
from groundplan.rollout.traces import read_traces
from tests.fakes import SLOW_LM_PLAN, FakeLM, small_kitchen_config, with_runtime
from tests.live_services import MlflowServer, closed_port, no_mlflow_telemetry

mlflow = pytest.importorskip("mlflow")

#: what one MLflow call against a closed port took before the check and the bounded retries
#: (``groundplan eval --local``, one episode: 257 s of retries after the trace was written)
UNBOUNDED_RETRIES_S = 257


@pytest.fixture(autouse=True)
def _no_telemetry(monkeypatch):
    no_mlflow_telemetry(monkeypatch)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = MlflowServer(tmp_path_factory.mktemp("mlflow")).start()
    yield s
    s.stop()


#: SayCanPay's Perfect-Say row with a learned Can model by registry URI (the LM is not asked; the Can model
#: scores the expert's next action and its distractors), resolved through MLFLOW_TRACKING_URI
LEARNED_PLANNER = {"name": "saycanpay", "label": "GA-SC Perfect-Say (oracle)",
                   "options": {"decoding": "greedy_action", "score": "saycan", "perfect_say": True, "oracle": True},
                   "affordance": "saycanpay_learned",
                   "affordance_options": {"can_model": "models:/can-served/1", "device": "cpu"}}


def _text(*parts: str) -> str:
    """Captured output with rich's line wrapping undone."""
    return re.sub(r"\s+", " ", " ".join(parts))


def _eval_yaml(path: Path, output_dir: Path, name: str, **extra) -> Path:
    """A one-family, two-episode kitchen sweep on the fake backend (tests/fake_backend.py), for the CLI."""
    import tests.fake_backend  # noqa: F401 -- registers the backend the config names

    cfg = {"name": name, "llm": {"backend": "fake_slow", "model": "fake"},
           "planners": [{"name": "saycan", "label": "SayCan", "affordance": "kitchen_value"},
                        {"name": "saycan_novf", "label": "No-VF"}],
           "tasks": {"families": ["nl_nouns"], "per_family": 1}, "seeds": [0], "max_steps": 6,
           "output_dir": str(output_dir), **extra}
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_a_sweep_logs_its_run_metrics_and_artifacts_through_the_server(server, tmp_path, monkeypatch):
    """Params, metrics and artifacts land on the server (artifacts through its proxy, stored under its
    artifacts folder), not in a local store beside the outputs."""
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_TRACKING_URI", server.uri)
    out = tmp_path / "out"
    cfg = with_runtime(small_kitchen_config(out, name="served", seeds=[0], tasks={"families": ["nl_nouns"], "per_family": 1}),
                       mlflow=True)
    result = run_sweep(cfg, lm=FakeLM.following(SLOW_LM_PLAN), progress=False)
    run_id = result.stats["mlflow_run_id"]
    assert run_id and "mlflow_error" not in result.stats

    client = MlflowClient(tracking_uri=server.uri)
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert run.data.params["name"] == "served" and run.data.params["config_hash"] == cfg.hash()
    overall = {r.planner: r for r in result.summary if r.family == "all"}
    assert run.data.metrics["SayCan.all.execution_success"] == pytest.approx(overall["SayCan"].execution_success)
    assert run.data.metrics["sweep.episodes_run"] == 2
    assert run.info.artifact_uri.startswith("mlflow-artifacts:/")  # the server's store, not this machine's disk
    assert {"summary.json", "traces.jsonl", "config.json", "report"} <= {a.path for a in client.list_artifacts(run_id)}
    served = json.loads(mlflow.artifacts.load_text(f"runs:/{run_id}/summary.json"))
    assert served == json.loads((cfg.run_dir / "summary.json").read_text())
    assert [p.read_text() for p in server.artifacts.rglob("traces.jsonl") if run_id in str(p)] == \
        [(cfg.run_dir / "traces.jsonl").read_text()]
    assert not (out / "mlruns").exists()


def test_a_tracking_server_that_is_down_fails_at_once_naming_it(tmp_path, monkeypatch, capsys):
    """Server down at start: ``eval``, ``train`` and ``collect`` exit 2 with one clear line naming the URI,
    before a model loads or a trace or trajectory is written. The time bound is the behaviour under test (the first MLflow call used
    to retry for 257 s); 30 s is loose for one refused connection. ``--no-mlflow`` runs the sweep anyway."""
    uri = f"http://127.0.0.1:{closed_port()}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    cfg = _eval_yaml(tmp_path / "down.yaml", tmp_path / "out", "down")

    t0 = time.monotonic()
    rc = main(["eval", str(cfg), "--local", "--no-progress"])
    took = time.monotonic() - t0
    out = _text(*capsys.readouterr())
    assert rc == 2, out
    assert f"the MLflow tracking server {uri} is not reachable" in out and "--no-mlflow" in out
    assert "Traceback" not in out and "MlflowException" not in out
    assert took < 30, f"{took:.1f} s to report a closed port"
    assert not list((tmp_path / "out" / "down").iterdir())  # nothing ran: no config.json, no traces

    # train (Can/Pay and the point-goal policy) and collect read MLFLOW_TRACKING_URI as eval does, and check it
    # before the data is read or collected
    for argv, folder in ((["train", "configs/train_can_kitchen.yaml"], "train"),
                         (["train", "configs/train_pointnav_house.yaml"], "pointnav"),
                         (["collect", "configs/collect_hanoi.yaml"], "collect")):
        t0 = time.monotonic()
        rc = main([*argv, "--set", f"output_dir={tmp_path / folder}", "--no-progress"])
        took = time.monotonic() - t0
        out = _text(*capsys.readouterr())
        assert rc == 2 and f"the MLflow tracking server {uri} is not reachable" in out, (argv, out)
        assert "Traceback" not in out and took < 30
        assert not list((tmp_path / folder).rglob("*.parquet")), argv  # nothing was collected

    assert main(["eval", str(cfg), "--local", "--no-progress", "--no-mlflow"]) == 0
    assert len(list(read_traces(tmp_path / "out" / "down" / "traces.jsonl"))) == 2
    capsys.readouterr()

    # a model to be loaded by models:/ through MLFLOW_TRACKING_URI needs the server even without logging
    learned = _eval_yaml(tmp_path / "learned.yaml", tmp_path / "out", "learned", planners=[LEARNED_PLANNER])
    assert main(["eval", str(learned), "--local", "--no-progress", "--no-mlflow"]) == 2
    assert f"the MLflow tracking server {uri} is not reachable" in _text(*capsys.readouterr())


#: the servers the next StopsTheServer stops at its first scoring call
TO_STOP: list[MlflowServer] = []
STOPPING_BACKEND = "stops_tracking_server"


class StopsTheServer(FakeLM):
    """Follows the coke-can plan; its first scoring call stops the servers in :data:`TO_STOP` and waits
    until they are gone."""

    def __init__(self, **_):
        super().__init__(FakeLM.following(SLOW_LM_PLAN)._scores)

    def score(self, prompt, options):
        while TO_STOP:
            TO_STOP.pop().stop()
        return super().score(prompt, options)


@pytest.fixture
def dying(tmp_path):
    """A second tracking server, for a test to stop (stopped here too if the test did not)."""
    s = MlflowServer(tmp_path / "dying").start()
    yield s
    s.stop()


def test_a_server_that_dies_during_the_sweep_costs_the_run_not_the_results(server, dying, tmp_path, monkeypatch,
                                                                          capsys, caplog):
    """The tracking server is stopped while the first episode is scored (after the start-up check passed).
    The sweep finishes, traces and summary are written, one error line names the URI and the command that
    logs them later, and ``eval`` exits 3 (results on disk, MLflow run missing). Bounded retries keep the
    failure well under the 257 s one call took before (the bound below is a guard, not a benchmark).
    ``groundplan log`` then logs the folder to a server that runs."""
    from groundplan.llm import LLM_BACKENDS

    TO_STOP[:] = [dying]
    if STOPPING_BACKEND not in LLM_BACKENDS.names():
        from tests.fake_backend import FakeOptions

        LLM_BACKENDS.register(STOPPING_BACKEND, config=FakeOptions)(StopsTheServer)
    cfg = _eval_yaml(tmp_path / "dies.yaml", tmp_path / "out", "dies", llm={"backend": STOPPING_BACKEND, "model": "fake"})
    run_dir = (tmp_path / "out" / "dies").resolve()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", dying.uri)
    caplog.set_level(logging.WARNING)

    t0 = time.monotonic()
    rc = main(["eval", str(cfg), "--local", "--no-progress"])
    took = time.monotonic() - t0
    out = _text(*capsys.readouterr())
    assert rc == 3, out
    assert len(list(read_traces(run_dir / "traces.jsonl"))) == 2
    assert {r["planner"] for r in json.loads((run_dir / "summary.json").read_text())["rows"]} == {"SayCan", "No-VF"}
    loud = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(loud) == 1, [r.getMessage() for r in loud]
    line = loud[0].getMessage()
    assert f"could not log the sweep to MLflow at {dying.uri}" in line and "Connection refused" in line
    assert f"groundplan log {run_dir}" in line and "\n" not in line
    assert "Traceback" not in out and "MLflow run:" not in out
    assert took < UNBOUNDED_RETRIES_S / 2, f"{took:.1f} s"

    monkeypatch.setenv("MLFLOW_TRACKING_URI", server.uri)
    assert main(["log", str(run_dir)]) == 0
    run_id = re.search(r"MLflow run: (\w+)", _text(*capsys.readouterr())).group(1)
    logged = mlflow.MlflowClient(tracking_uri=server.uri).get_run(run_id)
    assert logged.data.params["name"] == "dies" and "SayCan.all.execution_success" in logged.data.metrics
    assert mlflow.artifacts.load_text(f"runs:/{run_id}/traces.jsonl") == (run_dir / "traces.jsonl").read_text()


HTML = "<!doctype html><html><head><title>Welcome</title></head><body>It works</body></html>"
MLFLOW_SEARCH = '{"experiments": [{"experiment_id": "0", "name": "Default", "lifecycle_stage": "active"}]}'


@contextlib.contextmanager
def http_server(routes: dict[str, tuple[int, str, str]], default: tuple[int, str, str]):
    """A plain HTTP server on 127.0.0.1 (no MLflow in it) answering each GET path (query string ignored) with
    its (status, content type, body) from ``routes``, any other path with ``default``; yields its URI with a
    base path, as a tracking URI behind a proxy has."""
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            path = self.path.split("?", 1)[0].removeprefix("/mlflow")
            status, kind, body = routes.get(path, default)
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    httpd = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/mlflow"
    finally:
        httpd.shutdown()
        httpd.server_close()


NOT_FOUND = (404, "text/html", "<html><body><h1>404 Not Found</h1></body></html>")
HEALTH_OK = (200, "text/plain", "OK")
SEARCH = "/api/2.0/mlflow/experiments/search"


@pytest.mark.parametrize("routes, default, error", [
    # a web server that is not MLflow: refused, whatever it answers
    ({}, NOT_FOUND, r"is not an MLflow tracking server: its /health answered HTTP 404 .*404 Not Found"),
    ({}, (200, "text/html", HTML), r"is not an MLflow tracking server: its /health answered HTTP 200 '<!doctype html>"),
    ({"/health": HEALTH_OK}, (200, "text/html", HTML),  # a health route, but no MLflow API behind it
     rf"is not an MLflow tracking server: the MLflow call {SEARCH} answered HTTP 200 '<!doctype html>.*not JSON"),
    ({"/health": HEALTH_OK}, NOT_FOUND, rf"is not an MLflow tracking server: the MLflow call {SEARCH} answered HTTP 404"),
    ({"/health": HEALTH_OK, SEARCH: (200, "application/json", '{"items": []}')}, NOT_FOUND,
     r"is not an MLflow tracking server: .* answered HTTP 200 .*not MLflow's answer"),
    # MLflow behind a proxy: down, or asking for credentials
    ({}, (503, "text/plain", "Service Unavailable"), r"is not healthy \(HTTP 503 from /health\)"),
    ({}, (500, "text/plain", "oops"), r"is not healthy \(HTTP 500 from /health\)"),
    ({"/health": HEALTH_OK}, (502, "text/plain", "Bad Gateway"), rf"is not healthy \(HTTP 502 'Bad Gateway' from {SEARCH}\)"),
    ({"/health": HEALTH_OK}, (401, "text/plain", "You are not authenticated."),
     r"refused the credentials \(HTTP 401 .*MLFLOW_TRACKING_USERNAME"),
    # what an MLflow server answers: passes
    ({"/health": HEALTH_OK, SEARCH: (200, "application/json", MLFLOW_SEARCH)}, NOT_FOUND, None),
    ({"/health": HEALTH_OK, SEARCH: (200, "application/json", "{}")}, NOT_FOUND, None),  # no active experiment
])
def test_the_check_refuses_what_is_not_a_running_mlflow_server(routes, default, error):
    """Any answer is not enough: a 404 or a 200 HTML page from a server that is not MLflow (a proxy's error
    page, a web server's index) is refused naming the URI and what it answered, as is MLflow that is down
    behind a proxy (5xx) or asks for credentials; only MLflow's ``OK`` from ``/health`` and MLflow's JSON from
    its REST API pass."""
    from groundplan.pipelines.tracking import TrackingServerError, check_tracking_server

    with http_server(routes, default) as uri:
        if error is None:
            check_tracking_server(uri)
        else:
            with pytest.raises(TrackingServerError, match=re.escape(uri) + " " + error) as err:
                check_tracking_server(uri)
            assert "MLFLOW_TRACKING_URI" in str(err.value) and "--no-mlflow" in str(err.value)
    check_tracking_server("sqlite:///nowhere/mlflow.db")  # a local store is never asked


def test_the_check_passes_a_real_mlflow_server_and_eval_refuses_a_web_server_at_once(server, tmp_path, monkeypatch,
                                                                                  capsys):
    """The real ``mlflow server`` passes the check; ``groundplan eval`` pointed at a plain web server that
    answers 404 stops with exit status 2 naming it, before anything runs."""
    from groundplan.pipelines.tracking import check_tracking_server

    check_tracking_server(server.uri)
    with http_server({}, NOT_FOUND) as uri:
        monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
        cfg = _eval_yaml(tmp_path / "web.yaml", tmp_path / "out", "web")
        assert main(["eval", str(cfg), "--local", "--no-progress"]) == 2
    out = _text(*capsys.readouterr())
    assert f"{uri} is not an MLflow tracking server: its /health answered HTTP 404" in out and "Traceback" not in out
    assert not list((tmp_path / "out" / "web").iterdir())  # nothing ran


def test_log_refuses_a_folder_that_is_not_a_sweep(tmp_path, capsys):
    assert main(["log", str(tmp_path)]) == 2
    assert "holds no config.json and traces.jsonl" in _text(*capsys.readouterr())


@pytest.mark.slow
def test_train_registers_a_can_model_on_the_server_and_an_eval_loads_it_by_name(server, tiny_encoder, tmp_path,
                                                                               monkeypatch, capsys):
    """``groundplan train`` (Ray Train, a tiny encoder, two epochs) registers ``models:/can-served/1`` on the
    server with its files in the server's artifact store; an eval whose Can model is that URI, with no
    tracking_uri of its own, resolves it through ``MLFLOW_TRACKING_URI`` and downloads it through the server."""
    from mlflow.tracking import MlflowClient

    from tests.kitchen_data import collect_kitchen

    data = collect_kitchen(tmp_path / "kitchen", seeds=[0], splits=("train",))
    train_cfg = tmp_path / "train_can.yaml"
    train_cfg.write_text(yaml.safe_dump({
        "name": "can-served", "model": {"kind": "can", "encoder": tiny_encoder, "max_length": 96},
        "data": [str(data)], "env": "kitchen", "split": "train", "epochs": 2, "batch_size": 8, "lr_head": 1e-2,
        "lr_encoder": 1e-3, "max_trajectories": 16, "output_dir": str(tmp_path / "train"), "tracking_uri": server.uri}))
    assert main(["train", str(train_cfg), "--no-progress"]) == 0, capsys.readouterr()
    assert "registered models:/can-served/1" in _text(*capsys.readouterr())
    client = MlflowClient(tracking_uri=server.uri, registry_uri=server.uri)
    version = client.get_model_version("can-served", "1")
    assert version.source.startswith("mlflow-artifacts:/")
    assert [m.step for m in client.get_metric_history(version.run_id, "val_f1")] == [1, 2]

    monkeypatch.setenv("MLFLOW_TRACKING_URI", server.uri)
    monkeypatch.setenv("GROUNDPLAN_CACHE_DIR", str(tmp_path / "cache"))  # a fresh download, not a cached copy
    # the test split: the lineage check refuses tasks the Can trained on (the first of the family is one)
    cfg = _eval_yaml(tmp_path / "learned.yaml", tmp_path / "out", "learned", planners=[LEARNED_PLANNER],
                     env={"name": "kitchen", "options": {"mode": "language", "split": "test"}})
    assert main(["eval", str(cfg), "--local", "--no-progress"]) == 0, capsys.readouterr()
    traces = list(read_traces(tmp_path / "out" / "learned" / "traces.jsonl"))
    assert len(traces) == 1 and traces[0].error is None and traces[0].steps
    assert list((tmp_path / "cache").rglob("canpay.json"))  # the model came down from the server
    runs = client.search_runs([client.get_experiment_by_name("learned").experiment_id])
    assert len(runs) == 1 and runs[0].data.params["planners.0.affordance_options.can_model"] == "models:/can-served/1"
