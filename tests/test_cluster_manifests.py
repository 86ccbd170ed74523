"""The cluster manifests load, run `groundplan eval`, place the scorer on GPU nodes, and name only
images, extras and paths that exist in the repository (nothing is built or pulled)."""
from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = ROOT / "cluster"
DOCKERFILE = ROOT / "Dockerfile"
MANIFESTS = ("rayjob.yaml", "ray-cluster.yaml")


def _strings(node):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _strings(k)
            yield from _strings(v)
    elif isinstance(node, list):
        for v in node:
            yield from _strings(v)
    elif isinstance(node, str):
        yield node


def _images(doc) -> set[str]:
    out = set()
    if isinstance(doc, dict):
        for k, v in doc.items():
            if k in ("image", "worker_image", "head_image") and isinstance(v, str):
                out.add(v)
            else:
                out |= _images(v)
    elif isinstance(doc, list):
        for v in doc:
            out |= _images(v)
    return out


def _image_paths(text: str) -> dict[str, Path]:
    """In-image paths the Dockerfile creates (WORKDIR + COPY destinations) -> their repo sources."""
    workdir = re.search(r"^WORKDIR\s+(\S+)", text, re.M).group(1)
    out = {}
    for src, dst in re.findall(r"^COPY\s+(\S+)\s+\./?(\S*)$", text, re.M):
        out[f"{workdir}/{dst or src}".rstrip("/")] = ROOT / src
    return out


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
    assert entry.startswith("groundplan eval /app/configs/") and "--address" in entry and "--local" not in entry
    assert (ROOT / entry.split()[2].removeprefix("/app/")).exists()
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

    from groundplan.cli import apply_eval_flags, build_parser
    from groundplan.config import load_config

    job = yaml.safe_load((CLUSTER / "rayjob.yaml").read_text())
    argv = shlex.split(job["spec"]["entrypoint"])[1:]  # after "groundplan"
    args = build_parser().parse_args(argv)
    config = CLUSTER.parent / Path(args.config).relative_to("/app")  # the image copies the repo to /app
    rt = apply_eval_flags(load_config(config), args).runtime
    assert rt.scorer_gpus == 1 and rt.scorer_resources == {"scorer": 1.0}
    assert rt.worker_resources == {"sim": 1.0} and rt.address == "auto" and rt.workers == 32


def test_every_image_the_manifests_name_is_built_by_the_dockerfile():
    text = DOCKERFILE.read_text()
    images = set()
    for name in MANIFESTS:
        images |= _images(yaml.safe_load((CLUSTER / name).read_text()))
    assert images >= {"ghcr.io/groundplan/groundplan:latest", "ghcr.io/groundplan/groundplan:latest-gpu"}
    for image in images:
        build = next((line for line in text.splitlines() if f"-t {image} " in line + " "), None)
        assert build is not None, f"{image} is not built by the Dockerfile"
        assert ("VARIANT=gpu" in build) == image.endswith("-gpu"), build
    # both variants have a base stage, and the default is the CPU one
    assert re.search(r"^ARG VARIANT=cpu$", text, re.M)
    assert {"base-cpu", "base-gpu"} <= set(re.findall(r" AS (base-\w+)", text)) and "FROM base-${VARIANT}" in text


def test_every_extra_the_manifests_and_dockerfile_name_is_declared():
    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    assert "virtualhome" in extras
    texts = [DOCKERFILE.read_text()] + [(CLUSTER / n).read_text() for n in MANIFESTS]
    named = {e.strip() for t in texts for group in re.findall(r"(?:groundplan|\.|/app)\[([\w,\- ]+)\]", t)
             for e in group.split(",")}
    assert named, "no extras found: the pattern is wrong"
    assert named <= extras, f"extras not in pyproject: {named - extras}"
    # the reason for --no-deps is kept with the install notes the README links (docs/install.md)
    assert "--no-deps" in DOCKERFILE.read_text() and "downgrade Pillow" in (ROOT / "docs" / "install.md").read_text()
    assert "docs/install.md" in (ROOT / "README.md").read_text()


def test_every_repo_path_the_manifests_and_dockerfile_name_exists():
    text = DOCKERFILE.read_text()
    in_image = _image_paths(text)
    assert in_image and all(src.exists() for src in in_image.values()), in_image
    cluster = yaml.safe_load((CLUSTER / "ray-cluster.yaml").read_text())
    for dst, src in cluster["file_mounts"].items():
        if src.startswith("~"):  # the launching machine's own file (the Ray token), never in the repository
            continue
        assert (CLUSTER.parent / src).exists() or (ROOT / src).exists(), src
    for name in MANIFESTS:
        for s in _strings(yaml.safe_load((CLUSTER / name).read_text())):
            for token in shlex.split(s) if "groundplan eval" in s else []:
                if token.endswith((".yaml", ".yml")):
                    repo = in_image.get(str(Path(token).parent), None)
                    path = (repo / Path(token).name) if repo else ROOT / token
                    assert path.exists(), f"{name}: {token}"
            assert "github.com" not in s, f"{name} fetches code from outside the image: {s}"


def test_both_manifests_start_ray_with_token_authentication():
    """Ray 2.60 clients send the token only in token mode, and a worker node does not turn it on by itself."""
    cfg = yaml.safe_load((CLUSTER / "ray-cluster.yaml").read_text())
    for key in ("head_start_ray_commands", "worker_start_ray_commands"):
        starts = [c for c in cfg[key] if "ray start" in c]
        assert starts and all("RAY_AUTH_MODE=token" in c for c in starts), key
    assert any(dst.endswith(".ray/auth_token") for dst in cfg["file_mounts"])
    job = yaml.safe_load((CLUSTER / "rayjob.yaml").read_text())
    assert job["spec"]["rayClusterSpec"]["authOptions"] == {"mode": "token"}
