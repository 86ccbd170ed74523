"""Bring your own tasks: read a YAML or JSONL file of tasks for one env, validated before any episode.

Each task (docs/tasks.md)::

    - id: coke-to-user            # optional; default <file stem>/<index>
      instruction: bring me a coke
      family: my_family
      goal: [delivered(coke can)] # in the env's goal language (Env.parse_goal)
      start_state: {robot: table} # optional, the env's start state (Env.parse_start_state)
      reference_plan: [...]       # optional, the env's skill labels (Env.parse_reference_plan)

A YAML file is a list of such mappings (or a mapping with a ``tasks:`` list and an optional ``env:``
naming the env it is for); a JSONL file has one JSON object per line (blank lines and ``#`` lines are
skipped). Every task is checked before the sweep, and all problems are reported at once, each with
the line it is on: ``tasks.yaml:14: task 'coke-to-user', goal: delivered: unknown object 'coke' ...``.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from groundplan.core.errors import InvalidInputError
from groundplan.core.types import Task
from groundplan.core.validation import validate_instruction
from groundplan.envs.base import Env, TaskSpecError

logger = logging.getLogger(__name__)

FIELDS = ("id", "instruction", "family", "goal", "start_state", "reference_plan")
REQUIRED = ("instruction", "family", "goal")
#: at most this many problems are listed in one error
MAX_ERRORS = 20


class _Record:
    """One task's data with a way to find the line of any part of it."""

    def __init__(self, data: Any, line: int, node: Any = None) -> None:
        self.data, self.line, self.node = data, line, node

    def line_of(self, *path: Any) -> int:
        """The line of the deepest part of ``path`` (keys, indices) found in the YAML node tree."""
        node, line = self.node, self.line
        for key in path:
            if node is None:
                break
            child = None
            if node.id == "mapping":
                child = next((v for k, v in node.value if getattr(k, "value", None) == str(key)), None)
            elif node.id == "sequence" and isinstance(key, int) and 0 <= key < len(node.value):
                child = node.value[key]
            if child is None:
                break
            node, line = child, child.start_mark.line + 1
        return line


def _yaml_records(text: str, where: str) -> tuple[list[_Record], str | None]:
    import yaml

    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return [], None
        env_name = None
        items = root
        if root.id == "mapping":
            keys = {k.value: v for k, v in root.value}
            unknown = set(keys) - {"tasks", "env"}
            if "tasks" not in keys or unknown:
                raise InvalidInputError(f"{where}:{root.start_mark.line + 1}: a task file is a list of tasks or a "
                                        f"mapping with 'tasks' (and optionally 'env'), got keys {sorted(keys)}")
            if "env" in keys:
                env_name = str(loader.construct_object(keys["env"], deep=True))
            items = keys["tasks"]
        if items.id != "sequence":
            raise InvalidInputError(f"{where}:{items.start_mark.line + 1}: expected a list of tasks")
        return [_Record(loader.construct_object(n, deep=True), n.start_mark.line + 1, n) for n in items.value], env_name
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise InvalidInputError(f"{where}{line}: not valid YAML: {getattr(exc, 'problem', exc)}") from None
    finally:
        loader.dispose()


def _jsonl_records(text: str, where: str) -> list[_Record]:
    out = []
    for number, raw in enumerate(text.splitlines(), 1):
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        try:
            out.append(_Record(json.loads(raw), number))
        except json.JSONDecodeError as exc:
            raise InvalidInputError(f"{where}:{number}: not valid JSON: {exc.msg} (column {exc.colno})") from None
    return out


def _task(record: _Record, index: int, env: Env, stem: str, where: str) -> Task:
    """One record → a validated Task; raises InvalidInputError with the line of the problem."""
    data = record.data

    def fail(message: str, *path: Any) -> InvalidInputError:
        return InvalidInputError(f"{where}:{record.line_of(*path)}: {message}")

    if not isinstance(data, Mapping):
        raise fail(f"a task is a mapping with {', '.join(REQUIRED)}, got {type(data).__name__}")
    label = f"task '{data.get('id', index)}'"
    unknown = [k for k in data if k not in FIELDS]
    if unknown:
        raise fail(f"{label}: unknown field(s) {unknown}; valid: {', '.join(FIELDS)}", unknown[0])
    missing = [k for k in REQUIRED if data.get(k) in (None, "")]
    if missing:
        raise fail(f"{label}: missing {', '.join(missing)}")
    try:
        instruction = validate_instruction(data["instruction"])
    except InvalidInputError as exc:
        raise fail(f"{label}, instruction: {exc}", "instruction") from None
    family = data["family"]
    if not isinstance(family, str) or not family.strip():
        raise fail(f"{label}, family: must be a non-empty string", "family")
    task_id = str(data.get("id", f"{stem}/{index:03d}"))
    parts: dict[str, Any] = {}
    for field, parse in (("start_state", lambda: env.parse_start_state(data.get("start_state"))),
                         ("goal", lambda: env.parse_goal(data["goal"], parts.get("start_state"))),
                         ("reference_plan", lambda: None if data.get("reference_plan") is None else
                          env.parse_reference_plan(data["reference_plan"], parts.get("start_state")))):
        try:
            parts[field] = parse()
        except TaskSpecError as exc:
            raise fail(f"{label}, {field}: {exc}", field, *exc.path) from None
        except InvalidInputError as exc:
            raise fail(f"{label}, {field}: {exc}", field) from None
    metadata = {"source": f"{where}:{record.line}", **env.task_metadata(parts["goal"], parts["start_state"])}
    return Task(task_id=task_id, instruction=instruction, family=family.strip(), goal=parts["goal"],
                start_state=parts["start_state"], reference_plan=parts["reference_plan"], metadata=metadata)


def load_task_file(path: str | Path, env: Env) -> list[Task]:
    """The tasks of a YAML (``.yaml``/``.yml``) or JSONL (``.jsonl``) file for ``env`` (an Env instance,
    e.g. ``make_env(cfg.env)``), each validated by the env's own goal language.

    Raises :class:`InvalidInputError` before any episode runs: an unreadable file, a file for another
    env, or (all at once, up to :data:`MAX_ERRORS`) every task with a problem, each message starting
    with ``<file>:<line>:`` and naming the bad field, predicate, object or location.
    """
    path = Path(path)
    where = str(path)
    if not env.supports_task_files:
        raise InvalidInputError(f"the {env.name} env does not read task files (it declares no goal language)")
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidInputError(f"cannot read the task file {where}: {exc.strerror or exc}") from None
    suffix = path.suffix.lower()
    if suffix in (".yaml", ".yml"):
        records, env_name = _yaml_records(text, where)
    elif suffix == ".jsonl":
        records, env_name = _jsonl_records(text, where), None
    else:
        raise InvalidInputError(f"{where}: a task file is .yaml, .yml or .jsonl, got '{suffix or 'no suffix'}'")
    if env_name is not None and env_name != env.name:
        raise InvalidInputError(f"{where}: the file is for the '{env_name}' env, not '{env.name}'")
    if not records:
        raise InvalidInputError(f"{where}: no tasks in the file")
    tasks: list[Task] = []
    errors: list[str] = []
    seen: dict[str, int] = {}
    for index, record in enumerate(records):
        try:
            task = _task(record, index, env, path.stem, where)
        except InvalidInputError as exc:
            errors.append(str(exc))
            continue
        tasks.append(task)
        if task.task_id in seen:
            errors.append(f"{where}:{record.line}: task id '{task.task_id}' repeats the task on line {seen[task.task_id]}")
        seen.setdefault(task.task_id, record.line)
    if errors:
        more = f"\n... and {len(errors) - MAX_ERRORS} more" if len(errors) > MAX_ERRORS else ""
        raise InvalidInputError(f"{len(errors)} problem(s) in {where}:\n" + "\n".join(errors[:MAX_ERRORS]) + more)
    logger.info("read %d task(s) from %s", len(tasks), where)
    return tasks


def families_of(tasks: Sequence[Task]) -> list[str]:
    """The families of ``tasks`` in first-seen order (for per-family selection of file tasks)."""
    return list(dict.fromkeys(t.family for t in tasks))


def file_selection_note(path: str | Path, in_file: int, selected: int, per_family: int | None,
                        families: Sequence[str] | None) -> str:
    """One line saying that a task file is not run whole, why, and how to run it whole. A config's
    ``tasks.per_family`` is usually a quick look at an env's own task set; someone who brings a file
    expects all of it, so a cut must never be silent."""
    cuts = {"per_family": per_family, "families": list(families) if families else None}
    cuts = {k: v for k, v in cuts.items() if v is not None}
    why = ", ".join(f"tasks.{k}={v}" for k, v in cuts.items())
    undo = " ".join(f"--set tasks.{k}=null" for k in cuts)
    return f"task file {path}: running {selected} of its {in_file} tasks ({why}); to run them all: {undo}"
