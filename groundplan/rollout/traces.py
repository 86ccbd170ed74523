"""Episode traces: the unit of evidence (docs/architecture.md, "Traces").

Every number the project prints is computed from these records, so any figure can be traced back to
the episodes behind it. Traces serialise to one JSON object per episode (JSON lines).
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

from groundplan.core.types import CandidateScore

#: how the error of an episode that infrastructure failed begins (an LLM server that kept failing, an
#: actor that died), so it is never read as the planner's failure; the Ray executor writes it too
INFRASTRUCTURE_FAILURE = "infrastructure failed"


@dataclass
class StepTrace:
    """One planner decision and what executing it did."""

    index: int
    chosen: str
    done: bool
    candidates: list[CandidateScore] = field(default_factory=list)
    prompt_delta: str = ""
    success: bool | None = None
    feedback: str = ""
    info: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)


@dataclass
class EpisodeTrace:
    """A whole episode: identity, every step, and the outcome."""

    episode_id: str
    planner: str
    env: str
    task_id: str
    family: str
    instruction: str
    seed: int
    llm: str
    config_hash: str = ""
    prompt: str = ""
    steps: list[StepTrace] = field(default_factory=list)
    terminated: bool = False  # the planner chose "done" (vs hitting max steps or an error)
    execution_success: bool = False  # goal holds in the final executed state
    plan_success: bool | None = None  # goal holds when the chosen skills are replayed noise-free
    goal_details: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)  # env-specific, e.g. executability, LCS
    error: str | None = None
    wall_s: float = 0.0
    #: what the planner declared it reads of the simulator's truth (``OracleDeclaration.to_dict`` each,
    #: :mod:`groundplan.core.truth`), from which tables print their marks; [] for a planner that reads none,
    #: None in a trace written before traces recorded it (tables then take its config's declarations)
    oracles: list[dict[str, Any]] | None = None

    @property
    def plan(self) -> list[str]:
        return [s.chosen for s in self.steps if not s.done]

    def step_prompts(self) -> list[str]:
        """The prompt each step was decided on. A trace keeps the episode's final prompt and each step's
        ``prompt_delta`` (what choosing it appended), so step ``k``'s prompt is the final one less the deltas
        of steps ``k`` onwards (how benchmarks replay a sweep's decisions)."""
        deltas = [s.prompt_delta for s in self.steps]
        if not self.prompt.endswith("".join(deltas)):
            raise ValueError(f"episode {self.episode_id}: its prompt does not end with its steps' text")
        out, cut = [], len(self.prompt)
        for d in reversed(deltas):
            cut -= len(d)
            out.append(self.prompt[:cut])
        return out[::-1]

    @property
    def infrastructure_failure(self) -> bool:
        """The episode failed because infrastructure did (its error begins with ``INFRASTRUCTURE_FAILURE``),
        not because of anything the planner or env did."""
        return bool(self.error) and self.error.startswith(INFRASTRUCTURE_FAILURE)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        """One JSON line. The C encoder walks the trace and only dataclasses pass through Python
        (``_fields_of``), about 4x cheaper than ``json.dumps(asdict(...))``: asdict deep-copies every
        leaf, and on a sweep's driver, the one process that writes every trace, that cost ~4 ms per
        51-option step."""
        return json.dumps(self, default=_fields_of, ensure_ascii=False)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "EpisodeTrace":
        d = dict(d)
        steps = []
        for s in d.pop("steps", []):
            s = dict(s)
            s["candidates"] = [CandidateScore(**c) for c in s.get("candidates", [])]
            steps.append(StepTrace(**s))
        return cls(steps=steps, **d)


def _fields_of(obj: Any) -> dict[str, Any]:
    if is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: getattr(obj, f.name) for f in fields(obj)}
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")


def write_traces(path: str | Path, traces: Iterable[EpisodeTrace], append: bool = True) -> None:
    """Append traces as JSON lines, flushing after each so that a crash loses no finished episode."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    torn = append and path.exists() and path.stat().st_size > 0 and _last_byte(path) != b"\n"
    with path.open("a" if append else "w", encoding="utf-8") as f:
        if torn:  # a crash mid-write left a partial line: start on a fresh one so no record merges into it
            f.write("\n")
        for t in traces:
            f.write(t.to_json() + "\n")
            f.flush()


def _last_byte(path: Path) -> bytes:
    with path.open("rb") as f:
        f.seek(-1, 2)
        return f.read(1)


def trace_records(path: str | Path) -> Iterator[tuple[dict[str, Any], str]]:
    """Each whole line of a traces file as (its parsed record, the line itself), for readers that move
    traces without rebuilding them; a torn last line (a crash mid-write) is skipped, not fatal."""
    path = Path(path)
    if not path.exists():
        return
    with path.open(encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                yield json.loads(line), line
            except json.JSONDecodeError:
                continue


def read_traces(path: str | Path) -> Iterator[EpisodeTrace]:
    """Read traces back; a torn last line (a crash mid-write) is skipped, not fatal."""
    for record, _ in trace_records(path):
        yield EpisodeTrace.from_dict(record)
