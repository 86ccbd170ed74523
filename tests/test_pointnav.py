"""SayNav's point-goal navigation: the shortest-path expert, the RLlib BC/DAgger trainer end to end
(registered in MLflow) and the house env's learned navigator loading it by URI."""
from __future__ import annotations

import numpy as np
import pytest

from groundplan.core.errors import InvalidInputError, MissingModelError
from groundplan.envs.house.gym_env import (
    OBS_DIM,
    STOP,
    HousePointNavEnv,
    pointnav_features,
)


def test_expert_reaches_held_out_goals_near_the_shortest_path():
    env = HousePointNavEnv(seeds=(100000, 100100))
    succ, spl = [], []
    for ep in range(15):
        _, info = env.reset(seed=ep)
        while True:
            _, _, term, trunc, step = env.step(env.expert())
            if term or trunc:
                break
        succ.append(step["success"])
        spl.append(step["success"] * info["shortest_m"] / max(step["path_m"], info["shortest_m"]))
    assert all(succ)
    assert np.mean(spl) > 0.8


def test_features_and_goal_sampling():
    env = HousePointNavEnv(seeds=(0, 10), max_goal_m=4.0, min_goal_m=1.0)
    for ep in range(5):
        obs, info = env.reset(seed=ep)
        assert obs.shape == (OBS_DIM,) and env.observation_space.contains(obs)
        assert 1.0 - 0.5 <= env._geo() <= 4.0  # geodesic start-goal distance within the configured band
    a = env.sim.agent
    f = pointnav_features(env.house, a.x, a.z, a.heading, env.goal, STOP)
    assert f[-1] == 1.0 and abs(f[1] ** 2 + f[2] ** 2 - 1) < 1e-5


def test_config_validation():
    from groundplan.envs.house.env import HouseEnv
    from groundplan.pipelines.pointnav_config import PointNavTrainConfig

    with pytest.raises(ValueError, match="overlap"):
        PointNavTrainConfig(kind="pointnav", train_seeds=(0, 10), eval_seeds=(5, 20))
    with pytest.raises(InvalidInputError, match="navigator_model"):
        HouseEnv(navigator="learned")
    with pytest.raises(MissingModelError):
        HouseEnv(navigator="learned", navigator_model="/no/such/folder")


def test_train_registers_a_policy_the_house_env_navigates_with(tmp_path):
    """`groundplan train` on a pointnav config: expert data, RLlib BC, one DAgger round, held-out scores in
    MLflow, the registry; then the house env loads `models:/pointnav-test/1` and executes navigate skills."""
    from mlflow.tracking import MlflowClient

    from groundplan.cli import main
    from groundplan.envs.house.env import HouseEnv
    from groundplan.pipelines.tracking import default_tracking_uri

    out = tmp_path / "out"
    cfg_path = tmp_path / "pn.yaml"
    cfg_path.write_text("kind: pointnav\nname: pointnav-test\nexpert_episodes: 60\ndagger_rounds: 1\n"
                        "dagger_episodes: 20\niterations: 15\neval_episodes: 12\nmax_goal_m: 5.0\n"
                        f"output_dir: {out}\n")
    assert main(["train", str(cfg_path), "--no-progress"]) == 0
    uri = default_tracking_uri(out)
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    version = client.get_model_version("pointnav-test", "1")
    run = client.get_run(version.run_id)
    m = run.data.metrics
    assert m["best.val_n"] == 12 and m["test_n"] == 12 and m["astar_n"] == 12
    assert 0 <= m["test_sr_lo"] <= m["test_sr"] <= m["test_sr_hi"] <= 1
    assert m["astar_sr"] > 0.9  # the map's A* reaches held-out goals
    rows = [h.value for h in client.get_metric_history(run.info.run_id, "rows")]
    assert len(rows) == 2 and rows[1] > rows[0]  # the DAgger round added expert-labelled states
    env = HouseEnv(houses_per_split=1, splits=("test",), navigator="learned", navigator_model="models:/pointnav-test/1",
                   navigator_tracking_uri=uri, max_sim_steps=200)
    assert env.navigator.success_radius == 0.5
    obs = env.reset(env.tasks()[0], seed=0)
    x, z = obs.state["pose"][:2]
    step = env.execute(f"navigate to ({x + 0.5:.2f}, {z:.2f})")
    assert step.observation.state["sim_steps"] > 0  # the policy acted in the simulator
    assert step.success or any(w in step.feedback for w in ("stopped", "policy steps", "limit"))
