"""The fixed small sweeps whose traces must not change under refactoring (``tests/test_golden_traces.py``).

One small sweep per shipped config, fixed seeds, the real embedded model, in-process. ``records`` reduces
a trace to what a refactor must keep: the chosen skills, every candidate's score components, each step's
success, and the outcome. ``expected_<name>.json`` beside this file was recorded before the restructure.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
CONFIGS = HERE.parents[1] / "configs"

#: config file -> overrides that shrink it to a few episodes (planner lists are replaced, not grids)
SWEEPS: dict[str, dict[str, Any]] = {
    "saycan_kitchen": {"tasks": {"families": ["nl_single_primitive", "long_horizon"], "per_family": 1}, "seeds": [0],
                       "max_steps": 5},
    "inner_monologue_tabletop": {
        "tasks": {"per_family": 1, "families": ["pick_and_place"]}, "seeds": [0], "max_steps": 4,
        "planners": [
            {"name": "inner_monologue", "label": "+Object+Scene", "options": {"feedback": ["object", "scene"]}},
            {"name": "saycan", "label": "SayCan", "affordance": "tabletop_detected", "options": {"prompt": "saycan_tabletop"}},
        ],
    },
    "zeroshot_virtualhome": {
        # recorded on 26_1 and 158_1; the suite replays 26_1 (every planner's episode is seeded by its own
        # identity, so one task replays as it did beside the other; generation makes each task cost ~35 s)
        "tasks": {"ids": ["26_1"]}, "seeds": [0], "max_steps": 4,
        "select_on": None,  # fixed planners replace the grids: nothing to choose on validation tasks
        "planners": [
            {"name": "zeroshot_vanilla", "label": "Vanilla", "options": {"num_samples": 4, "temperature": 0.3}},
            {"name": "zeroshot", "label": "Translated", "options": {"num_samples": 4, "temperature": 0.3, "epsilon": 0.4}},
            {"name": "saycan", "label": "SayCan", "affordance": "virtualhome_preconditions",
             "options": {"prompt": "saycan_virtualhome", "max_options": 30}},
        ],
    },
    # Greedy-Action and Beam-Action with learned Can/Pay (seeded heads on the embedded MiniLM: a fixed
    # model, not a trained one, since the guard is about the planner's decisions, not the model's quality)
    "saycanpay_babyai": {
        "tasks": {"families": ["pickup"], "per_family": 1}, "seeds": [0], "max_steps": 4,
        "planners": [
            {"name": "saycanpay", "label": "GA-SCP", "affordance": "saycanpay_learned",
             "options": {"prompt": "saycanpay_babyai", "done_skill": "done picking up", "decoding": "greedy_action",
                         "score": "saycanpay"}},
            {"name": "saycanpay", "label": "BA-SCP", "affordance": "saycanpay_learned",
             "options": {"prompt": "saycanpay_babyai", "done_skill": "done picking up", "decoding": "beam_action",
                         "score": "saycanpay"}},
        ],
    },
    "saynav_house": {
        "tasks": {"per_family": 1}, "seeds": [0], "max_steps": 40,
        "planners": [
            {"name": "saynav", "label": "SayNav (score)", "options": {"plan_mode": "score"}},
            {"name": "house_explore", "label": "Explore (no LLM)"},
        ],
    },
}


def canpay_models(folder: Path) -> dict[str, str]:
    """A Can and a Pay model with seeded heads on the embedded all-MiniLM-L6-v2, saved under ``folder``
    (built once; the same seed gives the same weights on every run of the same torch). Trained on no
    task, so each carries an empty lineage, which the evaluation's lineage check accepts."""
    import torch

    from groundplan.grounding.canpay.config import CanPayModelConfig
    from groundplan.grounding.canpay.lineage import Lineage, save_lineage
    from groundplan.grounding.canpay.model import CanPayModel

    out = {}
    for seed, kind in enumerate(("can", "pay")):
        target = folder / kind
        if not (target / "canpay.json").exists():
            torch.manual_seed(seed)
            CanPayModel(CanPayModelConfig(kind=kind, encoder="all-minilm-l6-v2", max_length=160)).save(target)
            save_lineage(target, Lineage(f"seeded {kind} head, untrained"))
        out[f"{kind}_model"] = str(target)
    return out


def sweep_config(name: str, output_dir: str) -> dict[str, Any]:
    """The shrunk config of ``name`` as a plain mapping (validate it with the current config loader)."""
    data = yaml.safe_load((CONFIGS / f"{name}.yaml").read_text())
    data.update(SWEEPS[name])
    data["output_dir"] = output_dir
    if name == "saycanpay_babyai":
        models = canpay_models(Path(output_dir) / "canpay_models")
        data["planners"] = [{**p, "affordance_options": models} for p in data["planners"]]
    # the recorded traces hold every option's score: SayCan's exact pruning leaves the
    # decisions unchanged but scores fewer options, so the guard compares full scoring
    data["planners"] = [{**p, "options": {**p.get("options", {}), "prune": False}} if p["name"] == "saycan" else p
                        for p in data["planners"]]
    return data


def _num(x: Any) -> Any:
    if isinstance(x, float) and math.isinf(x):
        return "-inf" if x < 0 else "inf"
    return x


def records(traces: list[Any]) -> list[dict[str, Any]]:
    """What must stay the same, per episode: identity, steps, candidates, outcome."""
    out = []
    for t in traces:
        out.append({
            "planner": t.planner, "task_id": t.task_id, "seed": t.seed,
            "steps": [{
                "chosen": s.chosen, "done": s.done, "success": s.success,
                "candidates": [[c.skill, _num(c.llm), _num(c.affordance), _num(c.combined)] for c in s.candidates],
            } for s in t.steps],
            "execution_success": t.execution_success, "plan_success": t.plan_success, "error": t.error,
            "metrics": {k: _num(v) for k, v in sorted(t.metrics.items())},
        })
    return out
