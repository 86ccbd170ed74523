"""The kitchen sweep that ``bench_exact_savings.py`` and ``bench_vs_peer.py`` both time:
``configs/saycan_kitchen.yaml`` restricted to SayCan and No-VF, in this process, without MLflow."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from groundplan.config import EvalConfig, load_config

ROOT = Path(__file__).resolve().parents[1]


def saycan_kitchen_sweep(per_family: int, seeds: Sequence[int], **update: Any) -> EvalConfig:
    """``per_family`` tasks of each family x ``seeds``; ``update`` sets further top-level fields."""
    cfg = load_config(str(ROOT / "configs" / "saycan_kitchen.yaml"))
    return cfg.model_copy(update={
        "planners": [p for p in cfg.planners if p.display in ("SayCan", "No-VF")],
        "tasks": cfg.tasks.model_copy(update={"per_family": per_family}),
        "seeds": list(seeds),
        "runtime": cfg.runtime.model_copy(update={"executor": "local", "mlflow": False}),
        **update,
    })
