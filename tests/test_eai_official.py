"""groundplan's ``official`` EAI judge against EAI's own evaluator (Li et al. 2024, Sec. 3.3), run side by
side on a sample: the same stored outputs of three models on four tasks (one that the evaluator drops,
successes, a parse error, hallucinations, missing steps, an additional step). The evaluator's summary
(every rate, as it rounds them) and its per-task error records must come out the same."""
from __future__ import annotations

import json
import logging

import pytest

pytest.importorskip("virtualhome_eval")

from groundplan.envs.virtualhome.simulator import package_root  # noqa: E402
from groundplan.evaluation.eai.judge import EAIJudge  # noqa: E402
from groundplan.evaluation.eai.semantics import OFFICIAL  # noqa: E402
from groundplan.evaluation.eai.table import (  # noqa: E402
    aggregate,
    carry_runtime_errors,
    evaluator_model_order,
    official_summary,
)

TASKS = ["181_1", "11_1", "481_2", "27_2"]
MODELS = ["gpt-4o-2024-05-13", "llama-3-8b-chat", "cohere-command-r"]
#: the evaluator's per-task error names (``error_info``) for groundplan's error types
ERROR_NAMES = {"parsing": "parsing error", "hallucination": "hallucination error", "parameter": "parameter error",
               "wrong_order": "wrong_temporal_order", "missing_step": "missing_step", "affordance": "affordance_error"}


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    """The sample's stored outputs as the evaluator reads them (``<dir>/action_sequence/<model>_outputs.json``)."""
    root = tmp_path_factory.mktemp("eai_sample")
    folder = root / "action_sequence"
    folder.mkdir()
    stored = package_root() / "llm_response" / "action_sequence"
    outputs = {}
    for model in MODELS:
        rows = [r for r in json.loads((stored / f"{model}_outputs.json").read_text()) if r["identifier"] in TASKS]
        assert len(rows) == len(TASKS)
        (folder / f"{model}_outputs.json").write_text(json.dumps(rows))
        outputs[model] = rows
    return root, outputs


def _run_evaluator(responses, out):
    from virtualhome_eval.evaluation.action_sequence.scripts.evaluate_results import evaluate_results

    root = package_root()

    class Args:  # the evaluator's argparse namespace
        dataset = "virtualhome"
        resource_dir = str(root / "resources")
        dataset_dir = str(root / "dataset")
        llm_response_path = str(responses)
        output_dir = str(out)

    previous = logging.root.level
    logging.root.setLevel(logging.WARNING)  # the evaluator logs every step at INFO
    try:
        return evaluate_results(Args())
    finally:
        logging.root.setLevel(previous)


def test_official_judge_reproduces_the_evaluator_on_a_sample(sample, tmp_path):
    responses, outputs = sample
    official = _run_evaluator(responses, tmp_path)
    judge = EAIJudge()
    assert sorted(official) == sorted(MODELS)
    order = evaluator_model_order(str(responses / "action_sequence"))
    verdicts = {m: [judge.score_text(r["identifier"], r["llm_output"], OFFICIAL) for r in outputs[m]] for m in order}
    rows = carry_runtime_errors([aggregate(m, verdicts[m], OFFICIAL) for m in order], OFFICIAL)
    for model, row in zip(order, rows):
        summary, error_info = official[model]
        assert row.n == 3  # 27_2 has two edge goals: the evaluator's gold test drops it
        assert official_summary(row) == summary, model
        scored = {v.task_id: v for v in verdicts[model] if v.scored}
        assert set(error_info) == {t for t, v in scored.items() if not v.gold_identical}
        for task_id, info in error_info.items():
            v = scored[task_id]
            assert info["executable"] == v.executable, (model, task_id)
            assert info["error_type"] == (ERROR_NAMES[v.error_type] if v.error_type else None), (model, task_id)
            expected_action = v.script[v.failing_step] if v.error_type not in (None, "parsing", "hallucination",
                                                                               "parameter") else None
            assert info["error_action"] == expected_action, (model, task_id)


def test_runtime_counts_carry_over_between_models(sample):
    """The evaluator's runtime-error counters outlive its loop over models: the carried figures are the
    running sums, the corrected counting each model's own."""
    _, outputs = sample
    judge = EAIJudge()
    rows = [aggregate(m, [judge.score_text(r["identifier"], r["llm_output"], OFFICIAL) for r in outputs[m]], OFFICIAL)
            for m in MODELS]
    own = [r.errors["missing_step"] for r in rows]
    assert own == [0, 1, 2]  # gpt-4o none, llama-3-8b on 11_1, command-r on 181_1 and 481_2
    carried = carry_runtime_errors(rows, OFFICIAL)
    assert [r.errors["missing_step"] for r in carried] == [0, 1, 3]
    assert [r.errors["hallucination"] for r in carried] == [r.errors["hallucination"] for r in rows]
    per_model = OFFICIAL.model_copy(update={"runtime_errors_per_model": True})
    assert [r.errors["missing_step"] for r in carry_runtime_errors(rows, per_model)] == own


def test_the_sample_covers_the_error_types(sample):
    """The sample is only a check if it holds the cases that can go wrong: these are its verdicts."""
    _, outputs = sample
    judge = EAIJudge()
    got = {(m, r["identifier"]): judge.score_text(r["identifier"], r["llm_output"], OFFICIAL)
           for m in MODELS for r in outputs[m]}
    assert got[("gpt-4o-2024-05-13", "11_1")].success
    assert got[("gpt-4o-2024-05-13", "481_2")].additional_steps == [2]
    assert got[("cohere-command-r", "11_1")].error_type == "parsing"
    assert got[("llama-3-8b-chat", "181_1")].error_type == "hallucination"
    assert got[("cohere-command-r", "181_1")].error_type == "missing_step"
    assert got[("llama-3-8b-chat", "11_1")].error_type == "missing_step"
    assert not got[("gpt-4o-2024-05-13", "27_2")].scored
