"""The ``groundplan improve CONFIG`` config: rounds of online self-improvement of the planner's LM.

Each round rolls out the current Say model on train tasks, keeps the episodes the env judged successful
(no expert and no oracle in the loop), fine-tunes the next model on them and evaluates it: expert
iteration (Anthony et al. 2017) as STaR applies it to LMs (Zelikman et al. 2022, Sec. 3: each round
fine-tunes the *base* model on every success so far). pydantic only, so a config validates without
torch, Ray or MLflow.
"""
from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from groundplan.config import EnvSpec, PlannerSpec, RuntimeSpec, TaskSelection, _Strict
from groundplan.pipelines.train.say_config import SayTrainConfig

#: the Say training fields a round sets itself (the rest come from ``train:``)
ROUND_FIELDS = frozenset({"kind", "name", "base_model", "env", "planner", "data", "traces", "task_ids",
                          "output_dir", "tracking_uri"})


class ImproveConfig(_Strict):
    """Rounds of rollouts → kept successes → Say fine-tuning → evaluation (module doc). Everything lives
    under ``<output_dir>/<name>/``: ``round-<r>/`` holds the round's rollouts, data, model and sweeps, and
    ``improve.json`` the per-round table."""

    name: str = Field(description="Registered model name: round r's model is a version of models:/<name>.",
                      min_length=1, pattern=r"^[A-Za-z0-9_.\-]+$")
    base_model: str = Field("smollm2-135m-instruct", min_length=1, description="The LM every round fine-tunes "
                            "(STaR: from the base each round, on all successes so far).")
    start_model: str | None = Field(None, description="Round 0's model, which the first rollouts use: a model "
                                    "name or a models:/ URI (e.g. a Say fine-tuned on expert data); None: base_model.")
    env: EnvSpec = Field(description="The env; rollouts and validation run on its train split, the test on "
                         "`test_split`.")
    planner: PlannerSpec = Field(description="The Say planner: its prompts are the training examples, and it is "
                                 "the row evaluated each round.")
    rollout_planner: PlannerSpec | None = Field(None, description="The planner that acts in the rollouts, with "
                                                "the current model (None: `planner`); e.g. `planner` with "
                                                "sample_temperature for exploration. No oracle.")
    tasks: TaskSelection = Field(default_factory=TaskSelection, description="The train tasks the loop may use; "
                                 "`validation_fraction` of them (by what the model reads of them) are held out of "
                                 "rollouts and training for the stop rule.")
    validation_fraction: float = Field(0.25, gt=0, lt=1, description="Share of the selected train tasks held out "
                                       "as validation tasks (split by visible signature, never by episode).")
    rollout_seeds: list[int] = Field(default_factory=lambda: [0, 1], min_length=1,
                                     description="Episode seeds per rollout task and round.")
    test_split: str = Field("test", min_length=1, description="The env split of the held-out test tasks.")
    test_tasks: TaskSelection = Field(default_factory=TaskSelection, description="Which test tasks each round "
                                      "is evaluated on.")
    expert_data: list[str] = Field(default_factory=list, description="Collected expert trajectories added to every "
                                   "round's training data (optional; only their rollout tasks are used). Also the "
                                   "reference for the share of kept episodes the expert solved.")
    rounds: int = Field(2, ge=1, le=100, description="Most rounds of rollouts and training after round 0.")
    patience: int = Field(1, ge=1, description="Stop after this many rounds in a row whose validation success "
                          "did not rise above the best so far.")
    max_steps: int = Field(20, ge=1, description="Step cap per episode (rollouts, validation, test).")
    train: dict[str, Any] = Field(default_factory=dict, description="Say training fields for every round "
                                  "(SayTrainConfig: epochs, lr, lora, max_examples, max_length, cpus_per_worker, "
                                  "...); the round sets name, base_model, env, planner, data and task_ids.")
    runtime: RuntimeSpec = Field(default_factory=RuntimeSpec, description="Where the sweeps run (runner "
                                 "actors and the batched scorer, or local).")
    output_dir: str = Field("outputs/improve", min_length=1, description="Run folder root.")
    tracking_uri: str | None = Field(None, description="MLflow store of the registered models; None: SQLite under "
                                     "<output_dir>/<name>/mlruns.")

    @field_validator("train")
    @classmethod
    def _train_fields(cls, v: dict[str, Any]) -> dict[str, Any]:
        taken = sorted(ROUND_FIELDS & set(v))
        if taken:
            raise ValueError(f"train.{', train.'.join(taken)} are set by each round; remove them")
        return v

    @model_validator(mode="after")
    def _check(self) -> "ImproveConfig":
        split = self.env.options.get("split", "train")
        if split != "train":
            raise ValueError(f"env.options.split is '{split}': rollouts and validation run on the train split; the "
                             "test split is test_split")
        if self.test_split == "train":
            raise ValueError("test_split is 'train': the test tasks must be held out of the train split")
        for role, spec in (("planner", self.planner), ("rollout_planner", self.rollout_planner)):
            if spec is None:
                continue
            if spec.grid:
                raise ValueError(f"{role} has a grid: one variant per loop")
            oracles = [d.name for d in spec.declarations if d is not None]
            if oracles:
                raise ValueError(f"{role} '{spec.display}' reads ground truth ({', '.join(oracles)}): the loop keeps "
                                 "what the env judges successful, with no expert and no oracle in it")
        self.say_config(["<each round's data>"], [], "outputs")  # the train fields, checked now, not after round 0
        return self

    @property
    def actor(self) -> PlannerSpec:
        """The planner of the rollouts."""
        return self.rollout_planner or self.planner

    def say_config(self, data: list[str], task_ids: list[str], output_dir: str,
                   tracking_uri: str | None = None) -> SayTrainConfig:
        """A round's Say training config: the base model on ``data``, restricted to ``task_ids``."""
        return SayTrainConfig.model_validate({
            **self.train, "kind": "say", "name": self.name, "base_model": self.base_model, "env": self.env.model_dump(),
            "planner": self.planner.model_dump(exclude={"group"}), "data": data,
            "task_ids": task_ids or None, "output_dir": output_dir, "tracking_uri": tracking_uri})
