"""Two runs compared on the episodes they share (``groundplan compare RUN_A RUN_B``): what a researcher reads
after every model or prompt change.

Two runs' means differ by chance when their episodes differ, so only episodes both ran count: same env,
task and seed (:func:`~groundplan.evaluation.summary.episode_key`), the env options checked equal first
(:func:`check_env_options`). Per planner label both runs have:

- success on each side with its 95% Wilson interval (Wilson 1927), the discordant pairs (solved only in A,
  only in B) and the exact McNemar p-value (McNemar 1947), for every 0/1 measure (``Measure.proportion``);
- every other measure the env declares (``EnvCapabilities.measures``) as the paired difference B − A with
  its 95% normal interval over the per-episode differences; a ``partial`` measure (e.g. Kendall tau,
  defined on successful episodes only) is paired on the episodes where both sides have it;
- the McNemar p-values Holm-adjusted (Holm 1979) over every test the report prints, and a difference
  called significant only by the adjusted value.

Episodes and planners that only one run has are counted and named, never dropped silently. A planner that
read simulator truth is marked from what its traces declare (``†`` oracle, ``‡`` stand-in,
:mod:`groundplan.evaluation.marks`), each side's, and the report says when the two sides declare differently.
"""
from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from groundplan.core.errors import InvalidInputError
from groundplan.core.measures import measure_info
from groundplan.core.stats import wilson_interval
from groundplan.core.truth import unique
from groundplan.evaluation.marks import (
    LEGEND,
    Marks,
    declarations_of,
    trace_marks,
    with_config_declarations,
)
from groundplan.evaluation.summary import episode_key, format_rate, holm, outcomes, paired_test
from groundplan.evaluation.tables import run_configs, run_folders, run_traces
from groundplan.rollout.traces import EpisodeTrace

log = logging.getLogger(__name__)

#: the level at which a Holm-adjusted p-value is called significant
ALPHA = 0.05
#: measures every episode has, tested before the env's own (SayCan Sec. 5.1)
SUCCESS_MEASURES = ("execution_success", "plan_success")

EpisodeKey = tuple[str, str, int]  # env, task id, seed


@dataclass
class PairedRuns:
    """The episodes two runs share, per planner label, and what only one of them has."""

    #: planner -> (A's trace, B's trace) of each shared episode, in A's order
    shared: dict[str, list[tuple[EpisodeTrace, EpisodeTrace]]] = field(default_factory=dict)
    #: planner -> episodes of that planner only A (only B) ran, for planners both runs have
    only_a: dict[str, int] = field(default_factory=dict)
    only_b: dict[str, int] = field(default_factory=dict)
    #: planner labels one run has and the other does not
    planners_only_a: list[str] = field(default_factory=list)
    planners_only_b: list[str] = field(default_factory=list)


def _index(traces: Sequence[EpisodeTrace], side: str) -> dict[str, dict[EpisodeKey, EpisodeTrace]]:
    """planner -> episode -> trace; a repeated episode keeps its first trace, as the summary's paired tests do."""
    out: dict[str, dict[EpisodeKey, EpisodeTrace]] = defaultdict(dict)
    repeated = 0
    for t in traces:
        key = (t.env, *episode_key(t))
        if key in out[t.planner]:
            repeated += 1
            continue
        out[t.planner][key] = t
    if repeated:
        log.warning("run %s holds %d repeated episode(s) (same planner, env, task and seed); the first of each is used",
                    side, repeated)
    return out


def pair_runs(traces_a: Sequence[EpisodeTrace], traces_b: Sequence[EpisodeTrace],
              planners: Sequence[str] | None = None) -> PairedRuns:
    """Pair the episodes of two runs by planner label, env, task and seed. The env options are not in a
    trace: check them first (:func:`check_env_options`). ``planners`` keeps only those labels."""
    a, b = _index(traces_a, "A"), _index(traces_b, "B")
    if planners is not None:
        unknown = [p for p in planners if p not in a and p not in b]
        if unknown:
            raise InvalidInputError(f"--planners names {unknown}, in neither run; their planners: "
                                    f"{', '.join(dict.fromkeys([*a, *b]))}")
        a = {p: eps for p, eps in a.items() if p in planners}
        b = {p: eps for p, eps in b.items() if p in planners}
    paired = PairedRuns(planners_only_a=[p for p in a if p not in b], planners_only_b=[p for p in b if p not in a])
    for planner, eps_a in a.items():
        if planner not in b:
            continue
        eps_b = b[planner]
        paired.shared[planner] = [(t, eps_b[k]) for k, t in eps_a.items() if k in eps_b]
        paired.only_a[planner] = sum(k not in eps_b for k in eps_a)
        paired.only_b[planner] = sum(k not in eps_a for k in eps_b)
    return paired


def env_options(configs: Sequence[dict[str, Any]], side: str) -> dict[str, dict[str, Any]]:
    """env name -> its options, as the runs' ``config.json`` record them; one side holding runs of one env
    with different options cannot be paired by (env, task, seed) and is refused."""
    out: dict[str, dict[str, Any]] = {}
    for config in configs:
        env = config.get("env", {})
        name, options = env.get("name", ""), env.get("options", {})
        if name in out and out[name] != options:
            raise InvalidInputError(f"{side} holds runs of env '{name}' with different options ({out[name]} and "
                                    f"{options}); compare them one run at a time")
        out.setdefault(name, options)
    return out


def check_env_options(configs_a: Sequence[dict[str, Any]], configs_b: Sequence[dict[str, Any]],
                      ignore: bool = False) -> list[str]:
    """The differences between the two runs' env options, one line per env both use. Episodes with the
    same task and seed under different options (failure rates, modes) are different experiments, so this
    raises unless ``ignore``; with it the lines are returned for the report to print."""
    a, b = env_options(configs_a, "RUN_A"), env_options(configs_b, "RUN_B")
    differ = [f"env '{name}': RUN_A options {a[name]} != RUN_B options {b[name]}"
              for name in a if name in b and a[name] != b[name]]
    if differ and not ignore:
        raise InvalidInputError("the two runs' env options differ, so their episodes are not the same "
                                f"experiment: {'; '.join(differ)} (--ignore-env-options pairs them anyway)")
    return differ


def _declared_measures(env: str) -> tuple[str, ...]:
    """The measures the env declares it reports (``EnvCapabilities.measures``)."""
    from groundplan.envs import ENVS

    return ENVS.get(env).capabilities.measures


def _difference(pairs: list[tuple[EpisodeTrace, EpisodeTrace]], measure: str) -> dict[str, Any] | None:
    """B − A of an env measure over the pairs, mean with its 95% interval: the continuous side of
    :func:`~groundplan.evaluation.summary.paired_test`. A partial measure pairs the episodes where both
    sides have it; any other counts a missing value as 0, as the summary's means do. None when no pair has
    the measure. Its p-value is not reported: the report's Holm family is the McNemar tests."""
    info = measure_info(measure)
    partial = info is not None and info.partial
    if partial:
        values = [(a.metrics[measure], b.metrics[measure]) for a, b in pairs
                  if measure in a.metrics and measure in b.metrics]
    elif any(measure in a.metrics or measure in b.metrics for a, b in pairs):
        values = [(a.metrics.get(measure, 0.0), b.metrics.get(measure, 0.0)) for a, b in pairs]
    else:
        values = []
    test = paired_test(values, proportion=False)
    if test is None:
        return None
    return {"measure": measure, **{k: test[k] for k in ("n_pairs", "a_mean", "b_mean", "diff", "ci")},
            "partial": partial, "higher_is_better": info.higher_is_better if info is not None else True}


def compare_runs(paired: PairedRuns) -> dict[str, Any]:
    """The comparison as a dict (what ``--json`` writes): per planner, n shared, each side's success with
    its Wilson interval, the McNemar tests of every 0/1 measure and the paired differences of every env
    measure; ``p_holm`` adjusts each test over all the tests of the comparison."""
    planners: list[dict[str, Any]] = []
    tests: list[dict[str, Any]] = []
    for planner, pairs in paired.shared.items():
        envs = list(dict.fromkeys(a.env for a, _ in pairs))
        env_measures = [m for env in envs for m in _declared_measures(env)]
        measures = list(dict.fromkeys([*SUCCESS_MEASURES, *env_measures]))
        n = len(pairs)
        success = {}
        for side, idx in (("a", 0), ("b", 1)):
            k = sum(bool(p[idx].execution_success) for p in pairs)
            success[side] = {"successes": k, "n": n, "rate": k / n if n else 0.0, "ci": list(wilson_interval(k, n))}
        declared = {side: [d.to_dict() for d in trace_marks(p[idx] for p in pairs).of(planner)]
                    for side, idx in (("a", 0), ("b", 1))}
        row: dict[str, Any] = {"planner": planner, "envs": envs, "n_shared": n, "only_a": paired.only_a[planner],
                               "only_b": paired.only_b[planner], "success": success, "tests": [],
                               "differences": [], "oracles": declared}
        for m in measures:
            info = measure_info(m)
            if info is not None and info.proportion:
                record = paired_test(outcomes(pairs, m), proportion=True)
                if record is not None:
                    record = {"planner": planner, "measure": m, **record}
                    row["tests"].append(record)
                    tests.append(record)
            diff = None if m in SUCCESS_MEASURES else _difference(pairs, m)  # success: the rates and McNemar
            if diff is not None:
                row["differences"].append(diff)
        planners.append(row)
    holm(tests, "McNemar tests of this comparison", alpha=ALPHA)
    return {
        "pairing": "same planner label, env, task id and seed; env options checked equal",
        "interval": "95%: Wilson score for rates, mean ± 1.96 SE for paired differences (B − A)",
        "alpha": ALPHA,
        "n_shared": sum(len(p) for p in paired.shared.values()),
        "only_a": sum(paired.only_a.values()),
        "only_b": sum(paired.only_b.values()),
        "planners_only_a": paired.planners_only_a,
        "planners_only_b": paired.planners_only_b,
        "planners": planners,
    }


def _signed(x: float) -> str:
    return f"{x:+.3g}"


def compare_report(result: dict[str, Any], name_a: str = "A", name_b: str = "B",
                   notes: Sequence[str] = ()) -> str:
    """:func:`compare_runs`'s result as plain-text lines (markdown lists), for the terminal or a PR."""
    lines = [f"Compare A = {name_a} vs B = {name_b} on their shared episodes (same planner, env, task, seed)",
             f"shared episodes: {result['n_shared']}; only in A: {result['only_a']}; only in B: {result['only_b']}"]
    lines += [f"note: {n}" for n in notes]
    if result["planners_only_a"]:
        lines.append(f"planners only in A: {', '.join(result['planners_only_a'])}")
    if result["planners_only_b"]:
        lines.append(f"planners only in B: {', '.join(result['planners_only_b'])}")
    footnotes: list[str] = []
    for row in result["planners"]:
        sa, sb = row["success"]["a"], row["success"]["b"]
        planner, declared = row["planner"], row.get("oracles", {})
        a, b = declarations_of(declared.get("a")), declarations_of(declared.get("b"))
        lines += ["", (f"## {planner}: {row['n_shared']} shared episodes "
                       f"({row['only_a']} only in A, {row['only_b']} only in B)")]
        if a or b:
            both = Marks({planner: unique(a + b)})
            lines.append(f"- {both.mark(planner)} reads simulator truth: {', '.join(d.name for d in both.of(planner))}")
        if a != b:
            lines.append(f"- note: A and B declare different simulator truth for this planner (A: "
                         f"{', '.join(d.name for d in a) or 'none'}; B: {', '.join(d.name for d in b) or 'none'})")
        for side, ds in ((("", a),) if a == b else (("A: ", a), ("B: ", b))):
            note = Marks({planner: ds}).footnote(planner)
            if note is not None:
                footnotes.append(side + note)
        if not row["n_shared"]:
            continue
        lines.append(f"- execution success: A {format_rate(sa['successes'], sa['n'], *sa['ci'])}, "
                     f"B {format_rate(sb['successes'], sb['n'], *sb['ci'])} (95% Wilson)")
        for t in row["tests"]:
            verdict = "significant" if t["significant"] else "not significant"
            lines.append(f"- {t['measure']}: solved only in A {t['a_only']} / only in B {t['b_only']} of "
                         f"{t['n_pairs']}, McNemar p={t['p_value']:.3g}, Holm p={t['p_holm']:.3g} ({verdict})")
        for d in row["differences"]:
            lo, hi = d["ci"]
            what = " (episodes where both have it)" if d["partial"] else ""
            lines.append(f"- {d['measure']}: B − A = {_signed(d['diff'])} [{_signed(lo)}, {_signed(hi)}], "
                         f"A {d['a_mean']:.3g}, B {d['b_mean']:.3g}, n={d['n_pairs']}{what}")
    n_tests = sum(len(r["tests"]) for r in result["planners"])
    if n_tests:
        lines += ["", f"Holm-adjusted over the {n_tests} McNemar tests above; significant: Holm p < {ALPHA}."]
    if footnotes:
        lines += ["", LEGEND, *footnotes]
    return "\n".join(lines) + "\n"


def relabel(traces: Sequence[EpisodeTrace], labels: Mapping[str, str]) -> list[EpisodeTrace]:
    """``traces`` with each planner label in ``labels`` replaced by its value (the other run's label it is paired
    with: a fine-tuned model's row against its frozen twin's, whose labels name their prompts differently)."""
    return [replace(t, planner=labels[t.planner]) if t.planner in labels else t for t in traces]


def compare_folders(run_a: str | Path, run_b: str | Path, planners: Sequence[str] | None = None,
                    ignore_env_options: bool = False, pairs: Mapping[str, str] | None = None) -> tuple[dict[str, Any], str]:
    """``groundplan compare``: read both runs as ``groundplan tables`` does (a run folder or a folder of
    runs), refuse differing env options before any pairing (unless ``ignore_env_options``), pair and
    compare; returns the dict form and the report text. ``pairs`` maps a planner label of A to a label of
    B to pair it with (default: the same label)."""
    folders_a, folders_b = run_folders([run_a]), run_folders([run_b])
    notes = check_env_options(run_configs(folders_a), run_configs(folders_b), ignore=ignore_env_options)
    traces_b = with_config_declarations(run_traces(folders_b), run_configs(folders_b))
    if pairs:
        missing = [b for b in pairs.values() if b not in {t.planner for t in traces_b}]
        if missing:
            raise InvalidInputError(f"--pair names {missing}, not a planner of {run_b}")
        traces_b = relabel(traces_b, {b: a for a, b in pairs.items()})
    paired = pair_runs(with_config_declarations(run_traces(folders_a), run_configs(folders_a)), traces_b, planners)
    if not any(paired.shared.values()):
        raise InvalidInputError(f"{run_a} and {run_b} share no episode (same planner label, env, task and seed); "
                                f"planners in A: {', '.join([*paired.shared, *paired.planners_only_a]) or 'none'}, "
                                f"in B: {', '.join([*paired.shared, *paired.planners_only_b]) or 'none'}")
    result = compare_runs(paired)
    result["run_a"], result["run_b"] = str(run_a), str(run_b)
    result["env_option_differences"] = notes
    notes = [f"env options differ, paired anyway (--ignore-env-options): {n}" for n in notes]
    notes += [f"A's planner '{a}' is paired with B's '{b}'" for a, b in (pairs or {}).items()]
    return result, compare_report(result, str(run_a), str(run_b), notes)
