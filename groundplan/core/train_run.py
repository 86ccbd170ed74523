"""What every ``groundplan train`` run on Ray Train shares: its workers and where it writes and registers.

pydantic only, so a training config validates without Ray or MLflow."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class TrainRunSpec(BaseModel):
    """The Ray Train workers of a training run, its run folder and its MLflow store (a subclass adds the
    model and data, and its own ``experiment`` default)."""

    model_config = ConfigDict(extra="forbid")

    num_workers: int = Field(1, ge=1, description="Ray Train data-parallel workers (1 here; more on a cluster).")
    use_gpu: bool = Field(False, description="One GPU per worker.")
    cpus_per_worker: float = Field(1.0, gt=0, description="CPUs reserved per Ray Train worker.")
    output_dir: str = Field("outputs/train", description="Run folder root: <output_dir>/<name>/ holds the model, "
                            "Ray Train's storage and (unless tracking_uri is given) the MLflow store.")
    tracking_uri: str | None = Field(None, description="MLflow tracking/registry URI; None: MLFLOW_TRACKING_URI, else "
                                     "SQLite under <output_dir>/mlruns/mlflow.db.")
