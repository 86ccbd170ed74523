"""THOR adapter against fixtures of THOR's documented metadata (objects, agent pose, reachable
positions, ProcTHOR house JSON); the live test skips cleanly without ai2thor and a build."""
from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from groundplan.core.errors import MissingDependencyError
from groundplan.envs.house.layout import FREE
from groundplan.envs.house.thor import (
    ThorHouseEnv,
    agent_pose,
    detections,
    doors,
    grid_from_reachable,
    room_bounds,
)
from groundplan.planners import PLANNERS
from groundplan.rollout.episode import run_episode

FIX = json.loads((Path(__file__).parent / "fixtures" / "procthor_house.json").read_text())


class FixtureController:
    """Answers THOR actions from the fixture: Teleport/Rotate change the pose; objects within 4 m are visible."""

    def __init__(self, fix):
        self.fix = fix
        self.agent = copy.deepcopy(fix["agent"])
        self.last_event = self._event()

    def _event(self, ret=None, ok=True):
        a = self.agent["position"]
        objs = []
        for o in self.fix["objects"]:
            d = math.hypot(o["position"]["x"] - a["x"], o["position"]["z"] - a["z"])
            same_side = (o["position"]["x"] < 3) == (a["x"] < 3) or abs(a["x"] - 3) < 0.6
            objs.append({**o, "distance": d, "visible": d < 4.0 and same_side})
        return SimpleNamespace(metadata={"objects": objs, "agent": copy.deepcopy(self.agent), "actionReturn": ret,
                                         "lastActionSuccess": ok})

    def step(self, action, **kw):
        if action == "GetReachablePositions":
            self.last_event = self._event(self.fix["reachable"])
        elif action == "Teleport":
            self.agent["position"].update(kw["position"])
            self.last_event = self._event()
        elif action in ("RotateRight", "RotateLeft"):
            sign = 1 if action == "RotateRight" else -1
            self.agent["rotation"]["y"] = (self.agent["rotation"]["y"] + sign * kw.get("degrees", 30)) % 360
            self.last_event = self._event()
        else:
            self.last_event = self._event()
        return self.last_event


def test_metadata_conversions():
    rooms = room_bounds(FIX["house"])
    assert rooms["room|2"] == ("Kitchen", (0, 0, 3, 3))
    (door,) = doors(FIX["house"])
    assert door["rooms"] == ("room|2", "room|3") and door["position"] == pytest.approx((3.0, 1.5))
    ctrl = FixtureController(FIX)
    dets = detections(ctrl.last_event.metadata)
    kinds = {d["category"]: d["kind"] for d in dets}
    assert kinds == {"CounterTop": "large", "Apple": "small"}
    assert agent_pose(ctrl.last_event.metadata) == (0.5, 0.5, 0.0)  # THOR yaw 90 (+x) is our heading 0
    house, x0, z0 = grid_from_reachable(FIX["reachable"], rooms)
    assert house.free(int((0.25 - x0) // 0.25), int((0.25 - z0) // 0.25))
    assert not house.free(int((3.0 - x0) // 0.25), int((0.5 - z0) // 0.25))  # the wall between the rooms


def test_saynav_explore_runs_on_thor_fixture():
    env = ThorHouseEnv(houses=[FIX], controller=FixtureController(FIX))
    planner = PLANNERS.get("house_explore")()
    trace = run_episode(planner, env, env.tasks()[0], seed=0)
    assert trace.error is None
    assert trace.metrics["targets_found"] > 0 and trace.metrics["path_m"] > 0


def test_documented_event_metadata_becomes_detections_and_pose():
    """One ``event.metadata`` with every documented field: only visible objects within 6 m are detected,
    doorways are doors, landmarks are large (catalog furniture and THOR's extra types), the rest small."""
    meta = json.loads((Path(__file__).parent / "fixtures" / "thor_event_metadata.json").read_text())["metadata"]
    assert detections(meta) == [
        {"kind": "small", "category": "Apple", "position": [1.2, 0.4], "distance": 0.6,
         "obj_id": "Apple|surface|2|7", "room_id": None},
        {"kind": "large", "category": "CounterTop", "position": [1.0, 0.3], "distance": 0.75,
         "obj_id": "CounterTop|2|0", "room_id": None},
        {"kind": "large", "category": "Floor", "position": [3.0, 1.5], "distance": 1.1, "obj_id": "Floor|0|0",
         "room_id": None},
        {"kind": "door", "category": "Doorway", "position": [3.0, 1.5], "distance": 1.9, "obj_id": "door|2|3",
         "room_id": None},
        {"kind": "large", "category": "Bed", "position": [5.0, 2.0], "distance": 3.9, "obj_id": "Bed|3|1",
         "room_id": None},
    ]  # Pillow|3|4 is not visible; Television|3|2 is visible but 6.2 m away
    assert [d["obj_id"] for d in detections(meta, max_distance=10.0)][-1] == "Television|3|2"
    assert agent_pose(meta) == (1.25, 1.0, 270.0)  # THOR yaw 180 (facing -z) is our heading 270


def test_live_thor_runs_the_fixture_house():
    """The same adapter on a live THOR controller. It needs the ai2thor package (``pip install
    'groundplan[thor]'``) and a THOR build that starts here (ai2thor downloads it on first use and needs
    an X display or CloudRendering); without either it skips, saying which is missing."""
    try:
        import ai2thor  # noqa: F401
    except ImportError:
        pytest.skip("needs the ai2thor package (pip install 'groundplan[thor]') and a THOR build")
    env = ThorHouseEnv(houses=[FIX])
    try:
        obs = env.reset(env.tasks()[0], 0)
    except MissingDependencyError as e:
        pytest.skip(f"needs a THOR build that starts on this machine (downloaded by ai2thor, X display or "
                    f"CloudRendering): {e}")
    reachable = env.ctrl.step(action="GetReachablePositions").metadata["actionReturn"]
    assert int((env.grid.grid == FREE).sum()) == len(reachable) > 0  # one free cell per reachable position
    assert tuple(obs.state["pose"]) == agent_pose(env.ctrl.last_event.metadata)
    trace = run_episode(PLANNERS.get("house_explore")(), env, env.tasks()[0], seed=0)
    assert trace.error is None and trace.metrics["path_m"] > 0
