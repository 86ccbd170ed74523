"""The trajectory table's schema (the contract with the Can/Pay trainers: keep it).

One row per episode: the goal text, the initial observation text, and per step the action, the
observation text before it, whether it was feasible (executed successfully), its reward, and the
admissible actions before it. ``success`` is the goal check at the end; ``source`` names the expert or
the planner label that chose the actions. ``listed_feasible`` (null unless collection labelled it:
``label_listed``) holds, per step, whether each admissible action was feasible there by the simulator's own
check; a shard written before the column existed reads it as null.
"""
from __future__ import annotations

from typing import Any, Mapping

import pyarrow as pa

TRAJECTORY_SCHEMA = pa.schema([
    pa.field("traj_id", pa.string(), nullable=False),
    pa.field("env", pa.string(), nullable=False),
    pa.field("split", pa.string(), nullable=False),
    pa.field("task_id", pa.string(), nullable=False),
    pa.field("goal", pa.string(), nullable=False),
    pa.field("init_obs", pa.string(), nullable=False),
    pa.field("actions", pa.list_(pa.string()), nullable=False),
    pa.field("observations", pa.list_(pa.string()), nullable=False),
    pa.field("feasible", pa.list_(pa.bool_()), nullable=False),
    pa.field("rewards", pa.list_(pa.float64()), nullable=False),
    pa.field("success", pa.bool_(), nullable=False),
    pa.field("source", pa.string(), nullable=False),
    pa.field("admissible", pa.list_(pa.list_(pa.string())), nullable=False),
    pa.field("listed_feasible", pa.list_(pa.list_(pa.bool_())), nullable=True),
])
#: columns a row may leave out (null): written only when collection records them
OPTIONAL: tuple[str, ...] = ("listed_feasible",)
#: ``source`` labels of the expert oracles (prompt examples come from these only)
EXPERT_SOURCES: tuple[str, ...] = ("babyai_bot", "babyai_oracle", "hanoi_optimal", "blocks_bowls_oracle",
                                   "virtualhome_reference", "reference_plan")
COLUMNS: tuple[str, ...] = tuple(TRAJECTORY_SCHEMA.names)


def validate_row(row: Mapping[str, Any]) -> None:
    """Raise ValueError when ``row`` lacks a column, its per-step lists differ in length, or a step's
    feasibility labels do not match its admissible actions one to one."""
    missing = [c for c in COLUMNS if c not in row and c not in OPTIONAL]
    if missing:
        raise ValueError(f"trajectory row lacks {missing}")
    n = len(row["actions"])
    for col in ("observations", "feasible", "rewards", "admissible"):
        if len(row[col]) != n:
            raise ValueError(f"trajectory {row['traj_id']}: {col} has {len(row[col])} entries for {n} actions")
    labels = row.get("listed_feasible")
    if labels is not None and (len(labels) != n or any(len(a) != len(b) for a, b in zip(labels, row["admissible"]))):
        raise ValueError(f"trajectory {row['traj_id']}: listed_feasible does not label each admissible action of "
                         "each step once")


def to_table(rows: list[Mapping[str, Any]]) -> pa.Table:
    for r in rows:
        validate_row(r)
    return pa.Table.from_pylist([{c: r.get(c) for c in COLUMNS} for r in rows], schema=TRAJECTORY_SCHEMA)
