"""The Ray pipeline: same episodes and traces as the in-process sweep, each exactly once; resume;
an MLflow run with metrics and artifacts; a malformed config fails before Ray starts."""
from __future__ import annotations

import functools
import json
import os

import pytest

from groundplan.config import EvalConfig
from groundplan.core.errors import InvalidInputError
from groundplan.actors import group
from groundplan.actors.group import RunnerGroup
from groundplan.pipelines.evaluate.sweep import run_sweep
from groundplan.rollout.traces import read_traces
from tests.fakes import FakeLM, comparable_trace, small_kitchen_config, with_runtime

ray = pytest.importorskip("ray")
PLAN = ["find a coke can", "pick up the coke can", "bring it to you", "put down the coke can", "done"]
LM_FACTORY = functools.partial(FakeLM.following, PLAN)


def _cfg(tmp_path, runtime: dict | None = None, **kw) -> EvalConfig:
    """The small kitchen sweep on the Ray executor (MLflow off unless asked)."""
    return with_runtime(small_kitchen_config(tmp_path, name="dist", **kw), **{"executor": "ray", "mlflow": False,
                                                                             **(runtime or {})})


def _local(cfg: EvalConfig, output_dir) -> EvalConfig:
    return with_runtime(cfg.model_copy(update={"output_dir": str(output_dir)}), executor="local")


def _episode_id(d: dict) -> str:
    return d["episode_id"]


def test_ray_sweep_matches_in_process_sweep_and_resumes(tmp_path, ray_local):
    cfg = _cfg(tmp_path / "ray")
    cfg = with_runtime(cfg, workers=3)
    result = run_sweep(cfg, lm_factory=LM_FACTORY, progress=False)
    seq = run_sweep(_local(cfg, tmp_path / "seq"), lm=LM_FACTORY(), progress=False)
    n = 16
    ids = [t.episode_id for t in read_traces(cfg.run_dir / "traces.jsonl")]
    assert len(ids) == len(set(ids)) == n
    assert sorted(map(comparable_trace, result.traces), key=lambda d: d["episode_id"]) == \
        sorted(map(comparable_trace, seq.traces), key=lambda d: d["episode_id"])
    assert [r.to_dict() for r in result.summary] == [r.to_dict() for r in seq.summary]
    assert result.stats["scorer"]["requests"] > 0 and result.stats["episode_reruns"] == 0
    assert ray.is_initialized()  # a Ray it did not start is left running

    # resume: an extra seed runs only the new episodes, here on one actor with three envs; nothing is duplicated
    more = run_sweep(_cfg(tmp_path / "ray", seeds=[0, 1, 2], runtime={"workers": 1, "envs_per_worker": 3}),
                     lm_factory=LM_FACTORY, progress=False)
    assert more.skipped == n and more.stats["episodes_run"] == 8 and len(more.traces) == 24
    assert more.stats["num_workers"] == 1 and more.stats["max_in_flight"] == 3
    seed2 = run_sweep(_local(_cfg(tmp_path / "seq2", seeds=[2]), tmp_path / "seq2"), lm=LM_FACTORY(), progress=False)
    def same_run(t) -> dict:  # the sweep's config hash differs (other seeds); the episode must not
        return {k: v for k, v in comparable_trace(t).items() if k != "config_hash"}

    assert sorted((same_run(t) for t in more.traces if t.seed == 2), key=_episode_id) == \
        sorted(map(same_run, seed2.traces), key=_episode_id)
    ids = [t.episode_id for t in read_traces(cfg.run_dir / "traces.jsonl")]
    assert len(ids) == len(set(ids)) == 24
    again = run_sweep(_cfg(tmp_path / "ray", seeds=[0, 1, 2]), lm_factory=LM_FACTORY, progress=False)
    assert again.skipped == 24 and again.stats["episodes_run"] == 0


def test_remote_affordance_server_gives_the_same_results(tmp_path, ray_local):
    cfg = _cfg(tmp_path / "a", seeds=[0], runtime={"workers": 2, "remote_affordance": True})
    remote = run_sweep(cfg, lm_factory=LM_FACTORY, progress=False)
    local = run_sweep(_local(cfg, tmp_path / "b"), lm=LM_FACTORY(), progress=False)
    assert sorted(map(comparable_trace, remote.traces), key=lambda d: d["episode_id"]) == \
        sorted(map(comparable_trace, local.traces), key=lambda d: d["episode_id"])
    assert remote.stats["affordance_server"]["requests"] > 0


def test_sweep_is_logged_to_mlflow(tmp_path, ray_local, monkeypatch):
    import mlflow

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    cfg = _cfg(tmp_path, seeds=[0], tasks={"families": ["nl_nouns"], "per_family": 2},
               runtime={"workers": 2, "mlflow": True})
    result = run_sweep(cfg, lm_factory=LM_FACTORY, progress=False)
    run_id = result.stats["mlflow_run_id"]
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{(tmp_path / 'mlruns' / 'mlflow.db').resolve()}")
    run = client.get_run(run_id)
    assert run.data.params["llm.model"] == cfg.llm.model and run.data.params["planners.0.label"] == "SayCan"
    assert run.data.metrics["SayCan.nl_nouns.episodes"] == 2
    assert "SayCan.all.execution_success" in run.data.metrics and "sweep.episodes_run" in run.data.metrics
    arts = {a.path for a in client.list_artifacts(run_id)}
    assert {"summary.json", "traces.jsonl", "config.json", "summary_table.txt"} <= arts
    saved = json.loads((cfg.run_dir / "summary.json").read_text())["rows"]
    assert {r["planner"] for r in saved} == {"SayCan", "No-VF"}


def test_planner_grid_runs_through_ray_and_its_best_variant_is_logged(tmp_path, ray_local):
    import mlflow

    cfg = _cfg(tmp_path, seeds=[0], tasks={"families": ["nl_nouns"], "per_family": 2},
               planners=[{"name": "saycan_novf", "label": "No-VF", "options": {}, "grid": {"llm_score": ["sum", "mean"]}}],
               runtime={"workers": 2, "mlflow": True})
    uri = f"sqlite:///{(tmp_path / 'grid.db').resolve()}"
    result = run_sweep(cfg, lm_factory=LM_FACTORY, progress=False, tracking_uri=uri)
    assert {t.planner for t in result.traces} == {"No-VF [llm_score=sum]", "No-VF [llm_score=mean]"}
    assert len(result.traces) == 4 and list(result.best) == ["No-VF"]
    run = mlflow.MlflowClient(tracking_uri=uri).get_run(result.stats["mlflow_run_id"])
    assert run.data.metrics["best.No-VF.execution_success"] == result.best["No-VF"].execution_success
    assert "grid_selection.json" in {a.path for a in mlflow.MlflowClient(tracking_uri=uri).list_artifacts(run.info.run_id)}


@pytest.mark.parametrize(
    "change, error, match",
    [
        ({"tasks": {"families": ["nl_nounz"]}}, InvalidInputError, "nl_nouns"),
        ({"tasks": {"ids": ["kitchen/nope/00"]}}, InvalidInputError, "unknown task ids"),
    ],
)
def test_malformed_sweep_fails_before_ray_starts(tmp_path, monkeypatch, change, error, match):
    def no_ray(*a, **k):
        raise AssertionError("Ray was started for a malformed config")

    monkeypatch.setattr(group, "_connect", no_ray)
    with pytest.raises(error, match=match):
        run_sweep(_cfg(tmp_path, **change), lm_factory=LM_FACTORY, progress=False)


def test_unwritable_output_folder_fails_before_anything_starts(tmp_path, monkeypatch):
    def no_ray(*a, **k):
        raise AssertionError("Ray was started although results could not be written")

    monkeypatch.setattr(group, "_connect", no_ray)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(InvalidInputError, match="cannot write to the output folder"):
        run_sweep(small_kitchen_config(blocker / "out", name="dist"), lm_factory=LM_FACTORY, progress=False)


VH_STEPS = ["walk to bathroom", "find towel", "grab towel"]


def test_env_metrics_come_back_from_runner_actors(tmp_path, ray_local):
    """Per-episode env metrics (VirtualHome's executability, LCS...) are computed by the actor's env
    and recorded exactly as in-process."""
    pytest.importorskip("virtualhome_eval")
    cfg = EvalConfig.model_validate({
        "name": "vh", "env": {"name": "virtualhome"}, "planners": [{"name": "zeroshot_vanilla", "label": "Vanilla",
                                                                      "options": {"num_samples": 1}}],
        "tasks": {"per_family": 1}, "seeds": [0], "max_steps": 4, "output_dir": str(tmp_path / "ray"),
        "runtime": {"workers": 2, "mlflow": False},
    })
    factory = functools.partial(FakeLM, generations=[" " + ", ".join(VH_STEPS)] * 100)
    local = run_sweep(_local(cfg, tmp_path / "local"), lm=factory(), progress=False)
    remote = run_sweep(cfg, lm_factory=factory, progress=False)
    assert local.traces and all(t.metrics for t in local.traces)
    by_id = {t.episode_id: t.metrics for t in local.traces}
    assert {t.episode_id: t.metrics for t in remote.traces} == by_id


def test_local_ray_gets_enough_logical_cpus_for_the_requested_actors(monkeypatch):
    """4 half-CPU workers + a 1-CPU scorer on a 2-core machine must not leave workers unschedulable."""
    import ray

    seen = {}
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kw: seen.update(kw))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert RunnerGroup(cpus_needed=3.0).connect()
    assert seen["num_cpus"] == 3


def test_local_ray_runs_its_workers_at_normal_priority(monkeypatch):
    """Ray's default nice 15 would let any other process starve the scorer; a user's own setting stays."""
    import ray

    seen = []  # the niceness the raylet would inherit, read inside ray.init
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kw: seen.append(os.environ.get("RAY_worker_niceness")))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_worker_niceness", "")  # recorded, so the variable is restored after the test
    monkeypatch.delenv("RAY_worker_niceness")
    assert RunnerGroup().connect()
    assert seen[-1] == "0"
    assert "RAY_worker_niceness" not in os.environ  # only that ray.init saw it: no leak into later Ray instances
    monkeypatch.setenv("RAY_worker_niceness", "10")
    assert RunnerGroup().connect()
    assert seen[-1] == "10" and os.environ["RAY_worker_niceness"] == "10"
    monkeypatch.delenv("RAY_worker_niceness")
    assert RunnerGroup(address="ray://head:10001").connect()  # a cluster keeps the niceness its `ray start` chose
    assert seen[-1] is None


def test_unplaceable_actors_fail_clearly_instead_of_hanging(tmp_path, ray_local):
    """A scorer that asks for more CPUs than the cluster has is never placed: the sweep stops after
    ``start_timeout_s`` with what the cluster has (runners go through the same wait once the scorer is up;
    asking for an unplaceable scorer keeps the test's length independent of how fast a scorer starts)."""
    cfg = _cfg(tmp_path, runtime={"workers": 1, "scorer_cpus": 64, "start_timeout_s": 3})
    with pytest.raises(InvalidInputError, match="LLM scorer did not start within 3 s: the cluster cannot place them"):
        run_sweep(cfg, lm_factory=LM_FACTORY, progress=False)
