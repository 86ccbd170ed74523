"""A sweep submitted as a Ray job, for real, with the commands of cluster/README.md: a Ray head started
with ``ray start --head`` (its own temp folder and ports, token authentication, custom resources
``{"scorer": 1, "sim": 4}``), ``ray job submit --working-dir .`` of ``groundplan eval`` with the real
embedded model on a tiny selection, logging to an MLflow tracking server through the job's runtime env;
then a job with a bad config, which must end FAILED with groundplan's one-line error; then the head is
stopped and nothing of it may be left running.

The head is stopped by ending the ``ray start --block`` process it runs as (its node drains and stops
what it started), not with ``ray stop``, which stops every Ray on the machine, other users' included.
"""
from __future__ import annotations

import json
import re
import shlex
import shutil
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from tests.live_services import (
    ROOT,
    MlflowServer,
    RayHead,
    have_ray_dashboard,
    no_mlflow_telemetry,
)

pytestmark = pytest.mark.skipif(have_ray_dashboard() is not None, reason=str(have_ray_dashboard()))

#: the tiny selection: one instruction, SayCan only, one step, one episode runner
TINY = ["--set", "tasks.per_family=1", "--set", "tasks.families=[nl_single_primitive]", "--set", "max_steps=1",
        "--planners", "SayCan", "--workers", "1"]
#: what the uploaded working directory may weigh (about 2.2 MiB: code, configs, benchmarks; .rayignore leaves out docs/ and tests/)
MAX_UPLOAD_BYTES = 10 * 2**20


def _submit(head: RayHead, job_id: str, eval_args: list[str], env_vars: dict[str, str]) -> tuple[int, str]:
    """``ray job submit`` as cluster/README.md writes it (waits for the job, printing its logs); returns the
    CLI's exit status and output."""
    runtime_env = json.dumps({"env_vars": env_vars})
    r = head.ray("job", "submit", "--address", head.dashboard, "--submission-id", job_id, "--working-dir", ".",
                 "--runtime-env-json", runtime_env, "--",
                 "groundplan", "eval", "configs/saycan_kitchen.yaml", "--address", "auto",
                 "--scorer-resource", "scorer=1", "--worker-resource", "sim=1", "--no-progress", *eval_args,
                 check=False, timeout=1200)
    return r.returncode, r.stdout + r.stderr


def _job(head: RayHead, what: str, job_id: str) -> str:
    """``ray job status|logs <id>``'s output."""
    r = head.ray("job", what, "--address", head.dashboard, job_id)
    return r.stdout + r.stderr


def _uploaded_dirs(head: RayHead) -> list[Path]:
    """The working directories the head unpacked for jobs."""
    return [p for p in head.temp_dir.glob("session_latest/runtime_resources/working_dir_files/_ray_pkg_*") if p.is_dir()]


def test_a_sweep_submitted_as_a_ray_job_succeeds_and_a_bad_config_fails_clearly(monkeypatch):
    from mlflow.tracking import MlflowClient

    no_mlflow_telemetry(monkeypatch)

    t0 = time.monotonic()

    def lap(what: str) -> None:  # where the time goes, shown when the test fails
        print(f"{time.monotonic() - t0:6.1f} s  {what}")

    base = Path(tempfile.mkdtemp(prefix="gp-ray-", dir="/tmp"))  # short: Ray's socket paths are limited
    head = RayHead(temp_dir=base / "ray", token_path=base / "auth_token")
    server = MlflowServer(base / "mlflow")
    try:
        # both start at once; RAY_worker_niceness=0: on this shared machine, workers at Ray's default nice 15
        # lose the CPU to every other job (a sweep's scorer is the work, not a background helper)
        server.launch()
        head.launch(RAY_worker_niceness="0")
        server.wait_ready()
        lap("mlflow server up")
        head.wait_ready()
        lap("ray head up")

        # token authentication is on: the CLI without RAY_AUTH_MODE=token sends no token and is refused
        refused = head.ray("job", "list", "--address", head.dashboard, check=False,
                           env={k: v for k, v in head.auth_env().items() if k != "RAY_AUTH_MODE"})
        assert refused.returncode != 0 and "Authentication required" in refused.stdout + refused.stderr

        out = base / "out"  # absolute: the job runs in its uploaded copy of the working directory
        ok = f"groundplan-ok-{uuid.uuid4().hex[:8]}"
        rc, logs = _submit(head, ok, [*TINY, "--output", str(out)], {"MLFLOW_TRACKING_URI": server.uri})
        lap("sweep job done")
        assert rc == 0, logs
        assert f"Job '{ok}' succeeded" in _job(head, "status", ok)

        run_dir = out / "saycan_kitchen"
        traces = [json.loads(line) for line in (run_dir / "traces.jsonl").read_text().splitlines()]
        assert [(t["planner"], t["task_id"]) for t in traces] == [("SayCan", "kitchen/nl_single_primitive/00")]
        assert traces[0]["error"] is None and len(traces[0]["steps"]) == 1
        assert traces[0]["llm"] == "smollm2-135m-instruct"
        summary = json.loads((run_dir / "summary.json").read_text())
        assert {(r["planner"], r["family"]) for r in summary["rows"]} == {("SayCan", "nl_single_primitive"), ("SayCan", "all")}
        run_id = re.search(r"MLflow run: (\w+)", logs).group(1)
        client = MlflowClient(tracking_uri=server.uri)
        assert client.get_run(run_id).data.params["name"] == "saycan_kitchen"
        assert client.get_run(run_id).info.artifact_uri.startswith("mlflow-artifacts:/")
        assert not (run_dir.parent / "mlruns").exists()  # the job logged to the server, not to a local store

        uploaded = _uploaded_dirs(head)
        assert len(uploaded) == 1
        size = sum(p.stat().st_size for p in uploaded[0].rglob("*") if p.is_file())
        names = {p.name for p in uploaded[0].iterdir()}
        assert {"groundplan", "configs"} <= names and not names & {".git", ".venv", "outputs", "mlruns", ".hypothesis", "docs", "tests"}
        assert size < MAX_UPLOAD_BYTES, f"{size / 2**20:.1f} MiB uploaded"

        bad = f"groundplan-bad-{uuid.uuid4().hex[:8]}"
        rc, logs = _submit(head, bad, [*TINY, "--set", "max_steps=-1", "--output", str(out)], {})
        lap("failing job done")
        assert rc == 1, logs  # the CLI's status for a job that failed
        status = _job(head, "status", bad)
        assert f"Job '{bad}' failed" in status and "exit code 2" in status, status
        job_logs = _job(head, "logs", bad)
        assert "error: invalid config configs/saycan_kitchen.yaml: option 'max_steps'" in re.sub(r"\s+", " ", job_logs), job_logs
        assert "Traceback" not in job_logs, job_logs
    finally:
        head.stop()
        server.stop()
    lap("head stopped")
    left = head.leftovers()
    assert left == [], f"processes of the test's Ray head still running: {left}"
    shutil.rmtree(base, ignore_errors=True)


def test_the_readme_runs_these_commands():
    """cluster/README.md gives the commands this test runs (apart from addresses, ports and folders)."""
    readme = (ROOT / "cluster" / "README.md").read_text()
    head = RayHead(temp_dir=Path("/tmp/x"), token_path=Path("/tmp/t"))
    head.ports = dict.fromkeys(RayHead.PORTS, 1)
    for needle in ("RAY_AUTH_MODE=token", "ray start --head --block", "--resources '{\"scorer\": 1, \"sim\": 4}'",
                   "ray job submit --address", "--working-dir .", "--runtime-env-json",
                   "--scorer-resource scorer=1 --worker-resource sim=1", "ray job logs", "ray job status",
                   "mlflow server --host", "--serve-artifacts --artifacts-destination", "groundplan log",
                   "RAY_AUTH_TOKEN_PATH", "ray get-auth-token --generate", "--no-mlflow"):
        assert needle in readme, needle
    assert shlex.join(["groundplan", "eval", "configs/saycan_kitchen.yaml", "--address", "auto"]) in readme
