"""Real services for tests, each its own process group on loopback with its own free ports and folders:
an MLflow tracking server (``mlflow server``) and a Ray head (``ray start --head --block``).

Both are stopped by signalling the process group they were started in, never with ``ray stop`` (which
stops every Ray on the machine, other people's included), and :func:`leftovers` tells whether any process
of theirs is still running.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path

BIN = Path(sys.executable).parent  # the virtualenv's ray, mlflow and groundplan commands
ROOT = Path(__file__).resolve().parents[1]

#: variables of the test process that must not reach a service or a job: each test sets its own
LEAKY = ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH",
         "MLFLOW_TRACKING_URI", "GROUNDPLAN_PLUGINS", "RAY_JOB_HEADERS")


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports that were free on 127.0.0.1 a moment ago (all bound at once, so distinct)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def closed_port() -> int:
    """A port nothing listens on (it was free a moment ago)."""
    return free_ports(1)[0]


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without :data:`LEAKY`, with the virtualenv first on PATH, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in LEAKY}
    env["PATH"] = os.pathsep.join([str(BIN), env.get("PATH", "")])
    env.update(extra)
    return env


def group_pids(pgid: int) -> list[int]:
    """Live (non-zombie) processes of process group ``pgid``."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()  # after "pid (comm)": state, ppid, pgrp, ...
        if fields[0] != "Z" and int(fields[2]) == pgid:
            out.append(int(entry.name))
    return out


def pids_mentioning(text: str) -> list[int]:
    """Live processes whose command line contains ``text`` (e.g. a service's own temp folder)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if text in cmdline and state != "Z":
            out.append(int(entry.name))
    return out


def stop_group(proc: subprocess.Popen, grace_s: float = 60.0, leader_only: bool = False) -> None:
    """SIGTERM the process group ``proc`` leads (it was started with ``start_new_session``), or only its
    leader when it shuts its children down itself, wait up to ``grace_s`` for all of the group, then
    SIGKILL what is left."""
    pgid = proc.pid
    try:
        if leader_only:
            proc.send_signal(signal.SIGTERM)
        else:
            os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if proc.poll() is not None and not group_pids(pgid):
            return
        time.sleep(0.5)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


def wait_until(check, timeout_s: float, what: str, proc: subprocess.Popen | None = None, log: Path | None = None):
    """Poll ``check()`` until it returns a true value (returned); fail naming ``what`` after ``timeout_s``
    (a guard against a hang, not a bound on speed) or as soon as ``proc`` exits."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            tail = log.read_text()[-3000:] if log is not None and log.exists() else ""
            raise AssertionError(f"{what}: the process exited with {proc.returncode}\n{tail}")
        time.sleep(0.5)
    tail = log.read_text()[-3000:] if log is not None and log.exists() else ""
    raise AssertionError(f"{what}: not within {timeout_s:.0f} s\n{tail}")


# ------------------------------------------------------------------------------------------ MLflow


def no_mlflow_telemetry(monkeypatch) -> None:
    """Turn MLflow's telemetry off in this process for a test. Without network its config thread fails and
    removes ``_MLFLOW_TELEMETRY_SESSION_ID`` from ``os.environ`` while another thread's ``requests`` call
    iterates ``os.environ`` (for proxies), so a random MLflow call fails with ``KeyError:
    '_MLFLOW_TELEMETRY_SESSION_ID'``. MLflow turns telemetry off by itself under CI or pytest, but only if
    it was first imported while a test ran, not during collection."""
    from mlflow.telemetry import set_telemetry_client

    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    set_telemetry_client()  # re-reads the setting: no client, no thread


@dataclass
class MlflowServer:
    """``mlflow server`` on 127.0.0.1 with a SQLite backend and proxied artifacts (``--serve-artifacts``:
    clients upload and download through the server, which stores them under ``artifacts``)."""

    folder: Path
    port: int = 0
    proc: subprocess.Popen | None = None

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def artifacts(self) -> Path:
        return self.folder / "artifacts"

    def command(self) -> list[str]:
        """The command cluster/README.md gives, with this server's port and folders."""
        return [str(BIN / "mlflow"), "server", "--host", "127.0.0.1", "--port", str(self.port),
                "--backend-store-uri", f"sqlite:///{self.folder / 'mlflow.db'}",
                "--serve-artifacts", "--artifacts-destination", str(self.artifacts), "--workers", "1"]

    def start(self, timeout_s: float = 300.0) -> MlflowServer:
        return self.launch().wait_ready(timeout_s)

    def launch(self) -> MlflowServer:
        """Start the server without waiting for it (:meth:`wait_ready` waits)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_ports(1)[0]
        # the server's job runner (GenAI evaluation jobs) is not needed here and costs a dozen processes
        env = clean_env(MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false")
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(self.command(), stdout=out, stderr=subprocess.STDOUT, env=env,
                                         cwd=self.folder, start_new_session=True)
        return self

    @property
    def log(self) -> Path:
        return self.folder / "server.log"

    def wait_ready(self, timeout_s: float = 300.0) -> MlflowServer:
        wait_until(self.healthy, timeout_s, f"mlflow server on port {self.port}", self.proc, self.log)
        return self

    def healthy(self) -> bool:
        try:
            with closing(urllib.request.urlopen(f"{self.uri}/health", timeout=2)) as r:
                return r.status == 200
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc is not None:
            stop_group(self.proc, grace_s=30)


# --------------------------------------------------------------------------------------------- Ray


@dataclass
class RayHead:
    """A Ray head started with ``ray start --head --block`` (the block keeps it in the foreground, so it and
    everything it starts form one process group that :meth:`stop` ends), token authentication on, with
    its own temp folder, ports, token file and custom resources."""

    temp_dir: Path
    token_path: Path
    resources: dict[str, float] = field(default_factory=lambda: {"scorer": 1, "sim": 4})
    num_cpus: int = 2
    ports: dict[str, int] = field(default_factory=dict)
    proc: subprocess.Popen | None = None

    PORTS = ("port", "dashboard-port", "ray-client-server-port", "node-manager-port", "object-manager-port",
             "dashboard-agent-listen-port", "dashboard-agent-grpc-port", "runtime-env-agent-port",
             "metrics-export-port")

    @property
    def dashboard(self) -> str:
        """The job server's address (``ray job submit --address``)."""
        return f"http://127.0.0.1:{self.ports['dashboard-port']}"

    def auth_env(self, **extra: str) -> dict[str, str]:
        """The environment of every command that talks to this head: token mode and where the token is."""
        return clean_env(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(self.token_path), **extra)

    def start_command(self) -> list[str]:
        cmd = [str(BIN / "ray"), "start", "--head", "--block", "--temp-dir", str(self.temp_dir),
               "--dashboard-host", "127.0.0.1", "--num-cpus", str(self.num_cpus),
               "--resources", json.dumps(self.resources), "--disable-usage-stats"]
        for name in self.PORTS:
            cmd += [f"--{name}", str(self.ports[name])]
        return cmd

    def start(self, timeout_s: float = 300.0, **env: str) -> RayHead:
        return self.launch(**env).wait_ready(timeout_s)

    @property
    def log(self) -> Path:
        return self.temp_dir.parent / f"{self.temp_dir.name}-head.log"

    def launch(self, **env: str) -> RayHead:
        """Start the head without waiting for it (:meth:`wait_ready` waits); ``env`` is added to its
        environment, which its raylet, workers and jobs inherit."""
        self.temp_dir.mkdir(parents=True, exist_ok=True)
        self.token_path.parent.mkdir(parents=True, exist_ok=True)
        if not self.token_path.exists():  # what `ray get-auth-token --generate` writes, in a file of our own
            self.token_path.write_text(secrets.token_hex(32))
            self.token_path.chmod(0o600)
        self.ports = dict(zip(self.PORTS, free_ports(len(self.PORTS))))
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(self.start_command(), stdout=out, stderr=subprocess.STDOUT,
                                         env=self.auth_env(**env), cwd=self.temp_dir, start_new_session=True)
        return self

    def wait_ready(self, timeout_s: float = 300.0) -> RayHead:
        wait_until(lambda: self.ray("job", "list", "--address", self.dashboard, check=False, timeout=60).returncode == 0,
                   timeout_s, "the Ray head's job server", self.proc, self.log)
        return self

    def ray(self, *args: str, check: bool = True, timeout: float = 600, env: dict[str, str] | None = None,
            cwd: Path | None = None) -> subprocess.CompletedProcess:
        """Run the ``ray`` CLI against this head (token mode on unless ``env`` says otherwise)."""
        return subprocess.run([str(BIN / "ray"), *args], capture_output=True, text=True, timeout=timeout,
                              env=self.auth_env() if env is None else env, cwd=cwd or ROOT, check=check)

    def stop(self) -> None:
        """What Ctrl-C on ``ray start --block`` does: its node drains and stops everything it started."""
        if self.proc is not None:
            stop_group(self.proc, grace_s=90, leader_only=True)

    def leftovers(self) -> list[int]:
        """Processes of this head still running: in its process group or naming its temp folder."""
        pids = set(pids_mentioning(str(self.temp_dir)))
        if self.proc is not None:
            pids |= set(group_pids(self.proc.pid))
        return sorted(pids)


def have_ray_dashboard() -> str | None:
    """Why a Ray head with a job server cannot run here, or None when it can."""
    if shutil.which("ray", path=str(BIN)) is None:
        return "the ray CLI is not installed"
    try:
        import aiohttp  # noqa: F401  (ray[default]: the dashboard and its job server)
        import ray.dashboard  # noqa: F401
        from ray.dashboard.modules.job.sdk import JobSubmissionClient  # noqa: F401
    except ImportError as e:
        return f"ray[default] (the dashboard and its job server) is not installed: {e}"
    return None
