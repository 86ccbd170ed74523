"""The 342 VirtualHome programs of ``virtualhome-eval`` (scene 1, TrimmedTestScene1), their goals and
a deterministic split into demonstrations and test tasks.

Each program has a task name (which here is also its category, 26 in all, e.g. "Turn on light"), a
free-text description, a human-written reference program and goals from
``resources/virtualhome/task_state_LTL_formula_accurate.json`` (node goals, edge goals, action goals).
"""
from __future__ import annotations

import functools
import hashlib
import json
import re
from dataclasses import dataclass
from typing import Literal, Sequence

from groundplan.envs.virtualhome.simulator import dataset_root, package_root

SCENE = 1
_LINE_ARG = re.compile(r"<([^<>]+)>\s*\((\d+)\.(\d+)\)")


@dataclass(frozen=True)
class Program:
    """One human-written program: id (``"11_1"``), name, description, steps, goals."""

    program_id: str
    name: str
    description: str
    lines: tuple[str, ...]  # as in the file: "[WALK] <bedroom> (1.67)"
    goal: dict

    @property
    def class_script(self) -> tuple[str, ...]:
        """Script lines with the instance placeholder, ``[WALK] <bedroom> (1)``."""
        return tuple(_LINE_ARG.sub(lambda m: f"<{m.group(1)}> (1)", line) for line in self.lines)

    @property
    def id_script(self) -> tuple[str, ...]:
        """Script lines with the node ids the simulator executes, ``[WALK] <bedroom> (67)``."""
        return tuple(_LINE_ARG.sub(lambda m: f"<{m.group(1)}> ({m.group(3)})", line) for line in self.lines)


def _program_dir(kind: str) -> str:
    return str(dataset_root() / kind / f"TrimmedTestScene{SCENE}_graph" / "results_intentions_march-13-18")


@functools.lru_cache(maxsize=1)
def load_programs() -> tuple[Program, ...]:
    """Every program that has goals, ordered by category then program id."""
    goals_path = package_root() / "resources" / "virtualhome" / "task_state_LTL_formula_accurate.json"
    data = json.loads(goals_path.read_text())[f"scene_{SCENE}"]
    folder = _program_dir("executable_programs")
    out = []
    for category in sorted(data):
        for pid in sorted(data[category], key=_pid_key):
            with open(f"{folder}/file{pid}.txt", encoding="utf-8") as f:
                text = f.read().split("\n")
            lines = tuple(line.strip() for line in text if line.startswith("["))
            vh = data[category][pid]["vh_goal"]
            nodes = [g for g in vh["goal"] if "state" in g]
            edges = [g for g in vh["goal"] if "relation_type" in g]
            goal = {"node_goals": nodes, "edge_goals": edges, "action_goals": list(vh["actions"]),
                    "tl_goal": data[category][pid]["tl_goal"]}
            out.append(Program(pid, text[0].strip() or category, text[1].strip(), lines, goal))
    return tuple(out)


def _pid_key(pid: str) -> tuple[int, int]:
    a, _, b = pid.partition("_")
    return int(a), int(b or 0)


def load_init_graph(program_id: str) -> dict:
    with open(f"{_program_dir('init_and_final_graphs')}/file{program_id}.json", encoding="utf-8") as f:
        return json.load(f)["init_graph"]


def rank_key(text: str) -> str:
    """A deterministic, content-based order (SHA-1 of the text) for choosing held-out names and ids."""
    return hashlib.sha1(text.encode()).hexdigest()


def split_programs(
    mode: Literal["category", "program"] = "category", test_fraction: float = 0.3
) -> tuple[list[Program], list[Program]]:
    """(demonstrations, test), deterministic.

    ``category`` (default, as the paper's held-out tasks): whole task categories are held out — the
    categories are ranked by the SHA-1 of their name and the first ``round(test_fraction × 26)`` are
    test, so no demonstration shares a test task's name. ``program``: within every category the
    programs are ranked by the SHA-1 of their id and the first ``ceil``-free ``round`` fraction is
    test (categories with one program stay in the demonstrations).
    """
    programs = load_programs()
    if mode == "category":
        cats = sorted({p.name for p in programs}, key=rank_key)
        k = max(1, round(test_fraction * len(cats)))
        test_cats = set(cats[:k])
        return [p for p in programs if p.name not in test_cats], [p for p in programs if p.name in test_cats]
    if mode == "program":
        train, test = [], []
        by_cat: dict[str, list[Program]] = {}
        for p in programs:
            by_cat.setdefault(p.name, []).append(p)
        for cat in sorted(by_cat):
            ranked = sorted(by_cat[cat], key=lambda p: rank_key(p.program_id))
            k = round(test_fraction * len(ranked)) if len(ranked) > 1 else 0
            test.extend(sorted(ranked[:k], key=lambda p: _pid_key(p.program_id)))
            train.extend(sorted(ranked[k:], key=lambda p: _pid_key(p.program_id)))
        return train, test
    raise ValueError(f"unknown split mode {mode!r}; valid: category, program")


def validation_names(train: Sequence[Program], fraction: float) -> set[str]:
    """The task names of ``train`` held out as validation tasks: ranked by the SHA-1 of ``"validation:" +
    name`` (a ranking of its own, so the held-out names do not follow the test split's), the first
    ``round(fraction × names)``, at least one. Hyperparameters and variants are chosen on these, never on
    test programs; their programs leave the demonstrations while they are the tasks."""
    names = sorted({p.name for p in train}, key=lambda n: rank_key("validation:" + n))
    return set(names[: max(1, round(fraction * len(names)))])
