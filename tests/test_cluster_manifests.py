"""The cluster manifests load, run `groundplan eval`, and place the scorer on GPU nodes."""
from __future__ import annotations

from pathlib import Path

import yaml

CLUSTER = Path(__file__).resolve().parents[1] / "cluster"


def test_cluster_launcher_config_places_scorer_on_gpu_and_sims_on_cpu():
    cfg = yaml.safe_load((CLUSTER / "ray-cluster.yaml").read_text())
    types = cfg["available_node_types"]
    assert cfg["head_node_type"] in types
    gpu = [t for t in types.values() if t["resources"].get("GPU", 0) > 0]
    assert gpu and all(t["resources"].get("scorer", 0) > 0 for t in gpu)
    sims = [t for t in types.values() if t["resources"].get("sim", 0) > 0]
    assert sims and all(t["resources"].get("GPU", 0) == 0 for t in sims)
    assert any("pip install" in c and "groundplan" in c for c in cfg["setup_commands"])


def test_rayjob_runs_groundplan_eval_with_gpu_scorer():
    job = yaml.safe_load((CLUSTER / "rayjob.yaml").read_text())
    assert job["kind"] == "RayJob" and job["apiVersion"].startswith("ray.io/")
    entry = job["spec"]["entrypoint"]
    assert entry.startswith("groundplan eval configs/") and "--address" in entry and "--local" not in entry
    assert (Path(__file__).resolve().parents[1] / entry.split()[2]).exists()
    assert "--scorer-resource scorer=1" in entry and "--worker-resource sim=1" in entry
    from groundplan.cli import build_parser

    args = build_parser().parse_args(entry.split()[1:])  # the entrypoint is a valid CLI call
    assert args.address == "auto" and not args.local
    groups = {g["groupName"]: g for g in job["spec"]["rayClusterSpec"]["workerGroupSpecs"]}
    gpu = groups["gpu-scorer"]
    assert gpu["rayStartParams"]["num-gpus"] == "1" and "scorer" in gpu["rayStartParams"]["resources"]
    limits = gpu["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits.get("nvidia.com/gpu") == "1"
    assert "sim" in groups["cpu-sim"]["rayStartParams"]["resources"]


def test_readme_explains_job_submission_placement_and_scaling():
    text = (CLUSTER / "README.md").read_text()
    for needle in ("ray job submit", "--scorer-gpus", "scorer", "sim", "--workers", "RAY_ADDRESS"):
        assert needle in text


def test_rayjob_entrypoint_sets_the_runtime_it_proposes():
    import shlex

    from groundplan.cli import build_parser, runtime_overrides
    from groundplan.config import load_config

    job = yaml.safe_load((CLUSTER / "rayjob.yaml").read_text())
    argv = shlex.split(job["spec"]["entrypoint"])[1:]  # after "groundplan"
    args = build_parser().parse_args(argv)
    rt = load_config(CLUSTER.parent / args.config, runtime_overrides(args)).runtime
    assert rt.scorer_gpus == 1 and rt.scorer_resources == {"scorer": 1.0}
    assert rt.worker_resources == {"sim": 1.0} and rt.address == "auto" and rt.workers == 32
