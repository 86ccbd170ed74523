"""groundplan's rows on EAI's leaderboard: the 15 stored LLMs, answer files in EAI's format made elsewhere,
and groundplan's planners run on the ``virtualhome_eai`` env (open loop: ``open_loop`` writes the whole
program; closed loop: one skill at a time), judged by one judge on the same tasks, with paired tests.

Every row is judged by :class:`~groundplan.evaluation.eai.judge.EAIJudge`: an answer (stored, from a
file, or the text an ``open_loop`` episode kept) from its text (parsing and hallucination checks
included), a closed-loop episode from the program the robot executed (:func:`executed_steps`). When
groundplan rows are present, every row is restricted to the tasks all of them ran (a fixed sample: the
same tasks for every row), so each comparison is paired: the exact McNemar test on success, each
groundplan row against every other row, Holm-adjusted over all the tests of one semantics (the family a
reader scans), and on executability between rows of one loop only: a closed-loop row is judged on the
program it executed, its refused steps dropped, so its executability holds by construction; its own measure
is the refused steps (failed attempts) per episode and the share of episodes with none. ``rank`` is where a
groundplan row lands among the stored LLMs on those tasks: 1 + the number of stored rows with a strictly
higher success rate.
"""
from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Literal, Sequence

from groundplan.core.errors import InvalidInputError
from groundplan.core.stats import wilson_interval
from groundplan.envs.virtualhome.eai.env import parse_skill
from groundplan.envs.virtualhome.eai.tasks import load_tasks
from groundplan.envs.virtualhome.simulator import package_root
from groundplan.evaluation.eai.judge import EAIJudge, Verdict
from groundplan.evaluation.eai.semantics import SEMANTICS
from groundplan.evaluation.eai.table import EAIRow, aggregate, carry_runtime_errors, paired_verdicts, render_rows
from groundplan.evaluation.summary import holm, render_text
from groundplan.rollout.traces import EpisodeTrace

_OUTPUTS = re.compile(r"^(.*)_outputs\.json$")
Kind = Literal["stored", "open_loop", "closed_loop"]
#: the env whose episodes are closed-loop rows
EAI_ENV = "virtualhome_eai"


def stored_dir() -> Path:
    """The package's folder of the 15 LLMs' stored answers."""
    return package_root() / "llm_response" / "action_sequence"


def stored_models(folder: Path) -> list[str]:
    """The models with a ``<model>_outputs.json`` in ``folder``, sorted."""
    return sorted(m.group(1) for p in folder.iterdir() if (m := _OUTPUTS.match(p.name)))


def load_outputs(path: Path) -> dict[str, str]:
    """Task id -> answer text, from a ``<model>_outputs.json`` (EAI's format)."""
    with open(path, encoding="utf-8") as f:
        return {row["identifier"]: row["llm_output"] for row in json.load(f)}


def executed_steps(trace: EpisodeTrace) -> list[tuple[str, list[str]]]:
    """The program a closed-loop episode executed: its successful steps in order, EAI's additional steps
    (which succeed without effect) included, failed attempts left out (they changed nothing)."""
    return [parse_skill(s.chosen) for s in trace.steps if not s.done and s.success]


def refused_steps(trace: EpisodeTrace) -> int:
    """The steps of a closed-loop episode that the simulator refused (failed attempts): a closed-loop row's
    own measure, since its executed program is executable by construction."""
    return sum(1 for s in trace.steps if not s.done and s.success is False)


@dataclass
class Entry:
    """One leaderboard row's answers: task id -> answer text (stored, open loop) or trace (closed loop)."""

    name: str
    kind: Kind
    answers: dict[str, Any]
    note: str = ""


def stored_entries(folder: Path | None = None, models: Sequence[str] | None = None) -> list[Entry]:
    folder = folder or stored_dir()
    return [Entry(m, "stored", load_outputs(folder / f"{m}_outputs.json")) for m in (models or stored_models(folder))]


def answer_file_entries(paths: Iterable[Path]) -> list[Entry]:
    """Open-loop rows from answer files in EAI's format made elsewhere (``<label>_outputs.json``, or folders
    of them): a served model's answers, written by any tool."""
    out = []
    for p in map(Path, paths):
        files = sorted(p.glob("*_outputs.json")) if p.is_dir() else [p]
        if not files or not all(f.is_file() and _OUTPUTS.match(f.name) for f in files):
            raise InvalidInputError(f"{p} is not an answer file in EAI's format (<label>_outputs.json) or a folder of them")
        out += [Entry(f"{_OUTPUTS.match(f.name).group(1)} (open loop)", "open_loop", load_outputs(f)) for f in files]
    return out


def answer_text(trace: EpisodeTrace) -> str | None:
    """The answer an open-loop planner wrote (``open_loop``'s first decision keeps it), else None."""
    return trace.steps[0].info.get("answer") if trace.steps else None


def row_name(trace: EpisodeTrace) -> str:
    """The leaderboard row an episode belongs to: its planner and LLM."""
    return f"{trace.planner} [{trace.llm}]"


def run_entries(traces: Iterable[EpisodeTrace]) -> list[Entry]:
    """Rows from eval traces of the ``virtualhome_eai`` env, one per (planner, LLM): an open-loop planner's
    row is judged on the answers it wrote, as a stored LLM's (an episode that raised before answering
    counts as an empty answer); a closed-loop row on the program it executed (an episode that ended in an
    error is judged on what it executed). Episodes that ended in an error are counted in the note."""
    rows: dict[str, dict[str, EpisodeTrace]] = defaultdict(dict)
    errors: dict[str, int] = defaultdict(int)
    for t in traces:
        if t.env != EAI_ENV:
            raise InvalidInputError(f"episode {t.episode_id} is from env {t.env!r}; EAI's rows need {EAI_ENV!r} runs")
        name = row_name(t)
        if t.task_id in rows[name]:
            raise InvalidInputError(f"{name} has two episodes of task {t.task_id} (another seed?): EAI's simulator is "
                                    "deterministic, give one seed per row")
        rows[name][t.task_id] = t
        errors[name] += bool(t.error)
    out = []
    for name, episodes in rows.items():
        note = f"{errors[name]} episode(s) ended in an error" if errors[name] else ""
        answers = {i: answer_text(t) for i, t in episodes.items()}
        if any(a is not None for a in answers.values()):
            out.append(Entry(name, "open_loop", {i: a or "" for i, a in answers.items()}, note))
        else:
            out.append(Entry(name, "closed_loop", episodes, note))
    return out


def entries_for(traces: Iterable[EpisodeTrace] = (), answers: Iterable[Path] = (), folder: Path | None = None,
                models: Sequence[str] | None = None) -> list[Entry]:
    """Every row of a leaderboard: the stored LLMs (``models`` of ``folder``, default all of the package's),
    answer files made elsewhere, and the rows of a run's traces."""
    return [*stored_entries(folder, models), *answer_file_entries(answers), *run_entries(traces)]


@dataclass
class Leaderboard:
    task_ids: list[str]
    entries: list[Entry]
    rows: dict[str, list[EAIRow]] = field(default_factory=dict)
    verdicts: dict[str, dict[str, list[Verdict]]] = field(default_factory=dict)
    paired: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    ranks: dict[str, dict[str, int]] = field(default_factory=dict)
    attempts: dict[str, dict[str, float]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"task_ids": self.task_ids, "entries": {e.name: {"kind": e.kind, "note": e.note} for e in self.entries},
                "rows": {s: [r.to_dict() for r in rs] for s, rs in self.rows.items()}, "paired": self.paired,
                "ranks": self.ranks, "attempts": self.attempts}


def build(entries: list[Entry], semantics: Sequence[str] = ("official", "corrected"),
          judge: EAIJudge | None = None) -> Leaderboard:
    """Judge every entry on the shared tasks (see the module) under each semantics."""
    ours = [e for e in entries if e.kind != "stored"]
    if ours:
        shared = set.intersection(*(set(e.answers) for e in ours))
    else:
        shared = set().union(*(set(e.answers) for e in entries))
    if not shared:
        raise InvalidInputError("the rows share no task: run them on the same tasks (e.g. the same --limit and seed)")
    task_ids = sorted(shared)
    judge = judge or EAIJudge()
    board = Leaderboard(task_ids, entries)
    verdicts: dict[str, dict[str, list[Verdict]]] = {s: defaultdict(list) for s in semantics}
    for task in load_tasks(ids=task_ids):  # task-major: the judge's step cache holds this task's prefixes
        for e in entries:
            answer = e.answers.get(task.task_id)
            if answer is None:
                continue
            for s in semantics:
                sem = SEMANTICS[s]
                v = (judge.score_steps(task.task_id, executed_steps(answer), sem) if e.kind == "closed_loop"
                     else judge.score_text(task.task_id, answer, sem))
                verdicts[s][e.name].append(v)
    board.verdicts = {s: dict(v) for s, v in verdicts.items()}
    for s in semantics:
        sem = SEMANTICS[s]
        stored = carry_runtime_errors([aggregate(e.name, verdicts[s][e.name], sem) for e in entries
                                       if e.kind == "stored"], sem)
        own = [aggregate(e.name, verdicts[s][e.name], sem) for e in ours]  # counts per row: nothing to carry
        board.rows[s] = sorted([*stored, *own], key=lambda r: -(r.successes / r.n if r.n else 0.0))
        board.paired[s] = paired_tests(verdicts[s], [e.name for e in ours], [e.name for e in entries],
                                       {e.name for e in entries if e.kind == "closed_loop"})
        rates = {r.model: (r.successes / r.n if r.n else 0.0) for r in board.rows[s]}
        stored_rates = [rates[e.name] for e in entries if e.kind == "stored"]
        board.ranks[s] = {e.name: 1 + sum(r > rates[e.name] for r in stored_rates) for e in ours}
    for e in ours:
        if e.kind == "closed_loop":
            episodes = [t for t in e.answers.values() if t.task_id in shared]
            failed = [refused_steps(t) for t in episodes]
            wall = sum(t.wall_s for t in episodes)
            clean = sum(f == 0 for f in failed)
            lo, hi = wilson_interval(clean, len(failed)) if failed else (0.0, 1.0)
            board.attempts[e.name] = {"failed_attempts_mean": sum(failed) / len(failed) if failed else 0.0,
                                      "episodes_with_failed_attempts": sum(f > 0 for f in failed),
                                      "episodes": len(failed), "episodes_without_failed_attempts": clean,
                                      "without_failed_lo": lo, "without_failed_hi": hi,
                                      "episode_wall_s": round(wall, 1),
                                      "episodes_per_s": round(len(episodes) / wall, 4) if wall else None}
    return board


def episode_measures(traces: Sequence[EpisodeTrace], semantics: Sequence[str] = ("official", "corrected"),
                     judge: EAIJudge | None = None) -> dict[str, dict[str, float]]:
    """Per episode id, the judge's verdicts as outcome measures, so an EAI run's tables can be rendered from
    exported episode outcomes (``groundplan tables --export``) as the leaderboard judges them: ``success_<s>``
    under each semantics (absent where it does not score the task); ``executable_<s>`` for open-loop rows
    only (a closed-loop row's executed program is executable by construction, see the module); for
    closed-loop rows the steps the simulator refused (``refused_steps``) and whether there were none
    (``no_refused_step``); and the goals satisfied under the last semantics (``goals_satisfied``: node, edge
    and action goals). Each row is open or closed loop as :func:`run_entries` classes it."""
    traces = sorted(traces, key=lambda t: t.task_id)  # task-major: the judge's step cache holds a task's prefixes
    kinds = {e.name: e.kind for e in run_entries(traces)}
    judge = judge or EAIJudge()
    out: dict[str, dict[str, float]] = {}
    for t in traces:
        closed = kinds[row_name(t)] == "closed_loop"
        if closed:
            steps = executed_steps(t)
            m = verdict_measures(lambda sem: judge.score_steps(t.task_id, steps, sem), semantics, executable=False)
        else:
            text = answer_text(t) or ""
            m = verdict_measures(lambda sem: judge.score_text(t.task_id, text, sem), semantics, executable=True)
        if closed:
            refused = refused_steps(t)
            m.update(refused_steps=float(refused), no_refused_step=float(refused == 0))
        out[t.episode_id] = m
    return out


def stored_measures(model: str, task_ids: Sequence[str], semantics: Sequence[str] = ("official", "corrected"),
                    judge: EAIJudge | None = None, folder: Path | None = None) -> dict[str, dict[str, float]]:
    """Per task id, a stored LLM's answer judged as :func:`episode_measures` judges an open-loop row, so that a
    run's exported outcomes can hold the stored row it is compared with, paired task by task. A task the model
    has no answer for is judged on an empty answer (EAI counts it a failure)."""
    folder = folder or stored_dir()
    path = folder / f"{model}_outputs.json"
    if not path.is_file():
        raise InvalidInputError(f"no stored answers for {model!r}; stored models: {', '.join(stored_models(folder))}")
    answers = load_outputs(path)
    judge = judge or EAIJudge()
    return {task_id: verdict_measures(lambda sem: judge.score_text(task_id, answers.get(task_id) or "", sem),
                                      semantics, executable=True)
            for task_id in sorted(task_ids)}


def verdict_measures(score: Callable[[Any], Verdict], semantics: Sequence[str], executable: bool) -> dict[str, float]:
    """One row's verdicts on one task as outcome measures: ``success_<s>`` under each semantics that scores the
    task, ``executable_<s>`` too when ``executable`` (an open-loop or stored answer), and the goals satisfied under
    the last semantics. ``score`` judges the row's answer under a semantics."""
    m: dict[str, float] = {}
    for s in semantics:
        v = score(SEMANTICS[s])
        if v.scored:
            m[f"success_{s}"] = float(v.success)
            if executable:
                m[f"executable_{s}"] = float(v.executable)
    m["goals_satisfied"] = float(v.node_matched + v.edge_matched + v.action_matched)
    return m


def paired_tests(verdicts: dict[str, list[Verdict]], challengers: list[str], names: list[str],
                 closed: set[str] = frozenset()) -> list[dict[str, Any]]:
    """Exact McNemar on success and on executability (tasks both rows score), each challenger against every
    other row (each pair once), Holm-adjusted over all of them: success says whether a row reaches more
    goals, executability whether it makes fewer of EAI's errors. Executability is tested only between rows
    of one loop: a ``closed`` (closed-loop) row is judged on the program it executed, its refused steps
    dropped, so its executability cannot fail as an open-loop program's can; they are not one measure
    (the refused steps are the closed-loop rows' own measure: :func:`build`'s ``attempts``)."""
    out = []
    done: set[frozenset[str]] = set()
    for a in challengers:
        for b in names:
            if a == b or frozenset((a, b)) in done:
                continue
            done.add(frozenset((a, b)))
            for measure in ("success", "executable"):
                if measure == "executable" and (a in closed) != (b in closed):
                    continue
                c = paired_verdicts(verdicts.get(a, []), verdicts.get(b, []), measure)
                if c is not None:
                    out.append({"a": a, "b": b, "measure": measure, "n_pairs": c["n_pairs"], "a_only": c["a_only"],
                                "b_only": c["b_only"], "a_rate": c["a_rate"], "b_rate": c["b_rate"],
                                "p_value": c["p_value"]})
    return holm(out, "groundplan-row comparisons of this semantics (success and executability)")


def render(board: Leaderboard, title: str = "EAI action sequencing") -> str:
    """One table per semantics, then each groundplan row's rank, attempts and its paired tests."""
    parts = []
    n = len(board.task_ids)
    for s, rows in board.rows.items():
        parts.append(render_text(render_rows(rows, f"{title}, {s} semantics, {n} shared tasks")))
        lines = [f"groundplan rows, {s} semantics (rank among the {sum(e.kind == 'stored' for e in board.entries)} "
                 "stored LLMs on these tasks; paired exact McNemar on success, and on executability between rows "
                 "of one loop only (a closed-loop row's executed program drops its refused steps), Holm over the "
                 f"{len(board.paired[s])} tests of this semantics):"]
        for name, rank in board.ranks[s].items():
            extra = board.attempts.get(name)
            note = (f"; refused steps (failed attempts) per episode {extra['failed_attempts_mean']:.2f}; episodes with "
                    f"no refused step {extra['episodes_without_failed_attempts']}/{extra['episodes']} "
                    f"({extra['without_failed_lo']:.0%}-{extra['without_failed_hi']:.0%}, 95% Wilson); "
                    f"{extra['episode_wall_s']} s of episodes "
                    f"({extra['episodes_per_s']} episodes/s, one at a time)" if extra else "")
            lines.append(f"  {name}: rank {rank}{note}")
            for r in board.paired[s]:
                if r["a"] == name and r["p_holm"] < 0.05:
                    lines.append(f"    {r['measure']} vs {r['b']}: {r['a_rate']:.0%} vs {r['b_rate']:.0%} (n={r['n_pairs']}, "
                                 f"{r['a_only']}/{r['b_only']} discordant) p={r['p_value']:.3g} p_holm={r['p_holm']:.3g}")
            significant = sum(1 for r in board.paired[s] if r["a"] == name and r["p_holm"] < 0.05)
            lines.append(f"    {significant} of {sum(1 for r in board.paired[s] if r['a'] == name)} comparisons "
                         "significant after Holm (every test: summary.json of `groundplan eai run`, or of `eai score --runs`)")
        parts.append("\n".join(lines) + "\n")
    parts.append("Inputs: every row reads EAI's prompt for the task, symbolic goal included (EAI gives it to every "
                 "model). Open-loop rows write the whole program from it. Closed-loop rows act one step at a time and "
                 "are judged on the program they executed; a row marked oracle also reads the simulator's "
                 "preconditions. A closed-loop row that executed nothing counts as EAI's empty output (parsing).\n")
    notes = [f"  {e.name}: {e.note}" for e in board.entries if e.note]
    if notes:
        parts.append("notes:\n" + "\n".join(notes) + "\n")
    return "\n".join(parts)
