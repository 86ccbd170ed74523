"""Sharded Parquet store with exactly-once appends.

Each finished trajectory is appended at once to the open shard's journal: an Arrow IPC *stream* file
(``part-<run>-<k>.journal``), one record batch per trajectory, flushed and fsynced — a stream stays
readable up to its last complete batch even when the writer dies mid-write. When a shard holds
``shard_size`` trajectories, or the run ends, the journal is committed: written as
``part-<run>-<k>.parquet`` (to a temporary name, then an atomic rename) and removed. Opening the store
first recovers journals a crashed run left behind the same way (a journal whose Parquet twin already
exists was committed just before the crash and is only removed). The set of finished ``traj_id``s is
read from the shards, and :meth:`ShardWriter.append` refuses an id already stored, so a rerun writes
nothing twice.
"""
from __future__ import annotations

import logging
import os
import uuid
from pathlib import Path
from typing import Any, Mapping, Sequence

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from groundplan.datasets.schema import TRAJECTORY_SCHEMA, to_table

log = logging.getLogger(__name__)
JOURNAL = ".journal"


def _read_journal(path: Path) -> pa.Table:
    """The complete record batches of a (possibly truncated) journal."""
    batches = []
    try:
        with pa.OSFile(str(path), "rb") as f:
            reader = ipc.open_stream(f)
            while True:
                try:
                    batches.append(reader.read_next_batch())
                except StopIteration:
                    break
    except (pa.ArrowInvalid, OSError) as e:  # a torn last batch, or a header cut short
        log.warning("journal %s: kept %d complete trajectories (%s)", path.name, len(batches), e)
    return pa.Table.from_batches(batches, schema=TRAJECTORY_SCHEMA)


def _write_parquet(table: pa.Table, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(table, tmp)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)


def shard_files(folder: str | Path) -> list[Path]:
    return sorted(Path(folder).glob("part-*.parquet"))


def recover(folder: str | Path) -> int:
    """Commit the journals a crashed run left in ``folder``; returns how many trajectories they held.
    Rows whose ``traj_id`` is already in a committed shard are dropped."""
    folder = Path(folder)
    stored = finished_ids(folder, recover_first=False)
    kept = 0
    for journal in sorted(folder.glob(f"part-*{JOURNAL}")):
        target = journal.with_name(journal.name[: -len(JOURNAL)] + ".parquet")
        if not target.exists():
            table = _read_journal(journal)
            if table.num_rows:
                keep = []
                for i, t in enumerate(table.column("traj_id").to_pylist()):
                    if t not in stored:
                        stored.add(t)
                        keep.append(i)
                table = table.take(keep)
            if table.num_rows:
                _write_parquet(table, target)
                kept += table.num_rows
        journal.unlink()
    for tmp in folder.glob("part-*.parquet.tmp"):
        tmp.unlink()
    return kept


def finished_ids(folder: str | Path, recover_first: bool = True) -> set[str]:
    """``traj_id``s stored in ``folder`` (after recovering leftover journals)."""
    return set(stored_goals(folder, recover_first))


def stored_goals(folder: str | Path, recover_first: bool = True) -> dict[str, str]:
    """``traj_id`` → the instruction (``goal``) stored with it, for every trajectory in ``folder``
    (after recovering leftover journals). A resumed run compares these with the tasks it would run:
    an id names a task by its place in the split, so a changed split must not pass for a stored one."""
    folder = Path(folder)
    if not folder.exists():
        return {}
    if recover_first:
        recover(folder)
    goals: dict[str, str] = {}
    for shard in shard_files(folder):
        t = pq.read_table(shard, columns=["traj_id", "goal"])
        goals.update(zip(t.column("traj_id").to_pylist(), t.column("goal").to_pylist()))
    return goals


class ShardWriter:
    """Appends trajectory rows to journals and commits them as Parquet shards (see module docstring)."""

    def __init__(self, folder: str | Path, shard_size: int = 500) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.shard_size = shard_size
        self.stored = finished_ids(self.folder)
        self.run = uuid.uuid4().hex[:8]
        self._k = 0
        self._file: Any = None
        self._writer: Any = None
        self._rows = 0
        self.appended = 0

    def _path(self, suffix: str) -> Path:
        return self.folder / f"part-{self.run}-{self._k:04d}{suffix}"

    def append(self, row: Mapping[str, Any]) -> bool:
        """Write one trajectory now; False (nothing written) when its ``traj_id`` is already stored."""
        if row["traj_id"] in self.stored:
            return False
        table = to_table([row])
        if self._writer is None:
            self._file = pa.OSFile(str(self._path(JOURNAL)), "wb")
            self._writer = ipc.new_stream(self._file, TRAJECTORY_SCHEMA)
        self._writer.write_table(table)
        self._file.flush()
        os.fsync(self._file.fileno())
        self.stored.add(row["traj_id"])
        self._rows += 1
        self.appended += 1
        if self._rows >= self.shard_size:
            self.commit()
        return True

    def commit(self) -> None:
        """Turn the open journal into a Parquet shard."""
        if self._writer is None:
            return
        self._writer.close()
        self._file.close()
        journal = self._path(JOURNAL)
        _write_parquet(_read_journal(journal), self._path(".parquet"))
        journal.unlink()
        self._writer, self._file, self._rows = None, None, 0
        self._k += 1

    def close(self) -> None:
        self.commit()

    def __enter__(self) -> "ShardWriter":
        return self

    def __exit__(self, *exc: Any) -> None:
        # on an exception the journal stays as it is (a crash looks the same); the next open recovers it
        if exc[0] is None:
            self.close()
        elif self._writer is not None:
            self._writer.close()
            self._file.close()


def load_trajectories(path: str | Path, split: str | None = None,
                      columns: Sequence[str] | None = None) -> pa.Table:
    """All trajectories under ``path`` (a dataset folder with ``part-*.parquet`` shards, searched
    recursively, or one shard) as one table with :data:`TRAJECTORY_SCHEMA`; ``split`` filters;
    ``columns`` reads only those (the dataset digest needs a few, not the per-step lists)."""
    path = Path(path)
    files = [path] if path.is_file() else sorted(path.rglob("part-*.parquet"))
    if not files:
        raise FileNotFoundError(f"no trajectory shards (part-*.parquet) under {path}")
    return pads.dataset([str(f) for f in files], schema=TRAJECTORY_SCHEMA, format="parquet").to_table(
        columns=list(columns) if columns is not None else None,
        filter=pads.field("split") == split if split is not None else None)


def prompt_examples(path: str | Path, n: int | None = None, env: str | None = None,
                    split: str = "train", sources: tuple[str, ...] | None = None) -> list[tuple[str, str, list[str]]]:
    """Few-shot prompt examples from the expert plans (SayCanPay App. A.1: "The few-shot prompts are
    sampled from the train data"): ``(goal, init_obs, actions)`` of successful expert trajectories of
    ``split``, in ``traj_id`` order (deterministic); the first ``n`` when given. ``sources`` keeps only
    those sources (default: every expert, i.e. every source registered in ``EXPERT_SOURCES``)."""
    from groundplan.datasets.schema import EXPERT_SOURCES

    keep = set(sources) if sources is not None else set(EXPERT_SOURCES)
    rows = load_trajectories(path, split=split).to_pylist()
    rows = [r for r in rows if r["success"] and r["source"] in keep and (env is None or r["env"] == env)]
    rows.sort(key=lambda r: r["traj_id"])
    out = [(r["goal"], r["init_obs"], list(r["actions"])) for r in rows]
    return out[:n] if n is not None else out
