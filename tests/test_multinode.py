"""Multi-node, for real (a sweep must survive losing a node): a Ray cluster on this machine with
``ray.cluster_utils.Cluster`` (real raylets: a head with no custom resources, a node with the ``scorer``
resource, two with ``sim``), driven through ``groundplan eval --address --scorer-resource scorer=1
--worker-resource sim=1``. Placement is read from Ray's state (the GCS actor table, which is what
``ray.util.state`` serves when a dashboard runs; each actor's node matched against ``ray.nodes()``
resources), not inferred from timing:
the scorer lands only on the scorer node, episode runners only on sim nodes. A whole sim node removed
mid-sweep loses nothing: every episode is recorded exactly once, without error, with the same results as
a clean run of the same episodes in one process.

The CI form uses a fake backend (``tests/fake_backend.py``), so the cluster's start-up is most of its cost;
the slow form runs the real embedded model on the scorer node.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

from groundplan.config import load_config
from groundplan.factory import make_env
from groundplan.pipelines.evaluate.sweep import expand, run_sweep
from groundplan.rollout.traces import read_traces

ray = pytest.importorskip("ray")
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def cluster(monkeypatch):
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    # every node's workers import groundplan, tests.fakes and the fake backend from this checkout
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in [str(ROOT), os.environ.get("PYTHONPATH", "")] if p))
    monkeypatch.setenv("GROUNDPLAN_PLUGINS", "tests.fake_backend")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    # the head takes no actors (no CPUs); no dashboard: the actor table is read from the GCS directly (a
    # dashboard is seconds of start-up on 2 cores, and one that came up late left the test without its check)
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


class Watcher(threading.Thread):
    """Records, while the sweep runs, where its actors live (Ray's actor table) and every node's resources
    (``ray.nodes()``); once ``remove_after`` episodes are recorded, removes the sim node that hosts the
    most episode runners, without a graceful shutdown (a crashed machine)."""

    def __init__(self, chaos, c, nodes, traces: Path, remove_after: int) -> None:
        super().__init__(daemon=True)
        self.chaos, self.c, self.nodes, self.traces, self.remove_after = chaos, c, nodes, traces, remove_after
        self.placed: dict[str, dict[str, str]] = {"LLMScorer": {}, "EpisodeWorker": {}}  # class -> actor -> node
        self.resources: dict[str, dict[str, float]] = {}
        self.removed: list[str] = []
        self.recorded_at_removal = -1
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            time.sleep(0.2)
            if not ray.is_initialized():
                continue
            try:
                self.resources.update({n["NodeID"]: n["Resources"] for n in ray.nodes() if n["Alive"]})
                rows = [r for r in self.chaos.list_actor_records() if r.state == "ALIVE"]
            except Exception:  # the driver is connecting or disconnecting
                continue
            for r in rows:
                for cls, placed in self.placed.items():
                    if r.class_name.endswith(cls):
                        placed[r.actor_id] = r.node_id
            runners = [r.node_id for r in rows if r.class_name.endswith("EpisodeWorker")]
            done = self.chaos.recorded_episodes(self.traces)
            if not self.removed and done >= self.remove_after and runners:
                victim = Counter(runners).most_common(1)[0][0]
                name = next(k for k, n in self.nodes.items() if n.node_id == victim)
                self.c.remove_node(self.nodes[name], allow_graceful=False)
                self.removed.append(name)
                self.recorded_at_removal = done


CI_SWEEP = {  # 2 families x 3 tasks x 2 seeds x 2 planners = 24 episodes on the fake backend
    "name": "multinode",
    "llm": {"backend": "fake_slow", "model": "fake"},
    "planners": [{"name": "saycan", "label": "SayCan", "affordance": "kitchen_value"},
                 {"name": "saycan_novf", "label": "No-VF"}],
    "tasks": {"families": ["nl_single_primitive", "nl_nouns"], "per_family": 3},
    "seeds": [0, 1],
    "max_steps": 6,
}


@pytest.mark.parametrize("form", ["fake", pytest.param("real", marks=pytest.mark.slow)])
def test_eval_on_a_cluster_places_actors_by_resource_and_survives_a_lost_sim_node(form, chaos, cluster, tmp_path,
                                                                                  caplog):
    import tests.fake_backend  # noqa: F401 -- the driver validates the backend name too
    from groundplan.cli import main

    c, nodes = cluster
    if form == "fake":
        cfg_path = tmp_path / "multinode.yaml"
        cfg_path.write_text(yaml.safe_dump({**CI_SWEEP, "output_dir": str(tmp_path / "out")}))
        sets: list[str] = []
    else:  # the real embedded model: the seven families' first instruction x (SayCan, No-VF), 4 steps at most
        cfg_path = ROOT / "configs" / "saycan_kitchen.yaml"
        sets = [*chaos.sweep_overrides(per_family=1, seeds=[0], max_steps=4, workers=4, scorer_threads=1),
                f"output_dir={tmp_path / 'out'}"]
    cfg = load_config(str(cfg_path), sets)
    traces = cfg.run_dir / "traces.jsonl"
    wanted = [s.episode_id for s in expand(cfg, make_env(cfg.env))]

    watcher = Watcher(chaos, c, nodes, traces, remove_after=2)
    watcher.start()
    caplog.set_level(logging.WARNING, logger="groundplan.pipelines.evaluate.executors")
    try:
        rc = main(["eval", str(cfg_path), *[a for s in sets for a in ("--set", s)], "--address", c.address,
                   "--workers", "4", "--scorer-resource", "scorer=1", "--worker-resource", "sim=1", "--no-mlflow",
                   "--no-progress", "--fresh"])
    finally:
        watcher.done.set()
        watcher.join()
    assert rc == 0

    # placement: every actor's node, by the resources Ray reports for it
    scorer_nodes = set(watcher.placed["LLMScorer"].values())
    runner_nodes = set(watcher.placed["EpisodeWorker"].values())
    res = watcher.resources
    assert scorer_nodes and all(res[n].get("scorer", 0) >= 1 and "sim" not in res[n] for n in scorer_nodes), res
    assert runner_nodes and all(res[n].get("sim", 0) >= 1 and "scorer" not in res[n] for n in runner_nodes), res
    assert scorer_nodes == {nodes["scorer"].node_id}
    assert runner_nodes <= {nodes["sim_a"].node_id, nodes["sim_b"].node_id}

    # a sim node went away mid-sweep, with episodes in flight on it
    assert watcher.removed and watcher.removed[0].startswith("sim"), "the sweep ended before a sim node was removed"
    assert 2 <= watcher.recorded_at_removal < len(wanted)
    assert any("attempt 1 of" in r.getMessage() for r in caplog.records), "no episode was rerun after the node loss"
    survivor = ({"sim_a", "sim_b"} - set(watcher.removed)).pop()
    assert nodes[survivor].node_id in runner_nodes  # replacement runners went to the other sim node

    # and lost nothing: every episode once, no error, the results of a clean in-process run
    assert chaos.exactly_once(traces, wanted) == []
    got = list(read_traces(traces))
    assert [t.error for t in got if t.error] == []
    clean_cfg = load_config(str(cfg_path), [*sets, f"output_dir={tmp_path / 'clean'}", "runtime.executor=local",
                                            "runtime.mlflow=false"])
    clean = run_sweep(clean_cfg, progress=False, resume=False)
    assert chaos.compare_traces(clean.traces, got) == []
