"""No test or validation task is a train task in what the models read before they act: goal text and
first observation text (:func:`groundplan.envs.splits.visible_signature`; the expert plan stays out of
the key), and no test task of an env split by task name shares its instruction with train. Each signature here is built
from the env's own observation (or the text function its observation uses, checked against real resets
where a reset needs the physics), never from the signature the split stored, at the split sizes the
shipped collect and eval configs use."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import yaml

from groundplan.envs import ENVS
from groundplan.envs.splits import visible_signature

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def env_options(config: str) -> dict:
    """The env options a shipped config gives (collection or evaluation)."""
    return dict(yaml.safe_load((CONFIGS / config).read_text())["env"].get("options") or {})


def seen(task, first_text: str) -> str:
    return visible_signature(task.instruction, first_text)


def twins(train: set[str], tasks: list, first_text) -> list[str]:
    return [t.task_id for t in tasks if seen(t, first_text(t)) in train]


# ------------------------------------------------------------------------------------ BabyAI
@pytest.mark.parametrize("split", ["test", "test-generalize"])
def test_babyai_split_shares_no_task_with_train(split):
    pytest.importorskip("minigrid")
    from groundplan.envs.babyai.options import FAMILIES

    options = env_options("collect_babyai.yaml")
    assert options == env_options("saycanpay_babyai.yaml")  # the eval draws the split the data came from
    make = ENVS.get("babyai")
    train_env, env = make(**options, split="train"), make(**options, split=split)
    train = {seen(t, train_env.reset(t, 0).text) for t in train_env.tasks()}
    tasks = env.tasks()
    assert twins(train, tasks, lambda t: env.reset(t, 0).text) == []
    assert Counter(t.family for t in tasks) == dict.fromkeys(FAMILIES, env.sizes()[split])  # sizes kept
    assert all(t.metadata["signature"] == seen(t, env.reset(t, 0).text) for t in tasks)


# ------------------------------------------------------------------------------------ blocks in bowls
@pytest.mark.parametrize("config", ["collect_blocks_bowls.yaml", "saycanpay_blocks.yaml"])
def test_blocks_bowls_splits_share_no_task_with_train(config):
    pytest.importorskip("pybullet")
    from groundplan.envs.tabletop.blocks_bowls import scene_text, split_tasks
    from groundplan.envs.tabletop.ravens_options import BlocksBowlsConfig

    def first_text(t):  # every block starts on the table
        return scene_text(t.start_state["bowls"], t.start_state["blocks"], {})

    c = BlocksBowlsConfig(**env_options(config))
    _check_tabletop_splits("blocks_bowls", c, lambda split, n: split_tasks(split, n, c.train_size), first_text)


# ------------------------------------------------------------------------------------ Tower of Hanoi
@pytest.mark.parametrize("config", ["collect_hanoi.yaml", "saycanpay_hanoi.yaml"])
def test_hanoi_splits_share_no_task_with_train(config):
    pytest.importorskip("pybullet")
    from groundplan.envs.tabletop.hanoi import describe, split_tasks, start_stacks
    from groundplan.envs.tabletop.ravens_options import HanoiConfig

    def first_text(t):
        return describe(t.start_state["colours"], start_stacks(tuple(t.start_state["rods"])))

    c = HanoiConfig(**env_options(config))
    _check_tabletop_splits("hanoi", c, lambda split, n: split_tasks(split, n, c.train_size, c.tower_goal_prob),
                           first_text)


def _check_tabletop_splits(env_name, c, draw, first_text):
    """A PyBullet SayCanPay env's test and test-generalize splits keep their sizes and share no
    model-visible signature with train, and ``first_text`` is the env's own first observation."""
    train_tasks = draw("train", c.train_size)
    train = {seen(t, first_text(t)) for t in train_tasks}
    test = draw("test", c.test_size)
    gen = draw("test-generalize", c.generalize_size)
    assert twins(train, test, first_text) == [] and twins(train, gen, first_text) == []
    assert (len(test), len(gen)) == (c.test_size, c.generalize_size)
    env = ENVS.get(env_name)(split="test", test_size=2, train_size=2)
    try:
        for t in (*train_tasks[:2], *test[:2]):
            assert env.reset(t, 0).text == first_text(t)
    finally:
        env.close()


# ------------------------------------------------------------------------------------ VirtualHome
def test_virtualhome_splits_by_task_name():
    """Test and test-generalize hold task names that train never has, so no test task shares its
    instruction (and so its instruction and first observation) with a train task, and the shipped Say
    prompt's examples are train names."""
    pytest.importorskip("virtualhome_eval")
    from groundplan.grounding.canpay.lineage import prompt_lineage
    from groundplan.planners.saycan import load_prompt

    options = env_options("collect_virtualhome.yaml")
    assert options == env_options("saycanpay_virtualhome.yaml")
    make = ENVS.get("virtualhome_scp")
    assert make(**options).capabilities.disjoint_by == "instruction"
    train = make(**options, split="train").tasks()
    train_names = {t.instruction.lower() for t in train}
    prompt = {e.instruction for e in prompt_lineage("p", load_prompt("saycanpay_virtualhome")).examples}
    assert prompt and prompt <= train_names
    for split in ("test", "test-generalize"):
        tasks = make(**options, split=split).tasks()
        assert tasks and [t.task_id for t in tasks if t.instruction.lower() in train_names] == []
    test = make(**options, split="test").tasks()
    assert len(test) >= 40 and len({t.instruction for t in test}) >= 5


# ------------------------------------------------------------------------------------ Can/Pay validation
def _trajectory(task, first_text: str, split: str = "train"):
    from groundplan.grounding.canpay.data import Trajectory

    n = len(task.reference_plan)
    return Trajectory(f"{task.task_id}|0", "env", split, task.task_id, task.instruction, first_text,
                      tuple(task.reference_plan), (True,) * n, (0.0,) * (n - 1) + (1.0,), True)


def _assert_split_by_task(trajs, seeds=(0, 1, 2)):
    from groundplan.grounding.canpay.data import split_trajectories, trajectory_signature

    for seed in seeds:
        train, val = split_trajectories(trajs, 0.2, seed)
        assert train and val and len(train) + len(val) == len(trajs)
        assert not {t.task_id for t in train} & {t.task_id for t in val}
        assert not {trajectory_signature(t) for t in train} & {trajectory_signature(t) for t in val}


def test_kitchen_can_pay_validation_holds_whole_tasks(tmp_path):
    """The kitchen data of ``configs/collect_kitchen.yaml`` (5 seeds per task, one instruction and reference
    plan each), read the way ``groundplan train`` reads it: no validation task has a trajectory in training."""
    from groundplan.envs.kitchen import KitchenEnv
    from groundplan.grounding.canpay.config import TrainConfig
    from groundplan.grounding.canpay.data import read_trajectories
    from groundplan.pipelines.train.canpay import build_examples
    from tests.kitchen_data import collect_kitchen

    data = collect_kitchen(tmp_path, seeds=range(5), splits=("train",))
    train_tasks = KitchenEnv(split="train").tasks()
    trajs = read_trajectories([str(data)], env="kitchen", split="train")
    assert len(trajs) == 5 * len(train_tasks)
    _assert_split_by_task(trajs)
    cfg = TrainConfig(**{**yaml.safe_load((CONFIGS / "train_can_kitchen.yaml").read_text()), "data": [str(data)]})
    _, _, counts, _ = build_examples(cfg)
    assert counts["val_tasks"] >= 1 and counts["train_tasks"] + counts["val_tasks"] <= len(train_tasks)
    test_instructions = {t.instruction.lower() for t in KitchenEnv(split="test").tasks()}
    assert not test_instructions & {t.goal.lower() for t in trajs}  # kitchen test tasks are never trained on


def test_can_pay_validation_holds_whole_tasks_in_every_env():
    """The expert trajectories of each SayCanPay env's train split (goal, first observation, expert plan):
    twins of different task ids (BabyAI layouts that read alike, VirtualHome programs written twice)
    stay on one side of the split."""
    pytest.importorskip("minigrid")
    pytest.importorskip("pybullet")
    from groundplan.envs.tabletop import blocks_bowls, hanoi

    babyai = ENVS.get("babyai")(split="train")
    _assert_split_by_task([_trajectory(t, babyai.reset(t, 0).text) for t in babyai.tasks()])
    blocks = blocks_bowls.split_tasks("train", 200, 200)
    _assert_split_by_task([_trajectory(t, blocks_bowls.scene_text(t.start_state["bowls"], t.start_state["blocks"], {}))
                           for t in blocks])
    towers = hanoi.split_tasks("train", 200, 200, 0.25)
    _assert_split_by_task([_trajectory(t, hanoi.describe(t.start_state["colours"],
                                                         hanoi.start_stacks(tuple(t.start_state["rods"]))))
                           for t in towers])


def test_twins_of_different_task_ids_are_one_task():
    """Two trajectories that read alike are kept together even under different task ids; two seeds of one
    task are kept together even when their observations differ."""
    from groundplan.grounding.canpay.data import Trajectory, task_groups

    def traj(traj_id, task_id, goal, obs, actions):
        return Trajectory(traj_id, "e", "train", task_id, goal, obs, actions, (True,) * len(actions),
                          (0.0,) * len(actions), True)

    a = traj("a", "t1", "Pick up the ball", "room 1", ("pick up ball", "done"))
    b = traj("b", "t2", "pick up  the ball", "Room 1", ("pick up ball", "done"))  # reads as a
    c = traj("c", "t3", "pick up the ball", "room 2", ("pick up ball", "done"))  # another start
    d = traj("d", "t3", "pick up the ball", "room 3", ("pick up ball", "done"))  # another seed of t3
    assert sorted(sorted(t.traj_id for t in g) for g in task_groups([a, b, c, d])) == [["a", "b"], ["c", "d"]]
    # an env split by task name (VirtualHome, EAI): every program of one instruction is one task
    assert [sorted(t.traj_id for t in g) for g in task_groups([a, b, c, d], by="instruction")] == [["a", "b", "c", "d"]]


def test_every_env_refuses_an_unknown_split_by_one_check() -> None:
    """One split vocabulary and one refusal (envs/splits.py) serve every env that has SayCanPay splits."""
    from groundplan.core.errors import InvalidInputError
    from groundplan.envs.babyai.options import BabyAIConfig
    from groundplan.envs.kitchen.tasks import tasks_for
    from groundplan.envs.splits import SCP_SPLITS, check_split
    from groundplan.envs.tabletop.ravens_options import HanoiConfig

    assert SCP_SPLITS == ("train", "test", "test-generalize")
    for split in SCP_SPLITS:
        check_split(split)
        assert BabyAIConfig(split=split).split == split and HanoiConfig(split=split).split == split
    with pytest.raises(InvalidInputError, match="unknown split 'val'; valid: train, test, test-generalize"):
        check_split("val")
    with pytest.raises(InvalidInputError, match="unknown split 'test-generalize'; valid: train, test"):
        tasks_for(split="test-generalize")
