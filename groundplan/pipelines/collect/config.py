"""The ``groundplan collect`` config (pydantic only, so it validates without Ray or an env).

Example (``configs/collect_babyai.yaml``)::

    name: collect_babyai
    env: {name: babyai, options: {}}
    splits: [train, test, test-generalize]
    source: {kind: expert}
    workers: 2
    output_dir: outputs/collect_babyai
"""
from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from groundplan.config import EnvSpec, LLMSpec, PlannerSpec

Split = Literal["train", "test", "test-generalize"]


class CollectSource(BaseModel):
    """Who chooses the actions: the env's expert oracle, or a registered planner (on-policy data)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["expert", "planner"] = Field("expert", description="expert oracle or registered planner")
    expert: str | None = Field(None, description="registered expert (groundplan.envs.experts.EXPERTS); "
                               "default: the one registered under the env's name")
    planner: PlannerSpec | None = Field(None, description="the planner spec, when kind is 'planner'")
    llm: LLMSpec = Field(default_factory=LLMSpec, description="the planner's language model")

    @model_validator(mode="after")
    def _planner_given(self) -> "CollectSource":
        if self.kind == "planner" and self.planner is None:
            raise ValueError("source.kind 'planner' needs source.planner (a planner spec)")
        return self


class CollectConfig(BaseModel):
    """One data-collection run: an env, its splits, a source, the worker pool and the output folder."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(..., min_length=1, description="run name (MLflow experiment)")
    env: EnvSpec = Field(..., description="registered env and its options (the split option is set per split)")
    splits: list[Split] = Field(default_factory=lambda: ["train", "test", "test-generalize"], min_length=1,
                                description="splits to collect, each from the env's deterministic task list")
    source: CollectSource = Field(default_factory=CollectSource, description="expert or planner")
    seeds: list[int] = Field(default_factory=lambda: [0], min_length=1, description="episode seeds per task")
    limit: int | None = Field(None, ge=1, description="at most this many tasks per split (None: all)")
    max_admissible: int | None = Field(512, ge=1, description="a step admitting more actions than this "
                                       "records an empty admissible list (VirtualHome admits ~4.7k per scene)")
    max_steps: int = Field(30, ge=1, le=1000, description="step cap per trajectory (the done step included)")
    executor: Literal["ray", "local"] = Field("ray", description="ray: a pool of actor workers; local: in-process")
    workers: int = Field(2, ge=1, le=1024, description="worker actors (one env each)")
    worker_cpus: float = Field(1.0, gt=0, description="CPUs reserved per worker actor")
    max_retries: int = Field(2, ge=0, le=100, description="reruns of an episode whose worker died")
    shard_size: int = Field(500, ge=1, description="trajectories per Parquet shard")
    output_dir: str = Field(..., min_length=1, description="dataset folder: data/ shards, mlruns/ tracking store")
    ray_address: str | None = Field(None, description="Ray cluster address (None: RAY_ADDRESS or a local Ray)")
    mlflow: bool = Field(True, description="log the dataset (schema, counts per split) to MLflow")

    @property
    def data_dir(self) -> Path:
        return Path(self.output_dir) / "data"


def load_collect_config(path: str | Path, overrides: list[str] | None = None) -> CollectConfig:
    """Read a YAML collect config, apply ``key=value`` overrides, validate (errors name the field)."""
    from groundplan.config import load_yaml_model

    return load_yaml_model(CollectConfig, path, overrides, "collect config")
