"""Typed experiment configs, loadable from YAML (DESIGN.md, "Configs").

Every field has a default and a description; unknown fields are errors that name the field, so a typo
in a YAML file fails before any model loads or actor starts.
"""
from __future__ import annotations

import hashlib
import itertools
import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from groundplan.core.errors import InvalidInputError
from groundplan.core.validation import describe_errors


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class EnvSpec(_Strict):
    name: str = Field("kitchen", description="registered env name (see `groundplan list`)")
    options: dict[str, Any] = Field(default_factory=dict, description="env-specific options, validated by the env")


class LLMSpec(_Strict):
    backend: str = Field("hf", description="registered LLM backend")
    model: str = Field("smollm2-135m-instruct", description="embedded model name, Hugging Face id or local path")
    options: dict[str, Any] = Field(default_factory=dict, description="backend options (dtype, prefix_cache_mb, ...)")


class PlannerSpec(_Strict):
    name: str = Field("saycan", description="registered planner name")
    label: str | None = Field(None, description="name shown in tables (defaults to `name`)")
    affordance: str | None = Field(None, description="registered affordance source, or none")
    affordance_options: dict[str, Any] = Field(default_factory=dict)
    options: dict[str, Any] = Field(default_factory=dict, description="planner options, validated by the planner")
    grid: dict[str, list[Any]] = Field(
        default_factory=dict,
        description="planner options to search, each with its values: the sweep runs one variant per "
        "combination, labelled '<label> [key=value ...]', and reports the best by the config's `select_by` "
        "(Zero-Shot Planners, Sec. 3.5 and A.1: every method gets its own hyperparameter search)",
    )
    group: str | None = Field(None, description="set on the variants a grid expands to: the label of that grid")

    @property
    def display(self) -> str:
        return self.label or self.name

    @field_validator("grid")
    @classmethod
    def _grid_values(cls, v: dict[str, list[Any]]) -> dict[str, list[Any]]:
        for key, values in v.items():
            if not values:
                raise ValueError(f"grid '{key}' lists no values")
        return v

    def variants(self) -> list["PlannerSpec"]:
        """This planner, or one planner per combination of its grid's values (grid keys override
        ``options``)."""
        if not self.grid:
            return [self]
        keys = list(self.grid)
        out = []
        for values in itertools.product(*(self.grid[k] for k in keys)):
            chosen = dict(zip(keys, values))
            label = f"{self.display} [" + " ".join(f"{k}={v}" for k, v in chosen.items()) + "]"
            out.append(self.model_copy(update={"options": {**self.options, **chosen}, "label": label, "grid": {},
                                               "group": self.display}))
        return out


class TaskSelection(_Strict):
    families: list[str] | None = Field(None, description="task families to run; null = all")
    per_family: int | None = Field(None, ge=1, description="first N tasks of each family; null = the full set")
    ids: list[str] | None = Field(None, description="explicit task ids (overrides families/per_family)")


class EvalConfig(_Strict):
    """One evaluation sweep: planners x env tasks x seeds with one LLM."""

    name: str = Field("eval", description="experiment name (MLflow run and output folder)")
    env: EnvSpec = Field(default_factory=EnvSpec)
    llm: LLMSpec = Field(default_factory=LLMSpec)
    planners: list[PlannerSpec] = Field(default_factory=lambda: [PlannerSpec()])
    tasks: TaskSelection = Field(default_factory=TaskSelection)
    seeds: list[int] = Field(default_factory=lambda: [0], description="episode seeds per task")
    max_steps: int = Field(20, ge=1, description="step cap per episode")
    output_dir: str = Field("outputs", description="traces and summaries go to <output_dir>/<name>/")
    select_by: list[str] = Field(
        default_factory=lambda: ["execution_success"],
        description="metrics summed to pick the best variant of each planner grid: 'execution_success', "
        "'plan_success' or the env's episode metrics (Zero-Shot Planners rank by executability + LCS, "
        "Sec. 3.5: `[executability, lcs]` on VirtualHome)",
    )

    @field_validator("planners", "seeds", "select_by")
    @classmethod
    def _not_empty(cls, v: list[Any], info: ValidationInfo) -> list[Any]:
        if not v:
            what = {"planners": "planner", "seeds": "seed", "select_by": "select_by metric"}[info.field_name]
            raise ValueError(f"at least one {what} is needed")
        return v

    @model_validator(mode="after")
    def _expand_grids(self) -> "EvalConfig":
        """Planner grids become their variants here, so every later stage sees plain planners."""
        self.planners = [v for p in self.planners for v in p.variants()]
        labels = [p.display for p in self.planners]
        if len(set(labels)) != len(labels):
            raise ValueError(f"planner labels must be unique, got {labels}")
        return self

    @property
    def grids(self) -> dict[str, list[str]]:
        """Grid label -> the labels of its variants, for the planners that were expanded from a grid."""
        out: dict[str, list[str]] = {}
        for p in self.planners:
            if p.group is not None:
                out.setdefault(p.group, []).append(p.display)
        return out

    def hash(self) -> str:
        """Short stable hash of everything that changes results (not the output folder)."""
        d = self.model_dump(exclude={"output_dir"})
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:12]

    @property
    def run_dir(self) -> Path:
        return Path(self.output_dir) / self.name


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``a.b.c=value`` overrides (value parsed as YAML: numbers, null, lists...)."""
    for item in overrides:
        if "=" not in item:
            raise InvalidInputError(f"override {item!r} is not of the form key.path=value")
        key, raw = item.split("=", 1)
        node = data
        parts = key.strip().split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise InvalidInputError(f"override {item!r}: '{p}' is not a mapping")
        node[parts[-1]] = yaml.safe_load(raw)
    return data


def load_config(path: str | Path, overrides: list[str] | None = None) -> EvalConfig:
    """Read and validate a YAML config; errors name the file and the bad field."""
    path = Path(path)
    if not path.exists():
        raise InvalidInputError(f"config file not found: {path}")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise InvalidInputError(f"config {path} is not valid YAML: {e}") from e
    if not isinstance(data, dict):
        raise InvalidInputError(f"config {path} must be a mapping at the top level")
    data = apply_overrides(data, overrides or [])
    try:
        return EvalConfig.model_validate(data)
    except ValidationError as e:
        raise InvalidInputError(f"invalid config {path}: {describe_errors(e)}") from None
