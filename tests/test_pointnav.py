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
    from groundplan.pipelines.train.pointnav_config import PointNavTrainConfig

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
    # small: the fixed costs (Ray, RLlib's algorithm and Ray Data's pipeline per round, a rollout actor per
    # evaluation) dominate; the untrained policy's episodes end at max_episode_steps (the expert needs ~16)
    cfg_path.write_text("kind: pointnav\nname: pointnav-test\nexpert_episodes: 30\ndagger_rounds: 1\n"
                        "dagger_episodes: 10\niterations: 2\neval_episodes: 6\nmax_goal_m: 5.0\n"
                        f"max_episode_steps: 60\nnum_env_workers: 1\noutput_dir: {out}\n")
    assert main(["train", str(cfg_path), "--no-progress"]) == 0
    uri = default_tracking_uri(out)
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    version = client.get_model_version("pointnav-test", "1")
    run = client.get_run(version.run_id)
    m = run.data.metrics
    assert m["best.val_n"] == 6 and m["test_n"] == 6 and m["astar_n"] == 6
    assert 0 <= m["test_sr_lo"] <= m["test_sr"] <= m["test_sr_hi"] <= 1
    assert m["astar_sr"] > 0.9  # the map's A* reaches held-out goals
    rows = [h.value for h in client.get_metric_history(run.info.run_id, "rows")]
    assert len(rows) == 2 and rows[1] > rows[0]  # the DAgger round added expert-labelled states
    env = HouseEnv(houses_per_split=1, splits=("test",), navigator="learned", navigator_model="models:/pointnav-test/1",
                   navigator_tracking_uri=uri, max_sim_steps=200)
    assert env.navigator.success_radius == 0.5
    env.reset(env.tasks()[0], seed=0)
    gx, gz = _free_goal_in_view(env, 0.5)
    step = env.execute(f"navigate to ({gx:.2f}, {gz:.2f})")
    assert step.observation.state["sim_steps"] > 0  # the policy acted in the simulator
    assert step.feedback == _expected_feedback(env, (gx, gz), success_radius=0.5), step.feedback
    assert step.success == step.feedback.startswith("reached")


def _free_goal_in_view(env, dist_m: float) -> tuple[float, float]:
    """The centre of a walkable cell ``dist_m`` from the agent along one of its depth-scan rays, with free
    floor beyond it: a goal the navigator keeps as it is (its cell is free, and the first scan shows it)."""
    from groundplan.envs.house.gym_env import N_RAYS, ray_ranges
    from groundplan.envs.house.layout import CELL

    a = env.sim.agent
    ranges = ray_ranges(env.sim.house, a.x, a.z, a.heading)
    k = next(k for k, r in enumerate(ranges) if r >= dist_m + 2 * CELL)
    ang = np.radians(a.heading + 360.0 / N_RAYS * k)
    i, j = int((a.x + dist_m * np.cos(ang)) // CELL), int((a.z + dist_m * np.sin(ang)) // CELL)
    return (i + 0.5) * CELL, (j + 0.5) * CELL


def _expected_feedback(env, goal: tuple[float, float], success_radius: float) -> str:
    """What the house env must say after a learned ``navigate to`` a free goal in view ended where its
    simulator now is: the policy acts until it stops, one simulator step per action, so it ran out of
    steps, or stopped within the radius (reached), or stopped this far from the goal."""
    sim, where = env.sim, f"({goal[0]:.2f}, {goal[1]:.2f})"
    d = float(np.hypot(goal[0] - sim.agent.x, goal[1] - sim.agent.z))
    if sim.out_of_steps:
        return f"could not reach {where}: step limit reached"
    if d <= success_radius:
        return f"reached {where}"
    return f"could not reach {where}: stopped {d:.2f} m from the goal"


class ScriptedPolicy:
    """An RLModule stand-in whose greedy action follows a script (its last action repeats), so each way
    a learned ``navigate to`` ends can be reached on purpose."""

    def __init__(self, actions: list[int]) -> None:
        self.actions, self.k = actions, 0

    def forward_inference(self, batch):
        import torch

        action = self.actions[min(self.k, len(self.actions) - 1)]
        self.k += 1
        return {"action_dist_inputs": torch.nn.functional.one_hot(torch.tensor([action]), 4).float() * 10}


@pytest.mark.parametrize("script, goal_m, max_sim_steps, max_policy_steps, want", [
    ([STOP], 0.0, 1500, 400, "reached"),
    ([STOP], 1.5, 1500, 400, "stopped {d:.2f} m from the goal"),
    ([1], 1.5, 1500, 7, "no stop within 7 policy steps"),
    ([1], 1.5, 10, 400, "step limit reached"),
])
def test_learned_navigator_says_how_it_ended(monkeypatch, script, goal_m, max_sim_steps, max_policy_steps, want):
    """Each way the learned navigator ends has its own message, and the house env passes it on."""
    import groundplan.envs.house.learned_nav as learned_nav
    from groundplan.envs.house.env import HouseEnv

    monkeypatch.setattr(learned_nav, "load_policy", lambda uri, tracking_uri=None: (ScriptedPolicy(script),
                                                                                      {"success_radius": 0.5}))
    env = HouseEnv(houses_per_split=1, splits=("val",), navigator="learned", navigator_model="scripted",
                   max_sim_steps=max_sim_steps)
    env.navigator.max_policy_steps = max_policy_steps
    env.reset(env.tasks()[0], seed=0)
    gx, gz = _free_goal_in_view(env, goal_m)
    step = env.execute(f"navigate to ({gx:.2f}, {gz:.2f})")
    where = f"({gx:.2f}, {gz:.2f})"
    d = float(np.hypot(gx - env.sim.agent.x, gz - env.sim.agent.z))
    if want == "reached":
        assert step.success and step.feedback == f"reached {where}"
    else:
        assert not step.success and step.feedback == f"could not reach {where}: " + want.format(d=d)
        assert want != "stopped {d:.2f} m from the goal" or d > 0.5
    if not want.startswith("no stop"):  # the end-to-end test's reading of the simulator agrees
        assert step.feedback == _expected_feedback(env, (gx, gz), 0.5)
