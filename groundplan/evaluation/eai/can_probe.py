"""Which learned Can, and which LLM score, SayCan uses on EAI's tasks: chosen on validation tasks.

SayCan picks argmax over skills of log p_LLM + log p_can (Ahn et al. 2022, Algorithm 1), so on EAI's 125-450
skills a task a scorer helps only if it ranks the step the task needs above the others. EAI's tasks reach
no goal with a 135M or 270M model, so an episode's success cannot tell two scorers apart; the rank of the
gold step can. This walks each task's gold program (the history is the gold one) and, at each of its first
steps, ranks every skill by

- ``can <model>``: the learned Can's p_can alone;
- ``LLM sum`` / ``LLM mean``: the planner's own prompt scored by the LM, the option's token log-probs
  summed or averaged (``SayCanConfig.llm_score``);
- ``SayCan <sum|mean> × <model>``: the two combined as the planner combines them.

The tasks are a model's *validation* tasks (its ``lineage.json``), held out from its training by what it
reads, and never the test sample, so the choice it makes is made on validation (the guide's rule). The
data file keeps one row per gold step; :func:`block` renders the table and the paired comparisons from
it (``<!-- can-probe: FILE -->``).
"""
from __future__ import annotations

import json
import re
import statistics
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np

from groundplan.core.stats import clustered_mean_interval, holm_adjust, mcnemar_exact

MARK = re.compile(r"(?P<open><!-- can-probe: (?P<path>\S+) -->\n)(?P<body>.*?)(?P<close><!-- /can-probe -->)", re.S)
LLM_SCORES = ("sum", "mean")


def rank_of(values: np.ndarray, index: int) -> int:
    """1 + the number of skills scored strictly higher than ``values[index]`` (ties favour the gold step,
    as SayCan's first-maximum argmax may)."""
    return 1 + int(np.sum(values > values[index]))


def feasibility_auc(can: np.ndarray, feasible: np.ndarray) -> float | None:
    """How well ``can`` separates the feasible skills of a step from the infeasible ones: the probability that a
    feasible skill, drawn at random, scores above an infeasible one (ties count half; the area under the ROC
    curve, the Mann-Whitney U over the pairs). None when the step has no skill of one kind."""
    pos, neg = can[feasible], can[~feasible]
    if not len(pos) or not len(neg):
        return None
    return float(np.mean((pos[:, None] > neg[None, :]) + 0.5 * (pos[:, None] == neg[None, :])))


def probe(task_ids: Sequence[str], cans: Mapping[str, Any], lm: Any | None = None, prompt: str = "saycan_eai",
          steps: int = 3, max_instruction_chars: int = 20000, feasibility: bool = False) -> Iterator[dict[str, Any]]:
    """One row per probed gold step, yielded as it is scored (a step costs seconds to a minute): the task,
    the step, the number of skills and the gold step's rank under every scorer (module docstring).
    ``cans`` maps a label to a ``saycanpay_learned`` source; ``lm`` (a
    :class:`~groundplan.llm.base.LanguageModel`) adds the LLM and SayCan scorers, through SayCan's prompt
    ``prompt`` built as the planner builds it. ``feasibility`` adds, per Can, :func:`feasibility_auc` of the
    step's skills against the simulator's own precondition check after the gold history (``auc``; the env
    replays the gold steps: the probe reads the simulator's truth to measure the Can, as a test set's labels)."""
    from groundplan.core.validation import validate_instruction
    from groundplan.envs.base import feasible_in
    from groundplan.envs.virtualhome.eai.env import task_skills
    from groundplan.envs.virtualhome.eai.tasks import load_task
    from groundplan.planners.prompt_files import load_prompt
    from groundplan.planners.saycan import build_prompt, format_step, option_logprob

    few_shot = load_prompt(prompt) if lm is not None else ""
    for task_id in task_ids:
        task = load_task(task_id)
        skills = list(task_skills(task_id))
        gold = list(task.reference_skills)
        text = build_prompt(few_shot, validate_instruction(task.prompt, max_instruction_chars))
        env = observation = None
        if feasibility:
            from groundplan.envs.virtualhome.eai.env import EAIVirtualHomeEnv

            env = EAIVirtualHomeEnv(task_set="all", ids=[task_id])
            observation = env.reset(env.tasks()[0], 0)
        for t in range(min(steps, len(gold))):
            if gold[t] not in skills:  # a gold line EAI's vocabulary lacks (e.g. [SLEEP]): nothing to rank
                break
            g = skills.index(gold[t])
            ranks: dict[str, int] = {}
            aucs: dict[str, float | None] = {}
            log_can = {}
            feasible = np.array(feasible_in(observation, skills, env.done_skill)) if env is not None else None
            for label, source in cans.items():
                can = np.asarray(source.score_sequences(task.prompt, "", [(gold[:t], s) for s in skills]).can, dtype=float)
                ranks[f"can {label}"] = rank_of(can, g)
                if feasible is not None:
                    aucs[label] = feasibility_auc(can, feasible)
                with np.errstate(divide="ignore"):
                    log_can[label] = np.log(can)
            if lm is not None:
                scores = lm.score(text, [" " + s for s in skills])
                for mode in LLM_SCORES:
                    llm = np.array([option_logprob(s, mode) for s in scores], dtype=float)
                    ranks[f"LLM {mode}"] = rank_of(llm, g)
                    for label, lc in log_can.items():
                        ranks[f"SayCan {mode} × {label}"] = rank_of(llm + lc, g)
            row = {"task": task_id, "step": t + 1, "skills": len(skills), "gold": gold[t], "ranks": ranks}
            if feasible is not None:
                row.update(feasible=int(feasible.sum()), auc=aucs)
                observation = env.execute(gold[t]).observation  # type: ignore[union-attr]
            yield row
            text += format_step(gold[t], t + 1, False)


def _rank(scorer: str) -> Callable[[Mapping[str, Any]], float]:
    """A row's gold rank under ``scorer``; ``random``: a random ranking's expected rank, (n + 1) / 2."""
    if scorer == "random":
        return lambda r: (r["skills"] + 1) / 2
    return lambda r: int(r["ranks"][scorer])


def _by_task(rows: Iterable[Mapping[str, Any]], scorer: str) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    rank = _rank(scorer)
    for r in rows:
        out.setdefault(r["task"], []).append(rank(r))
    return out


def summarise(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per scorer: gold steps, tasks, median and mean rank (the mean's interval clustered by task: a task's
    steps share its prompt and scene), gold steps in the top 10."""
    scorers = list(dict.fromkeys(k for r in rows for k in r["ranks"]))
    out = []
    for s in ["random", *scorers]:
        clusters = _by_task(rows, s)
        ranks = [x for task in clusters.values() for x in task]  # every gold step's rank, each computed once
        mean, lo, hi = clustered_mean_interval(list(clusters.values()))
        out.append({"scorer": s, "steps": len(ranks), "tasks": len(clusters), "median": statistics.median(ranks),
                    "mean": mean, "lo": lo, "hi": hi,
                    "top10": None if s == "random" else sum(r <= 10 for r in ranks)})
    return out


def _sign_test(a: Mapping[str, list[float]], b: Mapping[str, list[float]]) -> tuple[int, int, int, float]:
    """Paired by task, on the tasks both have: how many have the higher mean value under ``a``, how many under
    ``b``, and the exact two-sided sign test of those two counts (ties dropped). Returns (tasks, a higher,
    b higher, p)."""
    common = [t for t in a if t in b]
    ma = {t: statistics.mean(a[t]) for t in common}
    mb = {t: statistics.mean(b[t]) for t in common}
    a_higher, b_higher = sum(ma[t] > mb[t] for t in common), sum(mb[t] > ma[t] for t in common)
    return len(common), a_higher, b_higher, mcnemar_exact(a_higher, b_higher)


def _with_holm(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``records`` with ``p_holm``: each ``p`` Holm-adjusted over them all."""
    for rec, adj in zip(records, holm_adjust([r["p"] for r in records])):
        rec["p_holm"] = adj
    return records


def compare(rows: Sequence[Mapping[str, Any]], pairs: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    """Paired by task: the sign test on the tasks where one scorer's mean gold rank is lower than the other's
    (exact, two-sided; ties dropped), Holm-adjusted over ``pairs``."""
    out = []
    for a, b in pairs:
        tasks, a_higher, b_higher, p = _sign_test(_by_task(rows, a), _by_task(rows, b))
        out.append({"a": a, "b": b, "tasks": tasks, "a_better": b_higher, "b_better": a_higher, "p": p})
    return _with_holm(out)


def feasibility_summary(rows: Sequence[Mapping[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """From rows probed with ``feasibility``: per Can, the mean AUC of its probed steps (interval clustered by
    task), and per pair of Cans the sign test over the tasks where one's mean AUC is higher (exact, two-sided,
    ties dropped; Holm over the pairs)."""
    labels = list(dict.fromkeys(k for r in rows for k in r.get("auc", {})))
    by_task = {lab: {} for lab in labels}  # type: dict[str, dict[str, list[float]]]
    for r in rows:
        for lab, v in r.get("auc", {}).items():
            if v is not None:
                by_task[lab].setdefault(r["task"], []).append(float(v))
    summary = []
    for lab in labels:
        mean, lo, hi = clustered_mean_interval(list(by_task[lab].values()))
        summary.append({"can": lab, "steps": sum(map(len, by_task[lab].values())), "tasks": len(by_task[lab]),
                        "mean": mean, "lo": lo, "hi": hi})
    pairs = []
    for i, a in enumerate(labels):
        for b in labels[i + 1:]:
            tasks, a_higher, b_higher, p = _sign_test(by_task[a], by_task[b])
            pairs.append({"a": a, "b": b, "tasks": tasks, "a_higher": a_higher, "b_higher": b_higher, "p": p})
    return summary, _with_holm(pairs)


def choice(summary: Sequence[Mapping[str, Any]], among: Sequence[str]) -> str:
    """The rule the configs follow: the lowest median gold rank, then the lowest mean rank."""
    rows = [s for s in summary if s["scorer"] in among]
    return min(rows, key=lambda s: (s["median"], s["mean"]))["scorer"]


def format_rank(x: float) -> str:
    """A median rank as the tables print it: whole ranks without a decimal, a midpoint with one."""
    return f"{x:.0f}" if float(x).is_integer() else f"{x:.1f}"


def render_markdown(data: Mapping[str, Any]) -> str:
    """The probe's table, its paired comparisons and the choices, from one data file."""
    rows = data["rows"]
    summary = summarise(rows)
    tasks = len({r["task"] for r in rows})
    lines = [f"{data.get('title', 'Gold-step ranks')}: {len(rows)} gold steps of {tasks} {data.get('tasks', 'tasks')}, "
             f"{min(r['skills'] for r in rows)} to {max(r['skills'] for r in rows)} skills a task.", "",
             "| scorer | gold steps (tasks) | median rank of the gold step | mean rank [95% CI, clustered by task] "
             "| gold step in the top 10 |", "|---|---|---|---|---|"]
    for s in summary:
        top = "–" if s["top10"] is None else f"{s['top10']}/{s['steps']}"
        label = "random ranking (expected)" if s["scorer"] == "random" else f"`{s['scorer']}`"
        lines.append(f"| {label} | {s['steps']} ({s['tasks']}) | {format_rank(s['median'])} | {s['mean']:.1f} "
                     f"[{s['lo']:.1f}, {s['hi']:.1f}] | {top} |")
    pairs = [tuple(p) for p in data.get("pairs", [])]
    if pairs:
        lines += ["", "| paired by task (mean gold rank) | tasks | first lower | second lower | sign test p | Holm p |",
                  "|---|---|---|---|---|---|"]
        for c in compare(rows, pairs):
            lines.append(f"| `{c['a']}` vs `{c['b']}` | {c['tasks']} | {c['a_better']} | {c['b_better']} "
                         f"| {c['p']:.3g} | {c['p_holm']:.3g} |")
    for name, among in data.get("choices", {}).items():
        lines += ["", f"Chosen {name} (lowest median gold rank, then mean): **`{choice(summary, among)}`** "
                      f"among {', '.join(f'`{a}`' for a in among)}."]
    if any("auc" in r for r in rows):
        feas, pairs_f = feasibility_summary(rows)
        lines += ["", "How well each Can separates the step's feasible skills from the infeasible ones (the simulator's "
                      "own check after the gold history; AUC, 0.5 for no separation):", "",
                  "| Can | steps (tasks) | AUC, mean [95% CI, clustered by task] |", "|---|---|---|"]
        lines += [f"| `{f['can']}` | {f['steps']} ({f['tasks']}) | {f['mean']:.3f} [{f['lo']:.3f}, {f['hi']:.3f}] |"
                  for f in feas]
        if pairs_f:
            lines += ["", "| paired by task (mean AUC) | tasks | first higher | second higher | sign test p | Holm p |",
                      "|---|---|---|---|---|---|"]
            lines += [f"| `{c['a']}` vs `{c['b']}` | {c['tasks']} | {c['a_higher']} | {c['b_higher']} | {c['p']:.3g} "
                      f"| {c['p_holm']:.3g} |" for c in pairs_f]
    return "\n".join(lines) + "\n"


def block(data: Path, m: re.Match) -> str:
    """A ``<!-- can-probe: FILE -->`` block, from the probe's data file."""
    return render_markdown(json.loads(data.read_text(encoding="utf-8")))


def write(path: str | Path, rows: Sequence[Mapping[str, Any]], **meta: Any) -> Path:
    """The data file: ``meta`` (what :func:`render_markdown` reads: title, tasks, pairs, choices; and what the run
    was: models, llm, prompt, steps) and the rows."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**meta, "rows": list(rows)}, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def validation_tasks(folder: str | Path, source: str) -> list[str]:
    """The validation task ids of a trained model (its lineage), sorted; an error if it has none."""
    from groundplan.core.errors import InvalidInputError
    from groundplan.grounding.canpay.lineage import required_lineage

    lineage = required_lineage(folder, source, "its validation tasks are unknown")
    ids = sorted({e.task_id for e in lineage.examples if e.role == "validation"})
    if not ids:
        raise InvalidInputError(f"{source} carries no validation tasks in its lineage: retrain it with `groundplan train`")
    return ids

