"""The ``groundplan train configs/train_say_<env>.yaml`` config: fine-tuning the planner's language model (Say).

Huang et al. 2022 (Table 1, "Fine-tuned GPT-3 13B") fine-tune the planning LM on the training programs;
SayCanPay's Say is the same LM that proposes steps. Here the examples are what the configured planner
reads at each decision of a train trajectory, and the completion it reads its step from
(:mod:`groundplan.rollout.say_examples`), so the model is trained on exactly the prompt format it is
evaluated with. This module imports only pydantic, so a config validates without torch, Ray or MLflow.
"""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from groundplan.config import EnvSpec, PlannerSpec
from groundplan.core.train_run import TrainRunSpec


class LoraSpec(BaseModel):
    """A LoRA adapter through ``peft`` (Hu et al. 2021): W + (alpha / r) B A on the target modules."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    r: int = Field(16, ge=1, le=1024, description="Rank of the adapter.")
    alpha: int = Field(32, ge=1, description="Scale numerator (lora_alpha).")
    dropout: float = Field(0.05, ge=0.0, lt=1.0, description="Dropout on the adapter's input.")
    target_modules: str | list[str] = Field("all-linear", description="peft's target_modules: 'all-linear' or "
                                            "module names such as [q_proj, v_proj].")


class SayTrainConfig(TrainRunSpec):
    """One fine-tuning run of the planner's LM on Ray Train, registered as ``models:/<name>/<version>``. The run
    folder ``<output_dir>/<name>/`` also keeps the examples and Ray Train's checkpoints, which a killed run
    resumes from."""

    kind: Literal["say"] = Field("say", description="Selects this trainer in `groundplan train`.")
    name: str = Field(description="Registered model name, e.g. 'say-babyai' (loaded as llm.model: "
                      "models:/say-babyai/<version>).", min_length=1, pattern=r"^[A-Za-z0-9_.\-]+$")
    base_model: str = Field("smollm2-135m-instruct", min_length=1, description="The LM to fine-tune: an embedded "
                            "name ('smollm2-135m-instruct', 'gemma-3-270m'), a Hugging Face id, a local folder, or a "
                            "registered Say model (models:/say-<env>/<N>, resolved in tracking_uri) to train "
                            "further: the new model's lineage holds the base's too.")
    env: EnvSpec = Field(description="The env whose train tasks the trajectories replay in; its split is 'train' "
                         "(a test split is refused).")
    planner: PlannerSpec = Field(description="The planner whose prompts are the examples; evaluate the model with "
                                 "the same planner and prompt options (its prompt fingerprint is checked).")
    data: list[str] = Field(default_factory=list, description="Collected trajectories (groundplan collect's folders, "
                            "Parquet shards or globs); their successful train-split trajectories are replayed.")
    traces: list[str] = Field(default_factory=list, description="Sweep folders (traces.jsonl): any episode the env "
                              "judged successful on a train task, by any planner, is replayed as a trajectory.")
    task_ids: list[str] | None = Field(None, min_length=1, description="Train only on trajectories of these train "
                                       "task ids (None: every train task; never empty): how `groundplan improve` "
                                       "keeps its validation tasks out of training.")
    max_trajectories: int | None = Field(None, ge=2, description="Use at most this many trajectories (None: all).")
    val_fraction: float = Field(0.2, gt=0, lt=1, description="Share of tasks held out for validation, with all their "
                                "trajectories (split by task, never by trajectory or step).")
    seed: int = Field(0, ge=0, description="Seeds the split, the sample of trajectories and the training.")
    lora: LoraSpec | None = Field(default_factory=LoraSpec, description="A LoRA adapter (merged into the weights "
                                  "when saved); null: full fine-tuning.")
    epochs: int = Field(2, ge=1, description="Passes over the training examples.")
    lr: float = Field(2e-4, gt=0, description="Peak learning rate (AdamW, linear decay).")
    weight_decay: float = Field(0.0, ge=0)
    warmup_ratio: float = Field(0.03, ge=0, lt=1, description="Share of steps with a linear warm-up.")
    batch_size: int = Field(4, ge=1, description="Sequences (or packed rows) per step and worker.")
    grad_accum: int = Field(1, ge=1, description="Steps accumulated per optimiser update.")
    max_length: int = Field(1024, ge=16, le=32768, description="Longest example in tokens (prompt + completion); "
                            "a longer prompt keeps its end, where the step is decided.")
    packing: bool = Field(True, description="Pack examples into rows of max_length tokens without padding "
                          "(position ids restart per example, so no example attends to another).")
    merge_decisions: bool = Field(True, description="Train on each trajectory's decisions as one sequence where "
                                  "every prompt extends the last (every completion in the loss, each after its own "
                                  "prompt: the same objective at a fraction of the tokens); False: one row per decision.")
    precision: Literal["auto", "float32", "bfloat16"] = Field(
        "float32", description="Training precision: 'float32', 'bfloat16' (autocast) or 'auto' (bf16 where the CPU has "
        "AVX512-BF16 or AMX, or on a GPU). float32 by default: on this project's 2-core CPU a LoRA step of SmolLM2 "
        "under bf16 autocast measured slower than in float32 (benchmarks/bench_train_say.py measures both).")
    max_examples: int | None = Field(None, ge=1, description="Train on at most this many examples (None: all).")
    experiment: str = Field("say-train", description="MLflow experiment name.")

    @model_validator(mode="after")
    def _check(self) -> "SayTrainConfig":
        if not self.data and not self.traces:
            raise ValueError("give data (collected trajectories), traces (sweep folders) or both")
        split = self.env.options.get("split", "train")
        if split != "train":
            raise ValueError(f"env.options.split is '{split}': a Say model trains on train tasks only (its lineage "
                             "keeps every test set it may be evaluated on disjoint from them)")
        if self.planner.grid:
            raise ValueError("the planner has a grid: a Say model is trained on one prompt format; give one variant")
        if self.planner.planner_options.prompt_format is None:
            raise ValueError(f"planner '{self.planner.name}' declares no prompt format (PROMPT_FIELDS), so a model "
                             "trained on its prompts could not be checked against the planner that loads it")
        return self

    @field_validator("data", "traces")
    @classmethod
    def _no_empty_paths(cls, v: list[str]) -> list[str]:
        if any(not p.strip() for p in v):
            raise ValueError("an empty path")
        return v
