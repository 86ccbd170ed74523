"""The kitchen's expert trajectories for tests, collected as the docs collect them: ``groundplan collect
configs/collect_kitchen.yaml`` (the reference plans in the language mode), in-process, without MLflow."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "collect_kitchen.yaml"


def collect_kitchen(output_dir: str | Path, seeds: Sequence[int] = (0,), splits: Sequence[str] = ("train",)) -> Path:
    """Collect the shipped config's trajectories of ``splits`` and ``seeds`` under ``output_dir``; returns
    the dataset folder (``<output_dir>/data``)."""
    from groundplan.pipelines.collect.collect import run_collect
    from groundplan.pipelines.collect.config import load_collect_config

    cfg = load_collect_config(CONFIG, [f"output_dir={output_dir}", "runtime.executor=local", "runtime.mlflow=false",
                                       f"seeds={list(seeds)}", f"splits={list(splits)}"])
    result = run_collect(cfg, progress=False)
    assert not result.errors, result.errors
    return cfg.data_dir
