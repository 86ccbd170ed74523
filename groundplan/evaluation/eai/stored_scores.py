"""The 15 stored LLMs' scores (``groundplan eai score``) as a results page's tables, rendered from a committed
file of per-task verdicts.

``groundplan eai score --output DIR`` judges every stored answer of EAI's action-sequencing benchmark (Li et
al. 2024, Sec. 3.3) and writes each verdict (``verdicts.jsonl``) and what each correction alone changes
(``summary.json``). :func:`export` keeps of them what the tables are computed from: per model, semantics and
task, whether the task is scored, success, executability, the error type and the goal counts (never the
answer's program), the evaluator's model order (its runtime-error counts carry over in that order) and the
corrections' counts. :func:`render_markdown` recomputes from that file the rows (:func:`~.table.aggregate`:
rates with 95% Wilson intervals, error counts, goal satisfaction), the paired official/corrected tests
(exact McNemar, Holm over the models) and the corrections table, with the same code the command prints
them with. A page holds the result between ``<!-- eai-scores: FILE -->`` and ``<!-- /eai-scores -->``;
``groundplan tables --render PAGE`` rewrites it and a test fails when the page differs.

    python -m groundplan.evaluation.eai.stored_scores OUT.json --from DIR   # export a scored folder
"""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

from groundplan.core.errors import InvalidInputError
from groundplan.core.paths import atomic_write_text
from groundplan.evaluation.eai.judge import Verdict
from groundplan.evaluation.eai.semantics import SEMANTICS
from groundplan.evaluation.eai.table import (
    CORRECTIONS_TITLE,
    ROW_COLUMNS,
    aggregate,
    carry_runtime_errors,
    correction_cell,
    paired_success_tests,
    row_cells,
)
from groundplan.evaluation.page_blocks import markdown_table

FORMAT = 1
#: what each verdict keeps, in this order (the rest of :class:`~.judge.Verdict` is the answer itself)
FIELDS = ("task_id", "scored", "error_type", "parse_error", "executable", "success", "additional_steps",
          "node_matched", "edge_matched", "action_matched", "node_total", "edge_total", "action_total")
#: a page's block holding the tables of a committed file, the file named relative to the page's folder
MARK = re.compile(r"(?P<open><!-- eai-scores: (?P<path>\S+) -->\n)(?P<body>.*?)(?P<close><!-- /eai-scores -->)", re.S)


def export(folder: str | Path) -> dict[str, Any]:
    """The data file's content from a folder ``groundplan eai score`` wrote (both semantics, with the
    corrections counted)."""
    folder = Path(folder)
    try:
        summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
        lines = (folder / "verdicts.jsonl").read_text(encoding="utf-8").splitlines()
    except (OSError, ValueError) as e:
        raise InvalidInputError(f"{folder} is not a folder `groundplan eai score` wrote: {e}") from e
    if set(summary.get("rows", {})) != {"official", "corrected"} or not summary.get("corrections"):
        raise InvalidInputError(f"{folder}: score both semantics with the corrections counted "
                                "(`groundplan eai score` without --semantics or --no-corrections)")
    if "evaluator_order" not in summary:
        raise InvalidInputError(f"{folder}: its summary.json names no evaluator_order; score it again")
    models = summary["models"]
    verdicts: dict[str, dict[str, list[list[Any]]]] = {n: {m: [] for m in models} for n in ("official", "corrected")}
    for line in lines:
        v = json.loads(line)
        verdicts[v["semantics"]][v["model"]].append([v[f] for f in FIELDS])
    return {"format": FORMAT, "models": models, "evaluator_order": summary["evaluator_order"],
            "tasks": {k: summary["tasks"][k] for k in ("all", "official", "full")},
            "fields": list(FIELDS), "verdicts": verdicts,
            "corrections": {c: info["per_model"] for c, info in summary["corrections"].items()}}


def load(path: str | Path) -> dict[str, Any]:
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise InvalidInputError(f"cannot read the EAI scores file {path}: {e}") from e
    if doc.get("format") != FORMAT or doc.get("fields") != list(FIELDS):
        raise InvalidInputError(f"{path}: not an EAI scores file of format {FORMAT}")
    return doc


def _verdicts(doc: dict[str, Any], semantics: str, model: str) -> list[Verdict]:
    return [Verdict(semantics=semantics, steps=[], **dict(zip(FIELDS, row))) for row in doc["verdicts"][semantics][model]]


def render_markdown(doc: dict[str, Any]) -> str:
    """The rows of each semantics, the paired official/corrected tests and what each correction changes."""
    models, order = doc["models"], doc["evaluator_order"]
    verdicts = {n: {m: _verdicts(doc, n, m) for m in models} for n in ("official", "corrected")}
    out: list[str] = []
    for name, semantics in (("official", SEMANTICS["official"]), ("corrected", SEMANTICS["corrected"])):
        rows = carry_runtime_errors([aggregate(m, verdicts[name][m], semantics) for m in order], semantics)
        rows.sort(key=lambda r: models.index(r.model))
        out += [f"EAI action sequencing, {name} semantics (rates: % [95% Wilson interval]; goals: satisfied/total "
                "of each kind, summed over the scored tasks):", ""]
        out += markdown_table(list(ROW_COLUMNS), [row_cells(r) for r in rows]) + [""]
    out += ["Official against corrected success on the tasks both score (exact McNemar, Holm over the "
            f"{len(models)} models):", ""]
    tests = paired_success_tests(verdicts["official"], verdicts["corrected"])
    out += markdown_table(["model", "pairs", "official only", "corrected only", "p", "Holm p"],
                  [[t["model"], str(t["n_pairs"]), str(t["official_only"]), str(t["corrected_only"]),
                    f"{t['p_value']:.3g}", f"{t['p_holm']:.3g}"] for t in tests]) + [""]
    corrections = doc["corrections"]
    out += [CORRECTIONS_TITLE + ":", ""]
    out += markdown_table(["model", *corrections], [[m, *(correction_cell(corrections[c][m]) for c in corrections)]
                                           for m in models])
    t = doc["tasks"]
    out += ["", f"Tasks: {t['all']} (official set {t['official']}, full set {t['full']})."]
    return "\n".join(out) + "\n"


def block(data: Path, m: re.Match) -> str:
    """A marked block's tables, from the file it names."""
    return render_markdown(load(data))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m groundplan.evaluation.eai.stored_scores",
                                     description="Export a `groundplan eai score` folder as a results data file.")
    parser.add_argument("out", metavar="OUT.json", help="the data file to write")
    parser.add_argument("--from", dest="folder", required=True, metavar="DIR", help="the folder `eai score` wrote")
    args = parser.parse_args(argv)
    try:
        doc = export(args.folder)
    except InvalidInputError as e:
        parser.exit(2, f"error: {e}\n")
    atomic_write_text(Path(args.out), json.dumps(doc, separators=(",", ":")) + "\n")
    print(render_markdown(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
