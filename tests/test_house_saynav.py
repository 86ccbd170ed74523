"""House env, scene graph, SayNav parsing and a tiny sweep through the sweep driver with a fake LM."""
from __future__ import annotations

import math

import numpy as np
import pytest
from fakes import FakeLM

from groundplan.config import EvalConfig
from groundplan.core.errors import InvalidInputError
from groundplan.core.measures import spl
from groundplan.core.stats import wilson_interval
from groundplan.envs.house.env import HouseEnv, parse_targets
from groundplan.envs.house.layout import generate_house
from groundplan.envs.house.metrics import kendall_tau, kendall_tau_b
from groundplan.perception.scene_graph import SceneGraph
from groundplan.planners import PLANNERS
from groundplan.planners.saynav import parse_plan
from groundplan.rollout.episode import run_episode


def test_houses_are_seeded_and_connected():
    a, b = generate_house(5), generate_house(5)
    assert np.array_equal(a.grid, b.grid) and [o.category for o in a.objects] == [o.category for o in b.objects]
    assert not np.array_equal(a.grid, generate_house(6).grid)  # another seed, another house
    for seed in range(20):
        h = generate_house(seed)
        assert 3 <= len(h.rooms) <= 10
        assert len(h.doors) >= len(h.rooms) - 1
        assert any(not o.large for o in h.objects) and any(o.large for o in h.objects)


def test_env_episode_oracle_succeeds_and_measures():
    env = HouseEnv(houses_per_split=3, splits=("val",))
    tasks = env.tasks()
    assert [t.task_id for t in tasks] == [t.task_id for t in HouseEnv(houses_per_split=3, splits=("val",)).tasks()]
    oracle = PLANNERS.get("house_oracle")()
    trace = run_episode(oracle, env, tasks[0], seed=0)
    assert trace.error is None and trace.execution_success
    m = trace.metrics
    assert m["sr"] == 1.0 and 0 < m["spl"] <= 1 and m["path_m"] >= m["shortest_m"] - 1e-6
    assert -1 <= m["kendall_tau"] <= 1
    assert env.render().shape[2] == 3


def test_env_tau_treats_targets_seen_at_the_same_step_as_ties():
    """The found order comes from the step each target was first seen at; equal steps are ties (tau-b),
    not an order made up from object ids."""
    env = HouseEnv(houses_per_split=3, splits=("val",))
    task = env.tasks()[0]
    trace = run_episode(PLANNERS.get("house_oracle")(), env, task, seed=0)
    assert trace.execution_success
    optimal = env.shortest(task, env.sim.agent.path[0]).order
    ids = {o.category: o.obj_id for o in env.sim.house.objects if o.obj_id in task.goal["target_ids"]}
    first, second, third = (ids[c] for c in optimal)
    for seen, want in [({first: 3, second: 5, third: 8}, 1.0), ({first: 8, second: 5, third: 3}, -1.0),
                       ({first: 7, second: 7, third: 9}, 2 / math.sqrt(6)),
                       ({first: 9, second: 7, third: 7}, -2 / math.sqrt(6))]:
        env.sim.seen_close.update(seen)
        assert env.episode_metrics(task, trace)["kendall_tau"] == pytest.approx(want), seen
    env.sim.seen_close.update({first: 4, second: 4, third: 4})  # all three in one view: no order to compare
    metrics = env.episode_metrics(task, trace)
    assert metrics["sr"] == 1.0 and "kendall_tau" not in metrics


def test_env_refuses_unknown_skill_and_bad_options():
    env = HouseEnv(houses_per_split=1, splits=("val",))
    env.reset(env.tasks()[0], 0)
    res = env.execute("fly to the moon")
    assert not res.success and "unknown skill" in res.feedback
    with pytest.raises(InvalidInputError, match="max_rooms"):
        HouseEnv(min_rooms=8, max_rooms=4)
    with pytest.raises(InvalidInputError, match="unknown option"):
        HouseEnv(bogus=1)


def test_parse_plan_and_targets():
    steps, bad = parse_plan("Sure!\n- navigate; (3.4, 2.6); Go to table\n- look; (laptop, cup); look\n- navigate; (x); bad\n")
    assert [s.action for s in steps] == ["navigate", "look"] and steps[0].point == (3.4, 2.6)
    assert steps[1].objects == ("laptop", "cup") and bad == ["- navigate; (x); bad"]
    assert parse_targets("Find a Laptop, an Apple and a Pillow.") == ["Laptop", "Apple", "Pillow"]


def test_scene_graph_fuses_noisy_detections():
    g = SceneGraph(mode="noisy")
    state = {"room": {"id": 0, "bounds": [0, 0, 4, 4]}, "detections": [
        {"kind": "large", "category": "Bed", "position": [1.0, 1.0], "distance": 1, "obj_id": None},
        {"kind": "small", "category": "Pillow", "position": [1.2, 1.4], "distance": 1, "obj_id": None}]}
    g.update(state)
    state["detections"][0]["position"] = [1.2, 1.2]
    g.update(state)
    beds = [o for o in g.objects if o.category == "Bed"]
    assert len(beds) == 1 and beds[0].views == 2 and abs(beds[0].x - 1.1) < 1e-9
    assert g.room_text(0) == "Bed (1.10, 1.10)"
    assert ("Pillow", "near", "Bed") in g.triplets()


def test_measures():
    opt = ["a", "b", "c"]
    assert kendall_tau({"a": 1, "b": 2, "c": 3}, opt) == 1.0
    assert kendall_tau({"a": 30, "b": 20, "c": 10}, opt) == -1.0
    assert kendall_tau({"b": 1, "a": 2, "c": 3}, opt) == pytest.approx(1 / 3)  # 2 concordant, 1 discordant
    # a and b first seen at the same step: a tie, neither concordant nor discordant (tau-b), whatever
    # their object ids; 2 concordant pairs / sqrt((3 - 1) * 3)
    assert kendall_tau({"a": 5, "b": 5, "c": 9}, opt) == pytest.approx(2 / math.sqrt(6))
    assert kendall_tau({"b": 5, "a": 5, "c": 9}, opt) == pytest.approx(2 / math.sqrt(6))
    assert kendall_tau({"a": 9, "b": 5, "c": 5}, opt) == pytest.approx(-2 / math.sqrt(6))
    assert kendall_tau({"a": 1, "b": 1, "c": 2, "d": 2}, [*opt, "d"]) == pytest.approx(4 / math.sqrt(4 * 6))
    assert kendall_tau({"a": 4, "b": 4, "c": 4}, opt) is None  # all at once: no order to compare
    assert kendall_tau({"a": 4, "z": 1}, opt) is None  # one common target: no pair
    assert kendall_tau_b([1, 1, 2, 3], [1, 2, 2, 3]) == pytest.approx(4 / 5)  # ties on both sides: 4 / sqrt(5 * 5)
    with pytest.raises(ValueError):
        kendall_tau_b([1, 2], [1])
    assert spl(True, 5.0, 10.0) == 0.5 and spl(False, 5.0, 5.0) == 0.0
    lo, hi = wilson_interval(5, 10)
    assert lo < 0.5 < hi


@pytest.mark.parametrize("house", [0, 10])  # houses where nearest-viewpoint hops miss L* (too short)
def test_shortest_tour_is_the_exact_minimum_over_orders_and_viewpoints(house):
    """L* against brute force: every order, every pair of viewpoints of its first two targets (a field
    from each), then the nearest viewpoint of the last."""
    import itertools

    from groundplan.envs.house.layout import CELL
    from groundplan.envs.house.metrics import shortest_tour, viewpoints
    from groundplan.envs.house.sim import distance_field

    env = HouseEnv(houses_per_split=house + 1, splits=("test",))
    task = env.tasks()[house]
    env.reset(task, 0)
    h, start = env.sim.house, env.sim.agent.path[0]
    objs = {o.obj_id: o for o in h.objects}
    targets = [objs[t] for t in task.goal["target_ids"]]
    vps = {t.obj_id: viewpoints(h, t, 2.5) for t in targets}
    from_start = distance_field(h, [(int(start[0] // CELL), int(start[1] // CELL))])
    from_cell = {c: distance_field(h, [c]) for v in vps.values() for c in v}
    to_nearest = {t: distance_field(h, v) for t, v in vps.items()}
    by_order = {(t1.category, t2.category, t3.category): min(from_start[a] + from_cell[a][b] + to_nearest[t3.obj_id][b]
                                                             for a in vps[t1.obj_id] for b in vps[t2.obj_id])
                for t1, t2, t3 in itertools.permutations(targets)}
    tour = shortest_tour(h, start, targets)
    assert tour.length_m == pytest.approx(min(by_order.values()))
    assert by_order[tour.order] == pytest.approx(tour.length_m)  # orders may tie; its own is a shortest one


def test_malformed_plan_is_recorded_and_replanned():
    env = HouseEnv(houses_per_split=1, splits=("val",))
    lm = FakeLM(generations=["- navigate; nowhere; oops", "- navigate; (oops); again", "- look; (x); y"])
    planner = PLANNERS.get("saynav")(lm=lm, plan_mode="generate", max_replans=2, feasibility=False)
    trace = run_episode(planner, env, env.tasks()[0], seed=0)
    plans = [s.info["plan"] for s in trace.steps if "plan" in s.info]
    assert plans, "no plan was made"
    first = plans[0]
    assert first["attempts"][0]["malformed"] == ["- navigate; nowhere; oops"]
    assert len(first["attempts"]) == 3 and first["fallback"] == "score"


def test_tiny_sweep_through_the_sweep_driver(tmp_path):
    from groundplan.pipelines.evaluate.sweep import run_sweep

    cfg = EvalConfig.model_validate({
        "name": "house_tiny", "env": {"name": "house", "options": {"houses_per_split": 2, "splits": ["test"]}},
        "planners": [{"name": "saynav", "label": "SayNav", "options": {"plan_mode": "score"}},
                     {"name": "house_explore", "label": "Explore"}, {"name": "house_oracle", "label": "oracle"}],
        "seeds": [0], "max_steps": 60, "output_dir": str(tmp_path), "select_by": ["sr"],
        "runtime": {"executor": "local", "mlflow": False}})
    result = run_sweep(cfg, lm=FakeLM(), progress=False)
    assert len(result.traces) == 6 and all(t.error is None for t in result.traces)
    assert all("sr" in t.metrics and "spl" in t.metrics for t in result.traces)
    oracle = [t for t in result.traces if t.planner == "oracle (oracle target positions)"]
    assert len(oracle) == 2
    assert all(t.metrics["sr"] == 1.0 for t in oracle)


def test_gymnasium_pointnav_env_passes_checker():
    from gymnasium.utils.env_checker import check_env

    from groundplan.envs.house.gym_env import HousePointNavEnv

    env = HousePointNavEnv(seeds=(0, 5))
    check_env(env, skip_render_check=True)
    obs, info = env.reset(seed=1)
    assert env.observation_space.contains(obs) and info["shortest_m"] > 0
    obs, r, term, trunc, info = env.step(3)
    assert term and "success" in info


def test_saynav_table_pairs_planners_on_the_same_houses():
    """The README's SayNav comparisons: McNemar on SR and the paired SPL difference, on shared houses only."""
    from types import SimpleNamespace

    from groundplan.evaluation import saynav as table

    def t(planner, house, sr, spl):
        return SimpleNamespace(planner=planner, task_id=f"h{house}", seed=0, metrics={"sr": sr, "spl": spl})

    traces = [t("Explore (no LLM)", k, 1.0, 0.2) for k in range(4)]
    traces += [t("SayNav", 0, 1.0, 0.5), t("SayNav", 1, 1.0, 0.4), t("SayNav", 2, 0.0, 0.0), t("SayNav", 9, 1.0, 0.9)]
    (line,) = table.paired_lines(traces)
    assert "n=3 paired houses" in line  # house 9 has no Explore episode, house 3 no SayNav one
    assert "only-SayNav 0 / only-reference 1" in line
    assert "SPL difference +0.100" in line  # mean of (+0.3, +0.2, -0.2)
    assert table.paired_lines([t("SayNav", 0, 1.0, 0.5)]) == []  # no reference planner: nothing to pair


def test_sr_and_spl_have_one_definition_for_the_house_env_and_the_point_goal_trainer():
    from groundplan.core.measures import navigation_rates, spl
    from groundplan.pipelines.train.pointnav import episode_stats, summarize as pointnav_summary

    assert spl(True, 5.0, 10.0) == 0.5 and spl(True, 5.0, 4.0) == 1.0 and spl(False, 5.0, 5.0) == 0.0
    assert spl(True, float("inf"), 3.0) == 0.0  # no path to the goal
    episodes = [(True, 8.0), (False, 6.0), (True, 4.0)]
    stats = [episode_stats(i, ok, path, 4.0, 10) for i, (ok, path) in enumerate(episodes)]
    assert [s["spl"] for s in stats] == [spl(True, 4.0, 8.0), 0.0, 1.0]
    rates = navigation_rates([s["success"] for s in stats], [s["spl"] for s in stats])
    assert (rates.n, rates.sr, rates.sr_ci) == (3, 2 / 3, wilson_interval(2, 3))
    assert rates.spl == pytest.approx(0.5)
    summary = pointnav_summary(stats, "test")
    assert (summary["test_sr"], summary["test_sr_lo"]) == (rates.sr, rates.sr_ci[0])
    assert summary["test_spl_hi"] == rates.spl_ci[1]
