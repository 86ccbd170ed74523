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


def test_rayjob_entrypoint_parses_with_the_proposed_ray_flags():
    import argparse
    import shlex

    from groundplan.pipelines.distributed import add_ray_arguments, ray_kwargs_from_args

    job = yaml.safe_load((CLUSTER / "rayjob.yaml").read_text())
    argv = shlex.split(job["spec"]["entrypoint"])[2:]  # after "groundplan eval"
    ap = argparse.ArgumentParser()
    ap.add_argument("config")
    add_ray_arguments(ap)
    kw = ray_kwargs_from_args(ap.parse_args(argv))
    assert kw["scorer_num_gpus"] == 1 and kw["scorer_resources"] == {"scorer": 1.0}
    assert kw["worker_resources"] == {"sim": 1.0} and kw["address"] == "auto" and kw["num_workers"] == 32
