"""The ``groundplan collect`` config (pydantic only, so it validates without Ray or an env).

Example (``configs/collect_babyai.yaml``)::

    name: collect_babyai
    env: {name: babyai, options: {}}
    splits: [train, test, test-generalize]
    source: {kind: expert}
    runtime: {workers: 2}
    output_dir: outputs/collect_babyai

Where collection runs is the ``runtime:`` section of an eval config (:class:`~groundplan.config.RuntimeSpec`),
with the fields a collection reads: the executor, the cluster, the worker actors and their resources,
reruns, timeouts and MLflow. Collection has no scorer actors (a planner source loads its model inside
each worker), so a scorer field is refused rather than ignored.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from groundplan.config import EnvSpec, LLMSpec, PlannerSpec, RuntimeSpec

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


#: the fields of a ``runtime:`` section that collection reads; any other field set is refused
COLLECT_RUNTIME_FIELDS = frozenset({
    "executor", "address", "workers", "envs_per_worker", "in_flight", "worker_cpus", "worker_resources",
    "max_episode_retries", "call_timeout_s", "start_timeout_s", "mlflow"})
#: where each key of the collect config before its ``runtime:`` section went
MOVED_TO_RUNTIME = {"executor": "executor", "workers": "workers", "worker_cpus": "worker_cpus",
                    "max_retries": "max_episode_retries", "ray_address": "address", "mlflow": "mlflow"}


class CollectRuntime(RuntimeSpec):
    """A collection's ``runtime:`` section: :class:`~groundplan.config.RuntimeSpec` with the defaults
    collection has always had (a worker's sim keeps its own core busy, so fewer workers with a whole CPU
    each, and two reruns of a trajectory whose worker died)."""

    workers: int = Field(2, ge=1, le=1024, description="collection worker actors (processes)")
    worker_cpus: float = Field(1.0, gt=0, description="CPUs reserved per collection worker (its sims run on them)")
    max_episode_retries: int = Field(2, ge=0, le=100, description="reruns of a trajectory whose worker died")

    @model_validator(mode="after")
    def _only_what_collection_reads(self) -> "CollectRuntime":
        unused = sorted(self.model_fields_set - COLLECT_RUNTIME_FIELDS)
        if unused:
            raise ValueError(
                f"collection does not use runtime.{', runtime.'.join(unused)}: it starts no LLM scorer actors or "
                f"affordance server (a planner source loads its model inside each worker); it reads runtime."
                f"{', runtime.'.join(sorted(COLLECT_RUNTIME_FIELDS))}")
        return self


class CollectConfig(BaseModel):
    """One data-collection run: an env, its splits, a source, where it runs and the output folder."""

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
    label_listed: bool = Field(False, description="also record, per step, whether each listed action was feasible "
                               "there by the simulator's own precondition check (listed_feasible): labels for a Can "
                               "of feasibility (can_negatives: feasibility); the env must declare feasibility_labels")
    max_steps: int = Field(30, ge=1, le=1000, description="step cap per trajectory (the done step included)")
    runtime: CollectRuntime = Field(default_factory=CollectRuntime, description="where it runs: 'ray' (worker "
                                    "actors, each with envs_per_worker envs) or 'local' (one worker in this "
                                    "process), and whether the dataset is logged to MLflow (schema, counts per split)")
    shard_size: int = Field(500, ge=1, description="trajectories per Parquet shard")
    output_dir: str = Field(..., min_length=1, description="dataset folder: data/ shards, mlruns/ tracking store")

    @model_validator(mode="before")
    @classmethod
    def _runtime_keys_moved(cls, data: Any) -> Any:
        """A config written before the ``runtime:`` section (a top-level ``workers: 2``) is refused naming
        the field's new place, not as an unknown key."""
        if isinstance(data, dict):
            moved = [k for k in MOVED_TO_RUNTIME if k in data]
            if moved:
                raise ValueError("the collect config's runtime settings are in its runtime: section now, as in an "
                                 "eval config: " + "; ".join(f"'{k}' is runtime.{MOVED_TO_RUNTIME[k]}" for k in moved))
        return data

    @property
    def data_dir(self) -> Path:
        return Path(self.output_dir) / "data"


def load_collect_config(path: str | Path, overrides: list[str] | None = None) -> CollectConfig:
    """Read a YAML collect config, apply ``key=value`` overrides, validate (errors name the field)."""
    from groundplan.config import load_yaml_model

    return load_yaml_model(CollectConfig, path, overrides, "collect config")
