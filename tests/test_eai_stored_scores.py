"""The stored LLMs' EAI scores as a results page's tables: exported from what ``groundplan eai score`` wrote,
rendered from the file with the figures the command computed (rows, paired tests, corrections), and bad
files refused. The committed file's block in eai.md is re-rendered by test_outcomes."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("virtualhome_eval")

from groundplan.core.errors import InvalidInputError  # noqa: E402
from groundplan.evaluation.eai import leaderboard, stored_scores  # noqa: E402
from groundplan.evaluation.eai.table import EAIRow, correction_cell, row_cells  # noqa: E402
from groundplan.pipelines.eai.score import EAIScoreConfig, score  # noqa: E402

#: stored models whose answers on a few tasks are scored (two with different error counts to carry over)
MODELS = ("gpt-3.5-turbo-0125", "llama-3-8b-chat")
TASKS = 4


def _responses(tmp_path):
    """The first tasks of two stored models (scoring whole files would load all their tasks)."""
    folder = tmp_path / "responses"
    folder.mkdir()
    first = json.loads((leaderboard.stored_dir() / f"{MODELS[0]}_outputs.json").read_text())
    ids = sorted(r["identifier"] for r in first)[:TASKS]
    for m in MODELS:
        stored = json.loads((leaderboard.stored_dir() / f"{m}_outputs.json").read_text())
        (folder / f"{m}_outputs.json").write_text(json.dumps([r for r in stored if r["identifier"] in ids]))
    return folder


def test_the_file_renders_the_figures_eai_score_computed(tmp_path):
    scored = score(EAIScoreConfig(output=tmp_path / "scored", responses=_responses(tmp_path)))
    doc = stored_scores.export(tmp_path / "scored")
    assert "script" not in json.dumps(doc) and doc["evaluator_order"] == scored["evaluator_order"]
    path = tmp_path / "scores.json"
    path.write_text(json.dumps(doc))
    text = stored_scores.render_markdown(stored_scores.load(path))

    for name in ("official", "corrected"):
        section = text.split(f"{name} semantics")[1]
        for row in scored["rows"][name]:
            assert "| " + " | ".join(row_cells(EAIRow(**row))) + " |" in section
    for t in scored["paired_success_tests"]:
        assert f"| {t['model']} | {t['n_pairs']} | {t['official_only']} | {t['corrected_only']} | {t['p_value']:.3g} | " \
               f"{t['p_holm']:.3g} |" in text
    for m in MODELS:
        cells = [correction_cell(info["per_model"][m]) for info in scored["corrections"].values()]
        assert "| " + " | ".join([m, *cells]) + " |" in text
    assert f"Tasks: {TASKS} " in text


def test_a_folder_or_file_it_cannot_render_is_refused(tmp_path):
    score(EAIScoreConfig(output=tmp_path / "official", responses=_responses(tmp_path), semantics="official",
                         count_corrections=False))
    with pytest.raises(InvalidInputError, match="both semantics"):
        stored_scores.export(tmp_path / "official")
    with pytest.raises(InvalidInputError, match="not a folder"):
        stored_scores.export(tmp_path / "nowhere")
    (tmp_path / "other.json").write_text(json.dumps({"format": 1, "episodes": []}))
    with pytest.raises(InvalidInputError, match="not an EAI scores file"):
        stored_scores.load(tmp_path / "other.json")
