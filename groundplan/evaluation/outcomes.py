"""Committed episode outcomes, and the results tables rendered from them.

A results page must not hold a figure typed by hand: a later change would leave it stale with no test to
notice. So a run's episodes are exported to a compact file under ``docs/results/data/`` (each episode's
identity: run, planner label, model, config hash, task, seed, the cluster it belongs to; and its outcomes:
the env's measures), small enough to commit, with no prompt or trace in it. The tables are rendered from
that file (:func:`render_markdown`) into the page between markers::

    <!-- outcomes: data/say/zeroshot_virtualhome.json -->
    ...the table...
    <!-- /outcomes -->

A marker may name options after the file (:class:`TableSpec`): ``measures=plan_success,execution_success``
(the measures shown, in that order), ``by=family`` (a table of the measures per task family first, a column
per row), ``tests=sr,spl`` (the measures the paired tests cover), ``paired=listed`` (only the file's pairs)
and ``group=run`` (each run's rows together).

``groundplan tables --export FILE RUN...`` writes the file; ``groundplan tables --markdown FILE --options
"K=V ..."`` prints the table a marker with those options holds; ``groundplan tables --render PAGE`` rewrites
every marked block of a page, and a test re-renders each page and fails on any difference.

The rates and means are over episodes, with intervals that respect the clusters (tasks that repeat an
instruction are one question to a planner that reads only the instruction):
:func:`~groundplan.core.stats.clustered_wilson` and :func:`~groundplan.core.stats.clustered_mean_interval`.
Rows with one planner label in several runs (a fine-tuned model beside its frozen twin on the same episodes)
are paired: exact McNemar over the shared episodes and again with one outcome per cluster (its first
episode), Holm-adjusted over every test of the table. A row that reads each task's truth as an oracle is
clustered by task, and its episodes also carry the hash of their opening prompt alone (:func:`prompt_key`):
its pairs are tested once more with one outcome per distinct prompt, what the language model was asked.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any, Literal, Sequence

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from groundplan.config import stable_hash
from groundplan.core.errors import InvalidInputError
from groundplan.core.stats import clustered_mean_interval, clustered_wilson
from groundplan.core.validation import describe_errors
from groundplan.envs.splits import normalise_text

#: the file format's version (a reader refuses another)
FORMAT = 1
MARK = re.compile(r"(?P<open><!-- outcomes: (?P<path>\S+)(?P<opts>(?: [a-z_]+=\S+)*) -->\n)(?P<body>.*?)"
                  r"(?P<close><!-- /outcomes -->)", re.S)


def cluster_key(trace: Any) -> str:
    """What the planner read before it acted, as a short hash: the episode's opening prompt (the instruction,
    and the first observation where the planner reads it; the trace's prompt less the steps the planner
    appended to it), or the instruction when the trace has no prompt; and, for a row that declares reading
    a task's ground truth as an oracle (SayNav's baseline: the targets' positions), the task it read it of.
    Episodes alike in it are one question to the planner whatever their hidden state, so they are one
    cluster: the programs of one VirtualHome task name to Zero-Shot (its prompt is the name), the seeds of a
    task to a planner that reads the same first observation."""
    text = _opening(trace)
    if _reads_task_truth(trace):
        text += f"\x00task:{trace.task_id}"
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def prompt_key(trace: Any) -> str | None:
    """For a row whose clusters split by task because it reads each task's truth as an oracle
    (:func:`cluster_key`), the hash of its opening prompt alone: the coarser grouping, one question to the
    language model, under which the tables test such a row once more (what the model read, the oracle's
    reading aside). ``None`` for every other row, whose cluster is already that."""
    return hashlib.sha1(_opening(trace).encode()).hexdigest()[:12] if _reads_task_truth(trace) else None


def _opening(trace: Any) -> str:
    """The episode's opening prompt, normalised (:func:`cluster_key`)."""
    prompt, grown = trace.prompt, "".join(s.prompt_delta for s in trace.steps)
    if grown and prompt.endswith(grown):  # the prompt at the end holds the steps the planner appended
        prompt = prompt[: len(prompt) - len(grown)]
    return normalise_text(prompt) if prompt else "instruction:" + normalise_text(trace.instruction)


def _reads_task_truth(trace: Any) -> bool:
    """Whether the row declares reading the task's ground truth as an oracle."""
    from groundplan.core.truth import OracleDeclaration

    return any(OracleDeclaration.from_dict(d).is_oracle for d in trace.oracles or ())


def export_outcomes(run_dirs: Sequence[str | Path], names: Sequence[str] | None = None,
                    pairs: Sequence[str] = (), eai_stored: Sequence[str] = ()) -> dict[str, Any]:
    """The outcomes document of the runs (``groundplan eval`` folders): one record per episode with its
    cluster (:func:`cluster_key`). ``names``: each run's name in the tables (default: its config's).
    ``pairs``: rows to test against each other beside the same-label ones, each ``RUN:LABEL=RUN:LABEL``
    (a fine-tuned row against a frozen row of another prompt). ``eai_stored``: EAI's stored LLMs to add as
    rows (run = the model's name, planner ``stored answers``) on the tasks of the EAI runs, judged as the
    leaderboard judges them (``all``: every stored LLM, in name order after any named before it, each once);
    their ``execution_success`` is their success under the official semantics."""
    from groundplan.evaluation.saycanpay import plan_length, scored_against_experts
    from groundplan.evaluation.tables import run_configs, run_folders, run_traces, table_kind

    folders = run_folders(run_dirs)
    configs = run_configs(folders)
    if names is not None and len(names) != len(folders):
        raise InvalidInputError(f"{len(names)} names for {len(folders)} runs")
    from groundplan.evaluation.marks import trace_marks, with_config_declarations

    runs, episodes, footnotes = [], [], {}
    for i, (folder, config) in enumerate(zip(folders, configs)):
        name = names[i] if names is not None else config.get("name", folder.name)
        runs.append({"name": name, "config_hash": stable_hash(config, 12), "env": config["env"]["name"],
                     "env_options": config["env"].get("options", {}), "model": config.get("llm", {}).get("model")})
        traces = with_config_declarations(run_traces([folder]), [config])
        kind = table_kind(config)
        if kind == "saycanpay":  # Table 4's cost-effectiveness and plan length, as its tables read them
            traces, done = scored_against_experts(traces, config["env"]["name"], config["env"].get("options"))
            traces = [dataclasses.replace(t, metrics={"length": plan_length(t, done), **t.metrics}) for t in traces]
        if kind == "eai":  # EAI's judge: success under both semantics, refused steps
            from groundplan.evaluation.eai.leaderboard import episode_measures

            judged = episode_measures(traces)
            traces = [dataclasses.replace(t, metrics={**t.metrics, **judged[t.episode_id]}) for t in traces]
        marks = trace_marks(traces)
        for t in traces:
            if t.error:
                measures: dict[str, Any] = {"error": t.error.splitlines()[0][:200]}
            else:
                measures = {"execution_success": float(bool(t.execution_success)),
                            **({} if t.plan_success is None else {"plan_success": float(bool(t.plan_success))}),
                            **{k: float(v) for k, v in sorted(t.metrics.items()) if isinstance(v, (int, float))}}
            episodes.append({"run": name, "planner": t.planner, "config_hash": t.config_hash,
                             "task_id": t.task_id, "family": t.family, "seed": t.seed, "cluster": cluster_key(t),
                             **({} if (key := prompt_key(t)) is None else {"prompt": key}), **measures})
            if (note := marks.footnote(t.planner)) is not None:  # what the row read of the simulator's truth
                footnotes[t.planner] = {"mark": marks.mark(t.planner), "note": note}
    if eai_stored:
        _add_stored_rows(runs, episodes, eai_stored)
    extra = []
    run_names = {r["name"] for r in runs}
    for item in pairs:
        # split at the "=" that a run's name and ":" follow (planner labels may hold "=": "T [epsilon=0.4]")
        cuts = [i for i in range(len(item)) if item[i] == "=" and any(item.startswith(f"{n}:", i + 1) for n in run_names)]
        sides = [item[:cuts[0]].partition(":"), item[cuts[0] + 1:].partition(":")] if len(cuts) == 1 else []
        if len(sides) != 2 or not all(sep and r and p for r, sep, p in sides):
            raise InvalidInputError(f"a pair is RUN:LABEL=RUN:LABEL, got {item!r}")
        for r, _, p in sides:
            if not any(e["run"] == r and e["planner"] == p for e in episodes):
                raise InvalidInputError(f"no episode of planner {p!r} in run {r!r} (pair {item!r})")
        extra.append({"a": [sides[0][2], sides[0][0]], "b": [sides[1][2], sides[1][0]]})
    models: dict[str, set[Any]] = defaultdict(set)
    for r in runs:
        models[r["name"]].add(r["model"])
    if clash := sorted(n for n, m in models.items() if len(m) > 1):
        raise InvalidInputError(f"runs named {', '.join(clash)} have different models: a name is one model's "
                                "row (runs of different planners may share it)")
    doc = {"format": FORMAT, "runs": runs, "pairs": extra, "episodes": episodes}
    return {**doc, "footnotes": footnotes} if footnotes else doc


def _add_stored_rows(runs: list[dict[str, Any]], episodes: list[dict[str, Any]], models: Sequence[str]) -> None:
    """EAI's stored LLMs as rows on the EAI runs' tasks. A stored answer read only the task's prompt, so its
    cluster is the run episodes' prompt grouping: their :func:`prompt_key` where the run reads each task's
    truth as an oracle (its own clusters split by task), else their cluster."""
    from groundplan.evaluation.eai.leaderboard import EAI_ENV, stored_dir, stored_measures, stored_models

    if "all" in models:  # the whole leaderboard beside the runs, without typing its 15 names
        models = [*dict.fromkeys([*(m for m in models if m != "all"), *stored_models(stored_dir())])]
    eai_runs = {r["name"] for r in runs if r["env"] == EAI_ENV}
    tasks = {e["task_id"]: e for e in episodes if e["run"] in eai_runs}
    if not tasks:
        raise InvalidInputError(f"stored EAI rows need an EAI run ({EAI_ENV}) to take their tasks from")
    for model in models:
        judged = stored_measures(model, list(tasks))
        config_hash = stable_hash({"eai_stored": model}, 12)
        runs.append({"name": model, "config_hash": config_hash, "env": EAI_ENV, "env_options": {}, "model": model})
        for task_id, m in judged.items():
            like = tasks[task_id]
            episodes.append({"run": model, "planner": "stored answers", "config_hash": config_hash,
                             "task_id": task_id, "family": like["family"], "seed": like["seed"],
                             "cluster": like.get("prompt", like["cluster"]),
                             "execution_success": m.get("success_official", 0.0),
                             **dict(sorted(m.items()))})


def write_outcomes(path: str | Path, doc: dict[str, Any]) -> Path:
    """One episode a line inside a JSON document (readable diffs when a run is redone)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    head = json.dumps({k: v for k, v in doc.items() if k != "episodes"}, sort_keys=True)[:-1]
    lines = ",\n".join(json.dumps(e, sort_keys=True) for e in doc["episodes"])
    path.write_text(f'{head}, "episodes": [\n{lines}\n]}}\n')
    return path


def load_outcomes(path: str | Path) -> dict[str, Any]:
    """An outcomes file, or :class:`InvalidInputError` naming what is wrong with it."""
    try:
        doc = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise InvalidInputError(f"{path}: no such outcomes file (groundplan tables --export writes one)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidInputError(f"{path}: not an outcomes file ({type(exc).__name__}: {exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        got = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise InvalidInputError(f"{path}: outcomes format {got!r}, this reader takes {FORMAT}")
    return doc


class TableSpec(BaseModel):
    """How a table is drawn from an outcomes file: the options a page's marker names after the file
    (``measures=sr,spl tests=spl paired=listed``) and ``groundplan tables --markdown --options`` takes."""

    model_config = ConfigDict(extra="forbid")

    measures: list[str] | None = Field(None, description="the measures shown, in order (default: every measure "
                                       "that every episode without an error has); a measure some episodes lack "
                                       "(Kendall tau, defined on successful episodes) is shown over those that "
                                       "have it, with that n")
    by: Literal["family"] | None = Field(None, description="'family': a table of the 0/1 measures per task "
                                         "family first")
    tests: list[str] | None = Field(None, description="the measures the paired tests cover (default: the shown "
                                    "0/1 measures): a 0/1 measure by exact McNemar, any other by the mean paired "
                                    "difference; all of them one Holm family")
    paired: Literal["all", "listed"] = Field("all", description="'all': each planner label run in several runs "
                                             "against its first run, and the file's pairs; 'listed': the file's "
                                             "pairs only (runs that differ in a setting, not a model)")
    group: Literal["planner", "run"] = Field("planner", description="row order: each planner's runs together, "
                                             "or each run's planners together")

    @classmethod
    def parse(cls, text: str, where: str = "the table options") -> "TableSpec":
        """The spec a marker's ``key=value`` words give (lists comma-separated)."""
        opts: dict[str, Any] = {}
        for word in text.split():
            key, sep, value = word.partition("=")
            if not sep or not value:
                raise InvalidInputError(f"{where}: an option is key=value, got {word!r}")
            opts[key] = value.split(",") if key in ("measures", "tests") else value
        try:
            return cls(**opts)
        except ValidationError as e:
            raise InvalidInputError(f"{where}: {describe_errors(e)}") from None


def _rows(doc: dict[str, Any], group: str = "planner") -> list[tuple[str, str]]:
    """(planner, run) of every row: planners in first-seen order and each planner's runs in the file's run
    order, or (``group="run"``) the runs in order and each run's planners in first-seen order."""
    order = list(dict.fromkeys(r["name"] for r in doc["runs"]))  # runs of several planners may share a name
    planners: list[str] = []
    runs: dict[str, set[str]] = defaultdict(set)
    for e in doc["episodes"]:
        if e["planner"] not in runs:
            planners.append(e["planner"])
        runs[e["planner"]].add(e["run"])
    if group == "run":
        return [(p, r) for r in order for p in planners if r in runs[p]]
    return [(p, r) for p in planners for r in order if r in runs[p]]


_IDENTITY = {"run", "planner", "config_hash", "task_id", "family", "seed", "cluster", "prompt"}


def _measures(doc: dict[str, Any]) -> tuple[list[str], set[str], set[str]]:
    """The measures every episode without an error has, in order (execution success first); which of all
    the measures any such episode has are 0/1 (a measure its env declares a count is not, whatever values it
    took: goals gained 0 or 1 in every episode is still a mean, not a rate); and all those measures."""
    from groundplan.core.measures import measure_info
    from groundplan.envs import ENVS

    for env in {r.get("env") for r in doc.get("runs", [])}:
        if env in ENVS:  # its module declares its measures
            ENVS.get(env)
    kept = [e for e in doc["episodes"] if "error" not in e]
    present = {k for e in kept for k in e if k not in _IDENTITY}
    names = [k for k in kept[0] if k not in _IDENTITY] if kept else []
    names = [k for k in names if all(k in e for e in kept)]
    names.sort(key=lambda k: (k != "execution_success", k))
    counts = {k for k in present if (info := measure_info(k)) is not None and not info.proportion}
    binary = {k for k in present - counts if all(e[k] in (0.0, 1.0) for e in kept if k in e)}
    return names, binary, present


def _by_cluster(episodes: list[dict[str, Any]], measure: str) -> dict[str, list[float]]:
    """The measure's values, by cluster, of the episodes that have it."""
    by_cluster: dict[str, list[float]] = defaultdict(list)
    for e in episodes:
        if measure in e:
            by_cluster[e["cluster"]].append(float(e[measure]))
    return by_cluster


def _rate(episodes: list[dict[str, Any]], measure: str) -> str:
    from groundplan.evaluation.summary import format_rate

    clusters = [(sum(v == 1.0 for v in vs), len(vs)) for vs in _by_cluster(episodes, measure).values()]
    k, n = sum(y for y, _ in clusters), sum(m for _, m in clusters)
    if not n:
        return "-"
    _, lo, hi = clustered_wilson(clusters)
    return f"{format_rate(k, n, lo, hi)} ({k}/{n})"


def _digits(x: float) -> int:
    """A mean's decimals, which its interval shares: three below 1 (SPL, LCS), two below 10, one above
    (lengths in metres or steps)."""
    return 3 if abs(x) < 1 else 2 if abs(x) < 10 else 1


def _mean(episodes: list[dict[str, Any]], measure: str) -> str:
    """The measure's mean over the episodes that have it, with its cluster-robust 95% interval
    (:func:`~groundplan.core.stats.clustered_mean_interval`), and their n where some episodes lack it."""
    by_cluster = _by_cluster(episodes, measure)
    n = sum(len(v) for v in by_cluster.values())
    if not n:
        return "-"
    mean, lo, hi = clustered_mean_interval(list(by_cluster.values()))
    d = _digits(mean)
    return f"{mean:.{d}f} [{lo:.{d}f}, {hi:.{d}f}]" + ("" if n == len(episodes) else f" (n={n})")


def _label(row: tuple[str, str], doc: dict[str, Any]) -> str:
    """A row's name in a table that spans rows: its planner, marked, and its run where the file has several."""
    return f"{_marked(row[0], doc)} ({row[1]})" if len({r["name"] for r in doc["runs"]}) > 1 else _marked(row[0], doc)


def _marked(planner: str, doc: dict[str, Any]) -> str:
    """The planner's label with the mark of what it read of the simulator's truth (:mod:`..marks`)."""
    mark = doc.get("footnotes", {}).get(planner, {}).get("mark")
    return f"{planner} {mark}" if mark else planner


def _by_family(doc: dict[str, Any], rows: list[tuple[str, str]], names: list[str],
               eps: dict[tuple[str, str], list[dict[str, Any]]]) -> list[str]:
    """A table of the 0/1 measures per task family (families in first-seen order), a column per row, each
    cell the measures' rates joined by " / " (a family's few episodes decide nothing alone: no interval)."""
    families = list(dict.fromkeys(e.get("family", "") for e in doc["episodes"]))
    lines = ["| family | episodes | " + " | ".join(_label(r, doc) for r in rows) + " |",
             "|---" * (2 + len(rows)) + "|"]
    for fam in families:
        cells, n = [], 0
        for row in rows:
            ok = [e for e in eps[row] if e.get("family", "") == fam and "error" not in e]
            n = max(n, len([e for e in eps[row] if e.get("family", "") == fam]))
            cells.append(" / ".join(f"{100 * sum(e[m] for e in ok) / len(ok):.0f}%" if ok else "-" for m in names))
        lines.append(f"| {fam} | {n} | " + " | ".join(cells) + " |")
    return lines + [""]


def render_markdown(doc: dict[str, Any], spec: TableSpec | None = None) -> str:
    """The table of ``doc``: a row per (planner, run) with n (episodes and clusters), each 0/1 measure as
    rate [95% clustered Wilson] (k/n) and each other measure as mean [95% cluster-robust interval]; then the
    paired tests (:class:`TableSpec`'s ``paired`` and ``tests``), each over the shared episodes, over one
    episode per cluster and, where A's episodes carry a :func:`prompt_key`, over one episode per distinct
    prompt (each only where it has fewer units than the one before: else it is the same test, which would
    only grow the Holm family), Holm-adjusted together; then the footnotes of the rows that read simulator
    truth. ``spec.by="family"``: a table per task family first."""
    from groundplan.evaluation.summary import holm, paired_test

    spec = spec or TableSpec()
    names, binary, present = _measures(doc)
    for field in ("measures", "tests"):
        if unknown := [m for m in getattr(spec, field) or () if m not in present]:
            raise InvalidInputError(f"{field}: no measure {', '.join(unknown)} in the episodes (these are: "
                                    f"{', '.join(sorted(present))})")
    names = list(spec.measures) if spec.measures is not None else names
    tested = list(spec.tests) if spec.tests is not None else [m for m in names if m in binary]
    rows = _rows(doc, spec.group)
    models = {r["name"]: r["model"] for r in doc["runs"]}
    eps: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for e in doc["episodes"]:
        eps[(e["planner"], e["run"])].append(e)
    lines = _by_family(doc, rows, [m for m in names if m in binary], eps) if spec.by else []
    lines += ["| planner | run | model | episodes | clusters | errors | " + " | ".join(names) + " |",
              "|---" * (6 + len(names)) + "|"]
    for planner, run in rows:
        group = eps[(planner, run)]
        ok = [e for e in group if "error" not in e]
        cells = [_rate(ok, m) if m in binary else _mean(ok, m) for m in names]
        lines.append(f"| {_marked(planner, doc)} | {run} | `{models[run]}` | {len(group)} | "
                     f"{len({e['cluster'] for e in group})} | {len(group) - len(ok)} | " + " | ".join(cells) + " |")
    comparisons = []  # ((planner, run) of A, (planner, run) of B)
    if spec.paired == "all":
        for planner in dict.fromkeys(p for p, _ in rows):
            runs = [r for p, r in rows if p == planner]
            comparisons += [((planner, runs[0]), (planner, other)) for other in runs[1:]]
    comparisons += [(tuple(c["a"]), tuple(c["b"])) for c in doc.get("pairs", [])]
    tests: list[dict[str, Any]] = []
    for a, b in comparisons:
        base = {(e["task_id"], e["seed"]): e for e in eps[a] if "error" not in e}
        mine = {(e["task_id"], e["seed"]): e for e in eps[b] if "error" not in e}
        keys = [k for k in base if k in mine]
        units = [("episodes", keys)]
        for unit, field in (("clusters (first episode each)", "cluster"), ("prompts (first episode each)", "prompt")):
            firsts: dict[str, tuple[str, int]] = {}
            for k in keys:
                firsts.setdefault(base[k].get(field, base[k]["cluster"]), k)
            # one episode a group, or the groups of the unit before: the same test again
            if len(firsts) < len(units[-1][1]):
                units.append((unit, list(firsts.values())))
        for m in tested:
            value = (lambda e: None if m not in e else e[m] == 1.0) if m in binary else (lambda e: e.get(m))
            for unit, ks in units:
                rec = paired_test([(value(base[k]), value(mine[k])) for k in ks], proportion=m in binary)
                if rec is not None and rec["p_value"] is not None:
                    tests.append({"a": _label(a, doc), "b": _label(b, doc), "measure": m, "unit": unit, **rec})
    if tests:
        holm(tests, "paired tests of this table")
        means = any("diff" in t for t in tests)
        lines += ["", "Paired (B against A on the same episodes: exact McNemar" + (
            "; other measures, the mean difference B − A with its 95% normal interval" if means else "") +
            f"; Holm over the {len(tests)} tests of this table):", ""]
        head = "| A | B | measure | over | pairs | only A | only B | " + ("B − A [95% CI] | " if means else "")
        lines += [head + "p | Holm p |", "|---" * (9 + means) + "|"]
        for t in tests:
            counts = f"{t['a_only']} | {t['b_only']}" if "a_only" in t else "- | -"
            diff = (f"{t['diff']:+.3f} [{t['ci'][0]:+.3f}, {t['ci'][1]:+.3f}] | " if "diff" in t else "- | ") if means else ""
            lines.append(f"| {t['a']} | {t['b']} | {t['measure']} | {t['unit']} | {t['n_pairs']} | {counts} | "
                         f"{diff}{t['p_value']:.3g} | {t['p_holm']:.3g} |")
    marked = doc.get("footnotes", {})
    if notes := [marked[p]["note"] for p in dict.fromkeys(p for p, _ in rows) if p in marked]:
        from groundplan.evaluation.marks import LEGEND

        lines += ["", *(f"{line}  " for line in [LEGEND, *notes[:-1]]), notes[-1]]
    return "\n".join(lines) + "\n"


def block(data: Path, m: re.Match) -> str:
    """A marked block's table: :func:`render_markdown` of the file, drawn as the marker's options say."""
    return render_markdown(load_outcomes(data), TableSpec.parse(m.group("opts"), f"{data.name}"))


def render_page(page: str | Path, write: bool = True) -> str:
    """``page`` with every marked block re-rendered from the outcomes file it names (a path relative to the
    page's folder) with the marker's options; written back when ``write``. Returns the new text."""
    from groundplan.evaluation.page_blocks import render_blocks

    return render_blocks(page, MARK, block, write)
