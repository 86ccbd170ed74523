"""The model-scale Zero-Shot config runs held-out programs that the published grid did not select on:
its task ids are VirtualHome test programs, one per held-out instruction, none the first program of its
category (the first ones are the tasks ``configs/zeroshot_virtualhome.yaml`` reports; its grid was once
searched on them, and is now searched on validation tasks)."""
from __future__ import annotations

import collections
from pathlib import Path

import pytest
import yaml

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def test_scale_zeroshot_tasks_are_held_out_and_not_the_grid_selection_tasks():
    pytest.importorskip("virtualhome_eval", reason="needs virtualhome-eval (the README's install has it)")
    from groundplan.envs.virtualhome.env import VirtualHomeEnv

    ids = yaml.safe_load((CONFIGS / "scale_zeroshot_virtualhome.yaml").read_text())["tasks"]["ids"]
    grid = yaml.safe_load((CONFIGS / "zeroshot_virtualhome.yaml").read_text())
    assert grid["tasks"] == {"per_family": 1}
    by_family: dict[str, list[str]] = collections.defaultdict(list)
    tasks = VirtualHomeEnv().tasks()
    for t in tasks:
        by_family[t.family].append(t.task_id)
    family_of = {t.task_id: t.family for t in tasks}
    assert len(ids) == len(set(ids)) and set(ids) <= set(family_of)
    assert not set(ids) & {fam[0] for fam in by_family.values()}
    assert collections.Counter(family_of[i] for i in ids) == {f: 1 for f in by_family}
