"""Multi-node, for real (a sweep must survive losing a node): a Ray cluster on this machine with
``ray.cluster_utils.Cluster`` (a head, a node with the ``scorer`` resource, two with ``sim``), driven
through ``groundplan eval --address``. The scorer lands on the scorer node, episode runners on sim nodes, and killing a sim node
mid-sweep loses no episode. The model is a fake backend, so the test is quick."""
from __future__ import annotations

import os
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

from groundplan.config import load_config
from groundplan.factory import make_env
from groundplan.pipelines.sweep import expand
from groundplan.rollout.traces import read_traces

ray = pytest.importorskip("ray")
ROOT = str(Path(__file__).resolve().parents[1])


def _actor_nodes(class_name: str) -> dict[str, str]:
    """actor id -> node id of the live actors of ``class_name`` (from the GCS actor table)."""
    from ray._private import state

    return {aid: info["Address"]["NodeID"] for aid, info in state.actors().items()
            if info.get("ActorClassName", "").endswith(class_name) and info.get("State") == "ALIVE"}


@pytest.fixture
def cluster(monkeypatch):
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    # every node's workers import groundplan, tests.fakes and the fake backend from this checkout
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in [ROOT, os.environ.get("PYTHONPATH", "")] if p))
    monkeypatch.setenv("GROUNDPLAN_PLUGINS", "tests.fake_backend")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    nodes = {
        "scorer": c.add_node(num_cpus=1, resources={"scorer": 1}),
        "sim_a": c.add_node(num_cpus=2, resources={"sim": 4}),
        "sim_b": c.add_node(num_cpus=2, resources={"sim": 4}),
    }
    c.wait_for_nodes()
    yield c, nodes
    if ray.is_initialized():
        ray.shutdown()
    c.shutdown()


def test_eval_on_a_cluster_places_actors_and_survives_a_lost_sim_node(cluster, tmp_path):
    import tests.fake_backend  # noqa: F401 -- the driver validates the backend name too
    from groundplan.cli import main

    c, nodes = cluster
    cfg_path = tmp_path / "multinode.yaml"
    cfg_path.write_text(yaml.safe_dump({
        "name": "multinode",
        "llm": {"backend": "fake_slow", "model": "fake"},
        "planners": [{"name": "saycan", "label": "SayCan", "affordance": "kitchen_value"},
                     {"name": "saycan_novf", "label": "No-VF"}],
        "tasks": {"families": ["nl_single_primitive", "nl_nouns"], "per_family": 3},
        "seeds": [0, 1],
        "max_steps": 6,
        "output_dir": str(tmp_path / "out"),
    }))
    cfg = load_config(str(cfg_path))
    traces = cfg.run_dir / "traces.jsonl"
    seen: dict[str, dict[str, str]] = {"scorer": {}, "sim": {}}
    killed: list[str] = []

    def watch() -> None:
        """Record placements while the sweep runs; after the first episodes, kill a sim node that
        hosts episode runners (no graceful shutdown: a crash)."""
        deadline = time.time() + 300
        while time.time() < deadline and not killed:
            time.sleep(0.2)
            if not ray.is_initialized():
                continue
            try:
                seen["scorer"].update(_actor_nodes("LLMScorer"))
                sims = _actor_nodes("RunnerActor")
            except Exception:
                continue
            seen["sim"].update(sims)
            done = sum(1 for _ in traces.open()) if traces.exists() else 0
            if done >= 2 and sims:
                victim = Counter(sims.values()).most_common(1)[0][0]
                name = next(k for k, n in nodes.items() if n.node_id == victim)
                c.remove_node(nodes[name], allow_graceful=False)
                killed.append(name)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    rc = main(["eval", str(cfg_path), "--address", c.address, "--workers", "4", "--scorer-resource", "scorer=1",
               "--worker-resource", "sim=1", "--no-mlflow", "--no-progress", "--fresh"])
    watcher.join(timeout=10)
    assert rc == 0
    assert killed and killed[0].startswith("sim"), "the sweep ended before a sim node could be killed"

    sim_nodes = {nodes["sim_a"].node_id, nodes["sim_b"].node_id}
    assert set(seen["scorer"].values()) == {nodes["scorer"].node_id}
    assert seen["sim"] and set(seen["sim"].values()) <= sim_nodes

    wanted = sorted(s.episode_id for s in expand(cfg, make_env(cfg.env)))
    ids = Counter(t.episode_id for t in read_traces(traces))
    assert sorted(ids) == wanted and set(ids.values()) == {1}  # every episode, exactly once
    assert [t.error for t in read_traces(traces) if t.error] == []
