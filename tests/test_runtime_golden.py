"""Restructuring guard for the runtime: collection (in this process and on a Ray pool of episode workers)
and point-goal rollouts give exactly the rows and stats recorded before the restructure
(``tests/golden/expected_collect_babyai.json``, ``expected_pointnav_rollouts.json``, written by
``tests/golden/runtime.py``). No field is volatile, so every decision, step and number is compared as is."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "golden"))
from runtime import COLLECT, ROLLOUTS, collect_records, rollout_records  # noqa: E402

pytest.importorskip("minigrid")


@pytest.mark.parametrize("executor, envs_per_worker", [("local", 1), ("ray", 1), ("ray", 2)])
def test_collection_gives_the_recorded_rows(executor, envs_per_worker, tmp_path, request):
    """In this process, on Ray workers with one env each, and on Ray workers that play two trajectories at
    a time on two envs each (``runtime.envs_per_worker``, as a sweep's workers do)."""
    if executor == "ray":
        request.getfixturevalue("ray_local")
    want = json.loads(COLLECT.read_text())
    got = collect_records(str(tmp_path / executor), executor, envs_per_worker)
    assert [r["traj_id"] for r in got] == [r["traj_id"] for r in want]
    for g, w in zip(got, want):
        # the recording predates the optional listed_feasible column, which a collection without label_listed
        # leaves null: every recorded column is equal, and the new one is empty
        assert g.pop("listed_feasible", None) is None, g["traj_id"]
        assert g == w, g["traj_id"]


def test_point_goal_rollouts_give_the_recorded_rows_and_stats(ray_local):
    want = json.loads(ROLLOUTS.read_text())
    got = json.loads(json.dumps(rollout_records()))  # tuples and numpy floats as the recording stored them
    assert got["expert"] == want["expert"] and got["astar"] == want["astar"]
    assert got["rows"] == want["rows"]
