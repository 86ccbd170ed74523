"""Bring your own tasks: load_task_file for each env's goal language, with errors
that name the line and the bad predicate, object or location."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from groundplan.core.errors import InvalidInputError
from groundplan.envs.kitchen.env import KitchenEnv
from groundplan.envs.task_files import file_selection_note, load_task_file

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "configs" / "tasks"
SUBGOAL = "Red block is on the blue bowl."


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


# ------------------------------------------------------------------------------------ kitchen
def test_kitchen_example_file_loads_and_its_reference_plan_reaches_the_goal():
    env = KitchenEnv(mode="language")
    tasks = load_task_file(EXAMPLES / "kitchen.yaml", env)
    assert [t.task_id for t in tasks] == ["coke-to-user", "any-citrus-soda", "tidy-table", "bin-the-chips"]
    coke, citrus, tidy, binned = tasks
    assert coke.goal == ((("delivered", "coke can"),),)
    assert len(citrus.goal) == 1 and len(citrus.goal[0]) == 3  # one any-of clause
    assert tidy.start_state == {"robot": "close counter", "placement": {"apple": "table", "sponge": "table"}}
    assert binned.goal == ((("thrown_away", "rice chips"),), (("gripper_empty",),))
    assert coke.metadata["source"].endswith("kitchen.yaml:8")
    env.reset(coke, 0)
    for step in coke.reference_plan:
        assert env.execute(step).success
    assert env.check_goal().success
    env.reset(binned, 0)
    assert env.state.robot == "table" and env.state.holding == "rice chips"  # the start state is used


def test_kitchen_errors_name_the_line_and_the_bad_part(tmp_path):
    path = _write(tmp_path, "bad.yaml", """
        - instruction: bring me a coke
          family: f
          goal: [delivered(coke)]
        - instruction: put the apple away
          family: f
          goal:
            - at(apple, table)
            - any:
                - at(apple, far counter)
                - at(apple, garage)
        - instruction: fly
          family: f
          goal: [teleported(apple)]
        - instruction: start somewhere odd
          family: f
          goal: [robot_at(table)]
          start_state: {robot: roof}
        - instruction: plan with a typo
          family: f
          goal: [robot_at(table)]
          reference_plan: [go to the table, dance]
        - family: f
          goal: [gripper_empty()]
    """)
    with pytest.raises(InvalidInputError) as info:
        load_task_file(path, KitchenEnv())
    text = str(info.value)
    assert text.startswith("6 problem(s)")  # every task is checked, not only the first bad one
    assert f"{path}:3: task '0', goal: delivered: unknown object 'coke'" in text
    assert f"{path}:10: task '1', goal: at: unknown location 'garage'" in text  # the line of the alternative
    assert f"{path}:13: task '2', goal: unknown predicate 'teleported'" in text
    assert f"{path}:17:" in text and "'roof'" in text
    assert f"{path}:21:" in text and "'dance' is not a kitchen skill" in text
    assert f"{path}:22: task '5': missing instruction" in text


def test_jsonl_errors_name_the_line(tmp_path):
    good = {"instruction": "bring me a coke", "family": "f", "goal": ["delivered(coke can)"]}
    lines = ["# comment", json.dumps({**good, "id": "a"}), "", json.dumps({**good, "id": "b", "goal": "near(fridge)"}),
             json.dumps({**good, "id": "a"})]
    path = tmp_path / "tasks.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(InvalidInputError) as info:
        load_task_file(path, KitchenEnv())
    text = str(info.value)
    assert f"{path}:4: task 'b', goal: near: unknown object 'fridge'" in text
    assert f"{path}:5: task id 'a' repeats the task on line 2" in text
    path.write_text("\n".join(lines[:2]) + "\n{not json\n")
    with pytest.raises(InvalidInputError, match=r"tasks.jsonl:3: not valid JSON"):
        load_task_file(path, KitchenEnv())


def test_file_level_errors(tmp_path):
    from tests.fakes import ToyEnv

    path = _write(tmp_path, "t.yaml", """
        env: tabletop
        tasks:
          - {instruction: x, family: f, goal: [gripper_empty()]}
    """)
    with pytest.raises(InvalidInputError, match="for the 'tabletop' env, not 'kitchen'"):
        load_task_file(path, KitchenEnv())
    with pytest.raises(InvalidInputError, match="does not read task files"):
        load_task_file(path, ToyEnv())
    with pytest.raises(InvalidInputError, match="cannot read the task file"):
        load_task_file(tmp_path / "missing.yaml", KitchenEnv())
    with pytest.raises(InvalidInputError, match=r"\.yaml, \.yml or \.jsonl"):
        load_task_file(_write(tmp_path, "t.txt", "x"), KitchenEnv())
    with pytest.raises(InvalidInputError, match=r"t2.yaml:2: not valid YAML"):
        load_task_file(_write(tmp_path, "t2.yaml", "- a: [1\n- b: 2\n"), KitchenEnv())
    with pytest.raises(InvalidInputError, match="unknown field"):
        load_task_file(_write(tmp_path, "t3.yaml", "- {instruction: x, family: f, goal: [gripper_empty()], oops: 1}\n"),
                       KitchenEnv())


# ------------------------------------------------------------------------------------ tabletop
def test_tabletop_example_file_and_its_errors(tmp_path):
    pytest.importorskip("pybullet")
    from groundplan.envs.tabletop.env import TabletopEnv

    env = TabletopEnv(pick_noise_std=0.0, place_noise_std=0.0, disturbance_prob=0.0, cameras=["top"])
    try:
        tasks = load_task_file(EXAMPLES / "tabletop.yaml", env)
        assert [t.family for t in tasks] == ["my_pick_and_place", "my_stacking", "my_sorting"]
        pick = tasks[0]
        assert pick.goal == {"family": "pick_and_place", "blocks": ["red block", "yellow block"],
                             "bowls": ["blue bowl"], "pick": "red block", "target": "blue bowl"}
        assert pick.metadata["subgoals"] == [SUBGOAL]  # for oracle options only
        obs = env.reset(pick, 0)
        assert set(obs.state.blocks) == {"red block", "yellow block"}
        for step in pick.reference_plan[:-1]:
            env.execute(step)
        assert env.check_goal().success
        stack = tasks[1]
        env.reset(stack, 0)
        assert env.world.positions()["green block"][:2] == pytest.approx((0.35, 0.1), abs=0.01)

        path = _write(tmp_path, "bad.yaml", """
            - instruction: put it in the bowl
              family: f
              start_state: {blocks: [red, mauve], bowls: [blue]}
              goal: {task: put_blocks_in_bowl, target: blue bowl}
            - instruction: put it in the bowl
              family: f
              start_state: {blocks: [red], bowls: [blue]}
              goal: {task: put_blocks_in_bowl, target: green bowl}
            - instruction: juggle
              family: f
              start_state: {blocks: [red]}
              goal: {task: juggle_blocks}
            - instruction: no scene
              family: f
              goal: {task: stack_all_blocks}
        """)
        with pytest.raises(InvalidInputError) as info:
            load_task_file(path, env)
        text = str(info.value)
        assert f"{path}:3:" in text and "unknown colour 'mauve'" in text
        assert f"{path}:8:" in text and "target 'green bowl' is not a bowl of this scene" in text
        assert f"{path}:12:" in text and "unknown tabletop task 'juggle_blocks'" in text
        assert f"{path}:13:" in text and "needs start_state" in text
    finally:
        env.close()


# ------------------------------------------------------------------------------------ virtualhome
def test_virtualhome_example_file_and_its_errors(tmp_path):
    pytest.importorskip("virtualhome_eval")
    from groundplan.envs.virtualhome.env import VirtualHomeEnv

    env = VirtualHomeEnv()
    tasks = load_task_file(EXAMPLES / "virtualhome.jsonl", env)
    lamp = tasks[0]
    assert lamp.start_state == {"program": "11_1"}
    assert lamp.goal["node_goals"] == [{"id": 1000, "class_name": "floor_lamp", "state": "ON"}]
    env.reset(lamp, 0)
    assert not env.check_goal().success
    assert all(env.execute(step).success for step in lamp.reference_plan)
    assert env.check_goal().success
    assert tasks[2].goal["action_goals"] == ["LOOKAT|WATCH"]

    bad = [
        {"instruction": "a", "family": "f", "goal": {"nodes": [{"object": "unicorn", "state": "ON"}]}},
        {"instruction": "b", "family": "f", "goal": {"nodes": [{"object": "light", "state": "GLOWING"}]}},
        {"instruction": "c", "family": "f", "goal": {"edges": [{"from": "character", "relation": "LOVES", "to": "sofa"}]}},
        {"instruction": "d", "family": "f", "start_state": {"program": "nope"}, "goal": {"actions": ["WATCH"]}},
        {"instruction": "e", "family": "f", "goal": {"actions": ["FLY"]}, "reference_plan": ["walk to the moon"]},
    ]
    path = tmp_path / "vh.jsonl"
    path.write_text("\n".join(json.dumps(b) for b in bad) + "\n")
    with pytest.raises(InvalidInputError) as info:
        load_task_file(path, env)
    text = str(info.value)
    assert f"{path}:1:" in text and "no object 'unicorn'" in text
    assert f"{path}:2:" in text and "unknown state 'GLOWING'" in text
    assert f"{path}:3:" in text and "unknown relation 'LOVES'" in text
    assert f"{path}:4:" in text and "'nope' is not a program" in text
    assert f"{path}:5:" in text and "unknown action(s) ['FLY']" in text


def test_a_sweep_runs_the_tasks_of_a_task_file(tmp_path):
    """``tasks.file`` in a config: the sweep runs the file's tasks (validated before anything runs)."""
    from groundplan.pipelines.evaluate.sweep import run_sweep
    from tests.fakes import FakeLM, small_kitchen_config

    root = Path(__file__).resolve().parents[1]
    cfg = small_kitchen_config(tmp_path, name="own", tasks={"file": str(root / "configs" / "tasks" / "kitchen.yaml")},
                               seeds=[0])
    result = run_sweep(cfg, lm=FakeLM(), progress=False)
    mine = load_task_file(root / "configs" / "tasks" / "kitchen.yaml", KitchenEnv())
    assert {t.task_id for t in result.traces} == {t.task_id for t in mine} and len(result.traces) == 2 * len(mine)
    bad = tmp_path / "bad.yaml"
    bad.write_text("- {instruction: bring me a coke, family: mine, goal: {all: ['coke can at the moon']}}\n")
    with pytest.raises(InvalidInputError, match="bad.yaml"):
        run_sweep(small_kitchen_config(tmp_path, name="bad", tasks={"file": str(bad)}), lm=FakeLM(), progress=False)


def _numbered_tasks(tmp_path: Path, n: int) -> Path:
    """A file of ``n`` kitchen tasks in one family (as someone's own file would be)."""
    lines = [json.dumps({"id": f"own-{k}", "instruction": "bring me a coke", "family": "own",
                         "goal": ["delivered(coke can)"]}) for k in range(n)]
    path = tmp_path / "own.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_task_file_set_on_the_command_line_runs_whole(tmp_path, monkeypatch, caplog):
    """``--set tasks.file=...`` runs every task of the file, although the config cuts its own task set to 3
    per family; ``--set tasks.per_family=N`` beside it keeps a cut, and the sweep then says in one line how
    many of the file's tasks it runs and how to run them all."""
    import logging

    import groundplan.pipelines.evaluate.sweep as sweep
    from groundplan import cli
    from groundplan.config import load_config
    from tests.fakes import FakeLM

    config = ROOT / "configs" / "saycan_kitchen.yaml"
    path = _numbered_tasks(tmp_path, 5)
    assert load_config(config).tasks.per_family == 3  # the config's quick look at the env's own set
    assert load_config(config, cli.whole_task_file([f"tasks.file={path}"])).tasks.per_family is None
    assert load_config(config, cli.whole_task_file([f"tasks.file={path}", "tasks.per_family=2"])).tasks.per_family == 2
    assert cli.whole_task_file(["seeds=[0,1]"]) == ["seeds=[0,1]"]  # no file: the config's selection stands

    ran: list[set[str]] = []
    real = sweep.run_sweep

    def run_with_fake_lm(cfg, **kw):
        result = real(cfg, lm=FakeLM(), **kw)
        ran.append({t.task_id for t in result.traces})
        return result

    monkeypatch.setattr(sweep, "run_sweep", run_with_fake_lm)
    args = ["eval", str(config), "--local", "--no-mlflow", "--no-progress", "--planners", "No-VF",
            "--set", "max_steps=2", "--set", f"tasks.file={path}"]
    with caplog.at_level(logging.WARNING, logger="groundplan.pipelines.evaluate.sweep"):
        assert cli.main([*args, "--output", str(tmp_path / "whole")]) == 0
        assert ran[-1] == {f"own-{k}" for k in range(5)}
        assert not [r for r in caplog.records if "task file" in r.getMessage()]
        assert cli.main([*args, "--set", "tasks.per_family=2", "--output", str(tmp_path / "cut")]) == 0
    assert ran[-1] == {"own-0", "own-1"}
    (note,) = [r.getMessage() for r in caplog.records if "task file" in r.getMessage()]
    assert note == (f"task file {path}: running 2 of its 5 tasks (tasks.per_family=2); "
                    "to run them all: --set tasks.per_family=null")
    assert file_selection_note("f.yaml", 9, 4, 2, ["a"]) == (
        "task file f.yaml: running 4 of its 9 tasks (tasks.per_family=2, tasks.families=['a']); "
        "to run them all: --set tasks.per_family=null --set tasks.families=null")
