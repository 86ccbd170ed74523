"""MLflow logging of a sweep: one run per sweep with params, metrics and artifacts.

Everything stays in one place: the tracking store defaults to a SQLite database under
``<output_dir>/mlruns`` (no server needed; ``MLFLOW_TRACKING_URI`` or ``tracking_uri`` overrides it) and
a new experiment's artifact location is ``<output_dir>/mlruns/artifacts``, so nothing is written to the
working directory. With a tracking server (an ``http(s)://`` URI) the server decides where artifacts go
(``mlflow server --serve-artifacts`` proxies them), because a local path would be a folder on whichever
machine ran the sweep. Params are the config flattened (``llm.model``, ``planners.0.name``, ...); metrics
are the summary per planner and family (``SayCan.nl_nouns.plan_success``), the sweep's throughput and the
scorer's statistics; artifacts are ``summary.json``, ``traces.jsonl``, ``config.json``, the rendered
summary table, the camera frames and the HTML report.

A tracking server is a remote dependency that can be down, so it is handled like one: it is checked
before any model loads (:func:`check_tracking_server`: two requests with a short timeout, which also tell
an MLflow server from another web server at that address), MLflow's own
HTTP retries are bounded while a sweep is logged (:func:`bounded_http_retries`; MLflow's defaults retry
a refused connection for about four minutes), and a failure while logging a finished sweep costs
the MLflow run, never the traces and summary already on disk: :func:`log_sweep_or_explain` says in one
line how to log them later (``groundplan log <run folder>``,
:func:`groundplan.pipelines.evaluate.sweep.log_run_folder`).
"""
from __future__ import annotations

import contextlib
import logging
import os
import re
from pathlib import Path
from typing import Any, Iterable, Iterator

from groundplan.core.errors import GroundplanError

log = logging.getLogger(__name__)

#: MLflow's HTTP client settings while a sweep is logged, unless set in the environment: a refused request
#: is retried twice (about 4 s in all), and a silent server is given up after 30 s
BOUNDED_HTTP = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_TIMEOUT": "30"}

#: how long the reachability check waits for the server's answer
CHECK_TIMEOUT_S = 5.0

#: what the eval error says about running without a server
EVAL_HINT = "run without tracking (--no-mlflow, or runtime.mlflow: false in the config)"


class TrackingServerError(GroundplanError, RuntimeError):
    """The MLflow tracking server a command needs does not answer; the message names its URI."""


def default_tracking_uri(output_dir: str | Path) -> str:
    folder = Path(output_dir).resolve() / "mlruns"
    folder.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{folder / 'mlflow.db'}"


def absolute_tracking_uri(uri: str) -> str:
    """``uri`` with a relative SQLite path made absolute, so a process with another working directory (a Ray
    Train worker runs in its trial folder) opens the same store; any other URI as given."""
    prefix = "sqlite:///"
    if uri.startswith(prefix) and not uri[len(prefix):].startswith("/"):
        return prefix + str(Path(uri[len(prefix):]).resolve())
    return uri


def resolve_tracking_uri(output_dir: str | Path, tracking_uri: str | None = None) -> str:
    """Where a run (sweep, dataset, training) is logged: ``tracking_uri``, else ``MLFLOW_TRACKING_URI``, else
    the SQLite store under ``<output_dir>/mlruns``."""
    return tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or default_tracking_uri(output_dir)


def is_server_uri(uri: str | None) -> bool:
    """True for a tracking server (``http://`` or ``https://``), the only kind of store that can be down."""
    return bool(uri) and uri.split("://", 1)[0].lower() in ("http", "https")


def use_experiment(name: str, output_dir: str | Path, tracking_uri: str) -> str:
    """Make ``tracking_uri`` MLflow's tracking and registry store and select (creating it if needed) the
    experiment ``name``: its artifacts under ``<output_dir>/mlruns/artifacts`` for a local store (a
    SQLite store's default artifact root is ./mlruns in the working directory), where the server keeps
    them for a tracking server (a local folder would be on the logging machine only)."""
    import mlflow

    # MLflow also writes the URI into this process's MLFLOW_TRACKING_URI (and MLFLOW_REGISTRY_URI) for its
    # subprocesses; left there, the next run in the same process would take the last store used for the
    # user's own setting (resolve_tracking_uri reads that variable), so the variables are put back
    before = {k: os.environ.get(k) for k in ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI")}
    mlflow.set_tracking_uri(tracking_uri)
    mlflow.set_registry_uri(tracking_uri)
    for key, value in before.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    experiment = mlflow.get_experiment_by_name(name)
    if experiment is None:
        location = None
        if not is_server_uri(tracking_uri):
            folder = Path(output_dir).resolve() / "mlruns" / "artifacts"
            folder.mkdir(parents=True, exist_ok=True)
            location = folder.as_uri()
        experiment_id = mlflow.create_experiment(name, artifact_location=location)
    else:
        experiment_id = experiment.experiment_id
    mlflow.set_experiment(experiment_id=experiment_id)
    return experiment_id


# ------------------------------------------------------------------------------- server health


def failure_reason(exc: BaseException) -> str:
    """A short reason for a failed request ('[Errno 111] Connection refused', 'Read timed out'), not the
    whole chain of urllib3 and MLflow wrappers."""
    text = str(exc)
    for pattern in (r"\[Errno -?\d+\][^'\")\n]*", r"(?:Read|Connect) timed out", r"status code \d+", r"HTTP \d+"):
        found = re.search(pattern, text)
        if found:
            return found.group(0).strip()
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return first if len(first) <= 200 else first[:197] + "..."


#: the MLflow REST call that tells a tracking server from any other HTTP server: every MLflow tracking server
#: answers it with a JSON object whose ``experiments`` (absent when there are none) lists experiments
API_PROBE = "/api/2.0/mlflow/experiments/search"


def check_tracking_server(uri: str | None, hint: str = EVAL_HINT, timeout: float = CHECK_TIMEOUT_S) -> None:
    """Fail at once, naming ``uri``, unless it is a local store (SQLite, files: they pass unasked) or an MLflow
    tracking server that answers: its ``/health`` says ``OK`` and one MLflow REST call (:data:`API_PROBE`,
    ``max_results=1``) answers JSON of MLflow's shape. Each request goes through MLflow's own HTTP client (so
    its credentials and TLS settings apply), with no retries and a ``timeout`` in seconds: without this check
    a closed port is found only when the first MLflow call has retried for minutes, after the models loaded
    or the whole sweep ran. Reachable is not enough: a URI that names some other web server (a 404 from a
    proxy that does not route MLflow, a login or index page answering 200 HTML) would pass a reachability
    check and fail only when the sweep logs its results, so its answers are checked for MLflow's own."""
    if not is_server_uri(uri):
        return
    from mlflow.utils.credentials import get_default_host_creds
    from mlflow.utils.rest_utils import http_request

    creds = get_default_host_creds(uri)
    ending = f"point MLFLOW_TRACKING_URI at one that runs, or {hint}"
    elsewhere = f"point MLFLOW_TRACKING_URI at an MLflow tracking server (e.g. http://host:5000), or {hint}"

    def get(endpoint: str, **params: Any) -> Any:
        try:
            return http_request(creds, endpoint, "GET", max_retries=0, backoff_factor=0, timeout=timeout,
                                raise_on_status=False, params=params or None)
        except Exception as e:  # MLflow wraps connection errors and timeouts in its own exception
            raise TrackingServerError(f"the MLflow tracking server {uri} is not reachable ({failure_reason(e)}); start "
                                      f"it, {ending}") from None

    health = get("/health")
    if health.status_code >= 500:
        raise TrackingServerError(f"the MLflow tracking server {uri} is not healthy (HTTP {health.status_code} from "
                                  f"/health); fix it, {ending}")
    if health.status_code != 200 or health.text.strip().upper() != "OK":
        raise TrackingServerError(f"{uri} is not an MLflow tracking server: its /health answered HTTP "
                                  f"{health.status_code} {_quote(health.text)} where MLflow answers 200 OK; {elsewhere}")
    api = get(API_PROBE, max_results=1)
    problem = _not_mlflow_answer(api)
    if problem:
        if api.status_code >= 500:
            raise TrackingServerError(f"the MLflow tracking server {uri} is not healthy ({problem} from {API_PROBE}); "
                                      f"fix it, {ending}")
        if api.status_code in (401, 403):
            raise TrackingServerError(f"the MLflow tracking server {uri} refused the credentials ({problem} from "
                                      f"{API_PROBE}); set MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD or "
                                      f"MLFLOW_TRACKING_TOKEN, {ending}")
        raise TrackingServerError(f"{uri} is not an MLflow tracking server: the MLflow call {API_PROBE} answered "
                                  f"{problem}; {elsewhere}")


def _not_mlflow_answer(response: Any) -> str | None:
    """None when ``response`` is what an MLflow tracking server answers to :data:`API_PROBE`: HTTP 200 and a JSON
    object with no fields but ``experiments`` (a list of objects with an ``experiment_id``; absent when there
    are none, as MLflow leaves empty fields out) and ``next_page_token``. Else what it answered, quoted."""
    what = f"HTTP {response.status_code} {_quote(response.text)}"
    if response.status_code != 200:
        return what
    try:
        data = response.json()
    except ValueError:
        return f"{what}, not JSON"
    experiments = data.get("experiments", []) if isinstance(data, dict) else None
    if (not isinstance(experiments, list) or set(data) - {"experiments", "next_page_token"}
            or not all(isinstance(e, dict) and "experiment_id" in e for e in experiments)):
        return f"{what}, not MLflow's answer (a JSON object listing experiments)"
    return None


def _quote(text: str, limit: int = 120) -> str:
    """A server's answer on one line, cut to ``limit`` characters, in quotes."""
    text = " ".join(str(text).split())
    return repr(text if len(text) <= limit else text[:limit] + "...")


def eval_tracking_uris(cfg: Any, tracking_uri: str | None = None) -> list[str]:
    """The tracking stores a sweep of ``cfg`` will contact: where it is logged (when ``runtime.mlflow``),
    every ``tracking_uri`` a plugin's options name, and ``MLFLOW_TRACKING_URI`` when the config loads a
    model by MLflow URI (``models:/...``, ``runs:/...``) that may resolve through it."""
    uris: list[str] = []
    if cfg.runtime.mlflow:
        uris.append(tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or "")
    loads_models = False
    for key, value in flatten(cfg.model_dump()).items():
        if key.rsplit(".", 1)[-1] == "tracking_uri" and isinstance(value, str):
            uris.append(value)
        elif isinstance(value, str) and value.startswith(("models:/", "runs:/")):
            loads_models = True
    if loads_models:
        uris.append(os.environ.get("MLFLOW_TRACKING_URI", ""))
    return list(dict.fromkeys(u for u in uris if u))


def check_tracking_servers(uris: Iterable[str], hint: str = EVAL_HINT) -> None:
    """:func:`check_tracking_server` for each of ``uris``."""
    for uri in uris:
        check_tracking_server(uri, hint)


@contextlib.contextmanager
def bounded_http_retries() -> Iterator[None]:
    """MLflow's HTTP settings of :data:`BOUNDED_HTTP` for the duration, where the environment sets none.

    MLflow retries a failed request 7 times with exponential backoff, which against a stopped server is
    about four minutes per call, and warns once per retry. The variables are read at each request, and
    processes started meanwhile (a local Ray's workers) inherit them; urllib3's retry warnings are
    silenced meanwhile, since the failure is reported once by the caller."""
    added = [k for k in BOUNDED_HTTP if k not in os.environ]
    for k in added:
        os.environ[k] = BOUNDED_HTTP[k]
    retries = logging.getLogger("urllib3.connectionpool")
    level = retries.level
    retries.setLevel(logging.ERROR)
    try:
        yield
    finally:
        retries.setLevel(level)
        for k in added:
            os.environ.pop(k, None)


def flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    if isinstance(d, dict):
        for k, v in d.items():
            out.update(flatten(v, f"{prefix}{k}."))
    elif isinstance(d, (list, tuple)) and d and all(isinstance(x, dict) for x in d):
        for i, v in enumerate(d):
            out.update(flatten(v, f"{prefix}{i}."))
    else:
        out[prefix[:-1]] = d
    return out


def _key(*parts: str) -> str:
    """MLflow keys allow alphanumerics, _ - . / and spaces; anything else becomes _."""
    return ".".join(re.sub(r"[^0-9A-Za-z_\-/ ]", "_", p) for p in parts)


def log_sweep(result: Any, tracking_uri: str | None = None, run_name: str | None = None) -> str:
    """Log an :class:`~groundplan.pipelines.evaluate.sweep.EvalResult` as one MLflow run; returns the run id."""
    import mlflow

    from groundplan.evaluation.summary import render_text
    from groundplan.evaluation.tables import summary_table

    cfg = result.config
    uri = resolve_tracking_uri(cfg.output_dir, tracking_uri)
    use_experiment(cfg.name, cfg.output_dir, uri)
    params = {k: str(v)[:500] for k, v in flatten(cfg.model_dump()).items()}
    params["config_hash"] = cfg.hash()
    metrics: dict[str, float] = {}
    for r in result.summary:
        base = (r.planner, r.family)
        metrics[_key(*base, "execution_success")] = float(r.execution_success)
        if r.plan_success is not None:
            metrics[_key(*base, "plan_success")] = float(r.plan_success)
        metrics[_key(*base, "mean_steps")] = float(r.mean_steps)
        metrics[_key(*base, "errors")] = float(r.errors)
        metrics[_key(*base, "episodes")] = float(r.episodes)
        for name, value in r.metrics.items():  # env metrics, e.g. VirtualHome's executability and LCS
            metrics[_key(*base, name)] = float(value)
    for group, r in result.best.items():  # each planner grid at its best variant
        metrics[_key("best", group, "execution_success")] = float(r.execution_success)
        for name, value in r.metrics.items():
            metrics[_key("best", group, name)] = float(value)
    for k, v in flatten(result.stats).items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            metrics[_key("sweep", *k.split("."))] = float(v)
    with mlflow.start_run(run_name=run_name or f"{cfg.name}-{cfg.hash()}") as run:
        mlflow.log_params(params)
        mlflow.log_metrics(metrics)
        run_dir = Path(result.run_dir)
        for name in ("summary.json", "grid_selection.json", "traces.jsonl", "config.json"):
            path = run_dir / name
            if path.exists():
                mlflow.log_artifact(str(path))
        if (run_dir / "frames").is_dir():
            mlflow.log_artifacts(str(run_dir / "frames"), "frames")
        try:
            from groundplan.pipelines.evaluate.report import render_report

            render_report(run_dir)
            mlflow.log_artifacts(str(run_dir / "report"), "report")
        except Exception as exc:  # the report is a convenience; the traces are logged above
            log.warning("could not render the HTML report: %s", exc)
        try:
            mlflow.log_text(render_text(summary_table(result.summary, cfg.env.name, cfg.name)), "summary_table.txt")
        except Exception as exc:  # the table is a convenience; the numbers are in summary.json
            log.warning("could not render the summary table: %s", exc)
        return run.info.run_id


def log_sweep_or_explain(result: Any, tracking_uri: str | None = None) -> str | None:
    """:func:`log_sweep` with MLflow's retries bounded; when logging fails (the server went away during
    the sweep), the traces and summary are already on disk, so one error line says so and how to log
    them later, ``result.stats["mlflow_error"]`` records the reason, and None is returned."""
    uri = resolve_tracking_uri(result.config.output_dir, tracking_uri)
    try:
        with bounded_http_retries():
            return log_sweep(result, tracking_uri=uri)
    except Exception as e:  # any failure of the store: the results on disk are what matters
        reason = failure_reason(e)
        result.stats["mlflow_error"] = f"{uri}: {reason}"
        run_dir = Path(result.run_dir).resolve()
        log.error("could not log the sweep to MLflow at %s (%s); its traces and summary are in %s; log them "
                  "later with: groundplan log %s", uri, reason, run_dir, run_dir)
        log.debug("MLflow logging failed", exc_info=True)
        return None

