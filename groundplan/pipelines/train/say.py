"""Fine-tuning the planner's language model (Say) on Ray Train (``groundplan train configs/train_say_<env>.yaml``).

The driver reads the trajectories (collected expert trajectories and successful sweep episodes of train
tasks), splits them by task (never by trajectory), replays each through the configured planner to get the
exact prompt of every decision and the step's text (:mod:`groundplan.rollout.say_examples`), and starts a
Ray Train ``TorchTrainer``. Each worker runs TRL's supervised fine-tuning (``SFTTrainer``) with a ``peft``
LoRA adapter (or full fine-tuning): loss on the completion tokens only. The decisions of one trajectory
whose prompts extend each other are one sequence with every decision's completion in the loss
(:func:`decision_chains`: the same tokens in the same causal context as each decision alone, a fraction of
the tokens to run), packed into rows without padding (position ids restart per sequence, so attention
stays inside each); bf16 autocast where the CPU has the instructions. Every epoch it evaluates the
validation loss and reports a checkpoint (adapter, optimiser, scheduler, trainer state) to Ray Train; a run
that is killed resumes from its last checkpoint when started again with the same config (same Ray Train run
name and storage, same MLflow run).

The best checkpoint by validation loss is merged into the base weights and saved as a plain Hugging Face
folder, with ``say.json`` (base model, planner, prompt format and its fingerprint, precision, metrics) and
``lineage.json`` (the train and validation tasks by what the model reads of them), logged to MLflow and
registered as ``models:/<name>/<version>``: ``llm.model: models:/<name>/<version>`` plans with it wherever
a model name goes, and the evaluation refuses a planner whose prompt format differs or a test set that
overlaps the lineage.
"""
from __future__ import annotations

import json
import logging
import os
import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from groundplan.core.errors import InvalidInputError
from groundplan.llm.loading import SAY_MODEL_FILE as SAY_FILE  # marks a saved Say model's folder
from groundplan.llm.loading import is_model_uri
from groundplan.pipelines.train.say_config import SayTrainConfig

if TYPE_CHECKING:
    from groundplan.grounding.canpay.lineage import Lineage

log = logging.getLogger(__name__)

#: the log of where each start of a run's training began (a resumed run starts at its checkpoint's step)
STARTS_FILE = "starts.jsonl"


@dataclass
class SayTrainResult:
    """What a Say training run produced."""

    model_uri: str
    version: int
    run_id: str
    tracking_uri: str
    model_dir: Path
    metrics: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)


def load_say_config(path: str | Path, overrides: list[str] | None = None) -> SayTrainConfig:
    from groundplan.config import load_yaml_model

    return load_yaml_model(SayTrainConfig, path, overrides, "Say training config")


def resolve_precision(cfg: SayTrainConfig) -> str:
    """'bfloat16' or 'float32' for ``cfg.precision`` on this machine."""
    if cfg.precision != "auto":
        return cfg.precision
    from groundplan.core.hardware import bf16_available

    return "bfloat16" if bf16_available(cfg.use_gpu) else "float32"


# ------------------------------------------------------------------------------------ data
def _seed_of(traj_id: str) -> int:
    """The episode seed a collected trajectory's id ends with (``<env>|<split>|<task>|<source>|<seed>``)."""
    try:
        return int(traj_id.rsplit("|", 1)[1])
    except (IndexError, ValueError):
        return 0


def read_sources(cfg: SayTrainConfig, paths: list[str] | None = None) -> list[Any]:
    """The successful train trajectories of ``cfg.data`` and ``cfg.traces`` (``Trajectory`` with
    ``extra["seed"]``). Trace episodes become trajectories of their chosen steps, the done step last."""
    from groundplan.grounding.canpay.data import Trajectory, read_trajectories
    from groundplan.rollout.traces import read_traces

    out: list[Any] = []
    data = cfg.data if paths is None else paths
    if data:
        for t in read_trajectories(data, env=cfg.env.name, split="train"):
            if t.success:
                t.extra["seed"] = _seed_of(t.traj_id)
                out.append(t)
    for folder in cfg.traces:
        path = Path(folder) / "traces.jsonl" if Path(folder).is_dir() else Path(folder)
        if not path.exists():
            raise InvalidInputError(f"no traces at {path}: give a sweep folder holding traces.jsonl")
        for tr in read_traces(path):
            if tr.env != cfg.env.name or not tr.execution_success or tr.error:
                continue
            actions = tuple(s.chosen for s in tr.steps)
            if not tr.steps or not tr.steps[-1].done:
                continue  # a successful episode that hit the step cap has no done step to learn
            out.append(Trajectory(traj_id=tr.episode_id, env=tr.env, split="train", task_id=tr.task_id,
                                  goal=tr.instruction, init_obs="", actions=actions,
                                  feasible=tuple(bool(s.success) for s in tr.steps), rewards=(), success=True,
                                  extra={"seed": tr.seed, "source": tr.planner}))
    if cfg.task_ids is not None:
        wanted = set(cfg.task_ids)
        out = [t for t in out if t.task_id in wanted]
    return out


def _planner_factory(cfg: SayTrainConfig, max_steps: int):
    from groundplan.factory import make_affordance, make_planner

    affordance = make_affordance(cfg.planner)

    def build(lm: Any) -> Any:
        return make_planner(cfg.planner, lm, max_steps, affordance)

    return build


def build_say_examples(cfg: SayTrainConfig, paths: list[str] | None = None, progress: bool = False):
    """(train examples, validation examples, counts, lineage). Trajectories are split by task
    (:func:`~groundplan.grounding.canpay.data.split_trajectories`) before any replay; a trajectory whose task
    is not among the env's train tasks (a sweep of test tasks) is refused."""
    from tqdm.auto import tqdm

    from groundplan.envs.base import opened
    from groundplan.factory import build_env
    from groundplan.grounding.canpay.data import split_trajectories
    from groundplan.grounding.canpay.lineage import Lineage, example
    from groundplan.llm.embeddings import SentenceEmbedder
    from groundplan.llm.loading import DEFAULT_EMBEDDER
    from groundplan.rollout.say_examples import ForcedChoiceLM, replay_examples

    trajs = read_sources(cfg, paths)
    if cfg.max_trajectories is not None and len(trajs) > cfg.max_trajectories:
        trajs = sorted(random.Random(cfg.seed).sample(trajs, cfg.max_trajectories), key=lambda t: t.traj_id)
    if not trajs:
        raise InvalidInputError(f"no successful train trajectories of env '{cfg.env.name}' in data={cfg.data} "
                                f"traces={cfg.traces}: nothing to learn from (collect them, or sweep train tasks)")
    with opened(build_env(cfg.env.name, {**cfg.env.options, "split": "train"})) as env:
        tasks = {t.task_id: t for t in env.tasks()}
        foreign = [t.traj_id for t in trajs if t.task_id not in tasks or tasks[t.task_id].instruction != t.goal]
        if foreign:
            raise InvalidInputError(f"{len(foreign)} of {len(trajs)} trajectories are not of this env's train tasks "
                                    f"(e.g. {foreign[0]}): a Say model trains on train tasks only")
        train_t, val_t = split_trajectories(trajs, cfg.val_fraction, cfg.seed, by=env.capabilities.disjoint_by)
        if not val_t:
            raise InvalidInputError(f"the {len(trajs)} trajectories are all of one task; a validation split by task "
                                    "needs at least 2")
        lm = ForcedChoiceLM(SentenceEmbedder(DEFAULT_EMBEDDER))
        make = _planner_factory(cfg, max_steps=max(len(t.actions) for t in trajs) + 1)
        out: dict[str, list[Any]] = {"train": [], "validation": []}
        lineage = Lineage(f"models:/{cfg.name}", [])
        seen: set[tuple[str, str]] = set()
        diverged = 0
        for role, group in (("train", train_t), ("validation", val_t)):
            for t in tqdm(group, desc=f"say examples ({role})", disable=not progress):
                task = tasks[t.task_id]
                res = replay_examples(make, lm, env, task, int(t.extra.get("seed", 0)), t.actions, t.traj_id)
                if res.diverged:
                    diverged += 1
                    log.debug("%s: %s", t.traj_id, res.diverged)
                out[role] += res.examples
                e = example(role, t.task_id, task.instruction, res.first_observation)
                if (role, e.signature) not in seen:  # the lineage: every task the model read, by role
                    seen.add((role, e.signature))
                    lineage.examples.append(e)
    if not out["train"] or not out["validation"]:
        raise InvalidInputError(f"replaying {len(trajs)} trajectories through planner '{cfg.planner.display}' gave "
                                f"{len(out['train'])} train and {len(out['validation'])} validation examples "
                                f"({diverged} replays diverged: the trajectory's step was not among its options)")
    counts = {"trajectories": len(trajs), "train_trajectories": len(train_t), "val_trajectories": len(val_t),
              "train_examples": len(out["train"]), "val_examples": len(out["validation"]), "diverged": diverged}
    return out["train"], out["validation"], counts, lineage


# ------------------------------------------------------------------------------------ worker
def train_loop(config: dict[str, Any]) -> None:
    """Ray Train's per-worker loop: TRL's SFTTrainer with a peft LoRA adapter, resumed from Ray Train's
    latest checkpoint when there is one; every epoch's checkpoint and metrics are reported to Ray Train."""
    import ray.train
    import torch
    from datasets import Dataset
    from ray.train.huggingface.transformers import RayTrainReportCallback, prepare_trainer
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    torch.manual_seed(config["seed"])
    path = config["model_path"]
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    bf16 = config["precision"] == "bfloat16"
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="sdpa")
    peft_config = None
    if config["lora"] is not None:
        from peft import LoraConfig

        lora = config["lora"]
        peft_config = LoraConfig(r=lora["r"], lora_alpha=lora["alpha"], lora_dropout=lora["dropout"],
                                 target_modules=lora["target_modules"], task_type="CAUSAL_LM")
    rank = ray.train.get_context().get_world_rank()
    out_dir = os.path.join(config["work_dir"], f"hf-rank{rank}")
    args = SFTConfig(
        output_dir=out_dir, num_train_epochs=config["epochs"], per_device_train_batch_size=config["batch_size"],
        per_device_eval_batch_size=config["batch_size"], gradient_accumulation_steps=config["grad_accum"],
        learning_rate=config["lr"], weight_decay=config["weight_decay"], warmup_steps=config["warmup_ratio"],
        lr_scheduler_type="linear", logging_steps=config["logging_steps"], eval_strategy="epoch",
        save_strategy="epoch", save_total_limit=2, bf16=bf16, use_cpu=not config["use_gpu"],
        max_length=config["max_length"], packing=config["packing"], padding_free=config["packing"],
        completion_only_loss=True, report_to=["mlflow"] if config.get("run_id") else [], seed=config["seed"],
        dataloader_num_workers=0, disable_tqdm=not config["progress"] or rank != 0, save_only_model=False,
        # every trainable weight (each LoRA factor, or each weight in a full fine-tune) takes part in every
        # forward, so DDP's search for unused ones is an extra autograd-graph walk per step that finds nothing
        ddp_find_unused_parameters=False,
    )
    trainer = SFTTrainer(model=model, args=args, processing_class=tokenizer, peft_config=peft_config,
                         train_dataset=Dataset.from_list(config["train"]), eval_dataset=Dataset.from_list(config["val"]))
    trainer.add_callback(RayTrainReportCallback())
    trainer.add_callback(_start_logger(config["work_dir"]))
    trainer = prepare_trainer(trainer)
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            trainer.train(resume_from_checkpoint=os.path.join(folder, RayTrainReportCallback.CHECKPOINT_NAME))
    else:
        trainer.train()


def _start_logger(work_dir: str) -> Any:
    """A callback that appends the optimiser step each start of training begins at to ``starts.jsonl`` in
    ``work_dir`` (0 for a fresh start, the checkpoint's step for a resumed one): the model card says
    whether, and from where, a run resumed."""
    from transformers import TrainerCallback

    class StartLog(TrainerCallback):
        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.is_world_process_zero:
                os.makedirs(work_dir, exist_ok=True)
                with open(os.path.join(work_dir, STARTS_FILE), "a") as f:
                    f.write(json.dumps({"global_step": int(state.global_step)}) + "\n")

    return StartLog()


def read_starts(work_dir: Path) -> list[int]:
    """The optimiser step each start of training began at (:func:`_start_logger`)."""
    path = work_dir / STARTS_FILE
    if not path.exists():
        return []
    return [int(json.loads(line)["global_step"]) for line in path.read_text().splitlines() if line.strip()]


# ------------------------------------------------------------------------------------ driver
#: the fields that decide the examples (the rest decide only the training)
EXAMPLE_FIELDS = {"name", "env", "planner", "data", "traces", "task_ids", "max_trajectories", "val_fraction", "seed"}


def _inputs_state(cfg: SayTrainConfig, paths: list[str] | None) -> list[tuple[str, int, int]]:
    """(path, size, mtime) of every file the examples are read from: a collection or a sweep that grew
    since the examples were built changes the key, so they are never read stale."""
    from groundplan.grounding.canpay.data import expand_paths

    sources = cfg.data if paths is None else paths
    files = expand_paths(sources) if sources else []
    files += [str(Path(f) / "traces.jsonl") if Path(f).is_dir() else f for f in cfg.traces]
    every = [q for f in map(Path, files) for q in (sorted(x for x in f.rglob("*") if x.is_file()) if f.is_dir() else [f])]
    out = []
    for f in every:
        st = f.stat() if f.exists() else None
        out.append((str(f.resolve()), st.st_size if st else -1, st.st_mtime_ns if st else -1))
    return out


def examples_key(cfg: SayTrainConfig, paths: list[str] | None = None) -> str:
    """A hash of what decides the examples: the env, planner, sources (and their files' state) and split."""
    from groundplan.config import stable_hash

    return stable_hash({"config": cfg.model_dump(include=EXAMPLE_FIELDS), "files": _inputs_state(cfg, paths)}, 12)


def config_key(cfg: SayTrainConfig, examples: str) -> str:
    """A hash of the examples' key and everything that decides the training: the same config on the same
    data resumes the same Ray Train run and MLflow run, a changed one starts another."""
    doc = cfg.model_dump(exclude={"num_workers", "use_gpu", "cpus_per_worker", "tracking_uri", "experiment",
                                  *EXAMPLE_FIELDS})
    doc["examples"] = examples
    from groundplan.config import stable_hash

    return stable_hash(doc, 12)


def _examples_file(run_root: Path, key: str) -> Path:
    return run_root / f"examples-{key}.json"


def base_lineage(cfg: SayTrainConfig, base_path: str) -> Lineage | None:
    """The lineage of a registered Say base model (None for any other base): a model trained further keeps
    every task its weights read, so the evaluation's overlap check must still cover them. A registered base
    without one is refused before any work, since no test could then be checked against the new model."""
    if not is_model_uri(cfg.base_model):
        return None
    from groundplan.grounding.canpay.lineage import required_lineage

    return required_lineage(base_path, f"base_model {cfg.base_model}",
                            "no test set could be checked against the model trained from it")


def load_or_build_examples(cfg: SayTrainConfig, run_root: Path, key: str, paths: list[str] | None, progress: bool):
    """The examples of this config, built once and kept in the run folder (a resumed run reads them)."""
    path = _examples_file(run_root, key)
    from groundplan.grounding.canpay.lineage import Lineage

    if path.exists():
        doc = json.loads(path.read_text())
        return doc["train"], doc["validation"], doc["counts"], Lineage.from_json(doc["lineage"])
    train, val, counts, lineage = build_say_examples(cfg, paths, progress)
    doc = {"train": [e.to_json() for e in train], "validation": [e.to_json() for e in val], "counts": counts,
           "lineage": lineage.to_json()}
    from groundplan.core.paths import atomic_write_bytes

    run_root.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, json.dumps(doc).encode())
    return doc["train"], doc["validation"], counts, lineage


def decision_chains(examples: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The examples cut into chains: consecutive decisions of one trajectory where each prompt is the last
    prompt and its completion, extended (the planner appended the chosen step and what followed: history,
    feedback, the next step's opening). A chain is one causal sequence whose completions are exactly the
    chain's decisions, each read after its own prompt, so training on it once is training on every decision
    with a fraction of the tokens. A completion the model ends with EOS ends its chain."""
    chains: list[list[dict[str, Any]]] = []
    for e in examples:
        last = chains[-1][-1] if chains else None
        if (last is not None and not last.get("eos") and last["traj_id"] == e["traj_id"]
                and e["prompt"].startswith(last["prompt"] + last["completion"])):
            chains[-1].append(e)
        else:
            chains.append([e])
    return chains


def _encode(tokenizer: Any, chain: list[dict[str, Any]]) -> tuple[list[int], list[int]]:
    """Token ids of a chain's text (the last prompt and its completion; tokenised as one text, with the special
    tokens the scorer adds, so every boundary is tokenised as the scorer tokenises prompt and option together)
    and its completion mask (1 on the tokens that start inside a completion, and on a closing EOS)."""
    text = chain[-1]["prompt"] + chain[-1]["completion"]
    spans = [(len(e["prompt"]), len(e["prompt"]) + len(e["completion"])) for e in chain]
    enc = tokenizer(text, add_special_tokens=True, return_offsets_mapping=True)
    ids, mask = list(enc.input_ids), []
    for a, b in enc.offset_mapping:
        mask.append(int(b > a and any(lo <= a < hi for lo, hi in spans)))
    if chain[-1].get("eos"):
        ids.append(tokenizer.eos_token_id)
        mask.append(1)
    return ids, mask


def sft_rows(examples: list[dict[str, Any]], tokenizer: Any, max_length: int, limit: int | None,
             seed: int, merge: bool = True) -> tuple[list[dict[str, list[int]]], int]:
    """Tokenised rows for TRL (``input_ids`` and ``completion_mask``): with ``merge``, each chain of decisions
    (:func:`decision_chains`) in as few rows of at most ``max_length`` tokens as fit, a row opening at a decision's
    whole prompt; without, one row per decision. A prompt too long for its row keeps its end (the history and the
    open step, where the decision is made), never losing a completion token. ``limit``: at most that many
    decisions, whole chains in a seeded order. Returns the rows and how many decisions were dropped because their
    completion alone does not fit."""
    chains = decision_chains(examples) if merge else [[e] for e in examples]
    if limit is not None and sum(map(len, chains)) > limit:
        random.Random(seed).shuffle(chains)
        kept, n = [], 0
        for c in chains:
            if n >= limit:
                break
            kept.append(c[: limit - n])
            n += len(kept[-1])
        chains = kept
    rows, dropped = [], 0
    for chain in chains:
        i = 0
        while i < len(chain):
            j, best = i + 1, None
            while j <= len(chain):
                ids, mask = _encode(tokenizer, chain[i:j])
                if len(ids) > max_length and best is not None:
                    break
                best = (ids, mask, j)
                j += 1
            ids, mask, j = best
            if len(ids) > max_length:  # one decision too long: keep the prompt's end
                if sum(mask) > max_length - 8:
                    dropped += 1
                    i = j
                    continue
                ids, mask = ids[-max_length:], mask[-max_length:]
            rows.append({"input_ids": ids, "completion_mask": mask})
            i = j
    return rows, dropped


def save_say_model(base_path: str, checkpoint_dir: Path, target: Path, meta: dict[str, Any], lora: bool) -> None:
    """The checkpoint merged into the base weights (a LoRA adapter) or as is, saved as a Hugging Face folder
    in float32 with ``say.json``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if lora:
        from peft import PeftModel

        base = AutoModelForCausalLM.from_pretrained(base_path, dtype=torch.float32)
        model = PeftModel.from_pretrained(base, str(checkpoint_dir)).merge_and_unload()
    else:
        model = AutoModelForCausalLM.from_pretrained(str(checkpoint_dir), dtype=torch.float32)
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    model.save_pretrained(target)
    AutoTokenizer.from_pretrained(base_path).save_pretrained(target)
    (target / SAY_FILE).write_text(json.dumps(meta, indent=1, default=str))


def run_train_say(cfg: SayTrainConfig, progress: bool = True, ray_address: str | None = None) -> SayTrainResult:
    """Build the examples, train on Ray Train, merge, log to MLflow and register; see the module docstring."""
    from groundplan.pipelines.tracking import check_tracking_server, resolve_tracking_uri, use_experiment

    tracking_uri = resolve_tracking_uri(cfg.output_dir, cfg.tracking_uri)
    check_tracking_server(tracking_uri, hint="leave tracking_uri and MLFLOW_TRACKING_URI unset to register in the "
                          "SQLite store under output_dir")
    from groundplan.datasets.source import lineage_tags, resolve_data

    sources = resolve_data(cfg.data, tracking_uri) if cfg.data else []
    from groundplan.llm.loading import resolve_model_path

    # an embedded model converts once, and a registered one downloads once, before any worker starts
    base_path = resolve_model_path(cfg.base_model, tracking_uri)
    inherited = base_lineage(cfg, base_path)
    precision = resolve_precision(cfg)
    paths = [p for s in sources for p in s.paths] if cfg.data else None
    ex_key = examples_key(cfg, paths)
    key = config_key(cfg, ex_key)
    run_root = (Path(cfg.output_dir) / cfg.name).resolve()
    train, val, counts, lineage = load_or_build_examples(cfg, run_root, ex_key, paths, progress)
    if inherited is not None:
        from groundplan.grounding.canpay.lineage import inherit

        lineage = inherit(lineage, inherited)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(base_path)
    train_rows, dropped = sft_rows(train, tokenizer, cfg.max_length, cfg.max_examples, cfg.seed, cfg.merge_decisions)
    val_rows, _ = sft_rows(val, tokenizer, cfg.max_length, None, cfg.seed, cfg.merge_decisions)
    counts = {**counts, "train_rows": len(train_rows), "val_rows": len(val_rows), "dropped_too_long": dropped}
    if not train_rows or not val_rows:
        raise InvalidInputError(f"no example fits max_length={cfg.max_length} tokens with its completion")
    log.info("%s: %s (precision %s)", cfg.name, counts, precision)

    import mlflow
    from ray.train import CheckpointConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    use_experiment(cfg.experiment, cfg.output_dir, tracking_uri)
    run_file = run_root / f"mlflow-run-{key}.txt"
    resumed_run = run_file.read_text().strip() if run_file.exists() else None
    from groundplan.planners.base import prompt_fingerprint

    fmt = cfg.planner.planner_options.prompt_format
    with mlflow.start_run(run_id=resumed_run, run_name=None if resumed_run else cfg.name) as run:
        run_file.write_text(run.info.run_id)
        if resumed_run is None:
            from groundplan.pipelines.tracking import flatten

            params = {f"say.{k}": v for k, v in flatten(cfg.model_dump()).items()}
            params["say.precision_resolved"] = precision
            mlflow.log_params({k: str(v)[:500] for k, v in params.items()})
            mlflow.log_metrics({f"data.{k}": float(v) for k, v in counts.items()})
            mlflow.set_tags(lineage_tags(sources))
        from groundplan.actors.group import RunnerGroup

        from groundplan.pipelines.tracking import absolute_tracking_uri

        env_vars = {"MLFLOW_TRACKING_URI": absolute_tracking_uri(tracking_uri), "MLFLOW_RUN_ID": run.info.run_id,
                    "MLFLOW_EXPERIMENT_NAME": cfg.experiment, "HF_MLFLOW_LOG_ARTIFACTS": "0",
                    # Ray Train's print patch logs every print, even one captured by redirecting sys.stdout: the
                    # bytecode dill disassembles into a buffer while datasets fingerprints TRL's map functions
                    "RAY_TRAIN_ENABLE_PRINT_PATCH": "0"}
        with RunnerGroup(address=ray_address, cpus_needed=max(2, int(cfg.num_workers * cfg.cpus_per_worker) + 1),
                         log_to_driver=progress, include_dashboard=True):
            trainer = TorchTrainer(
                train_loop,
                train_loop_config={
                    "model_path": base_path, "train": train_rows, "val": val_rows, "epochs": cfg.epochs,
                    "batch_size": cfg.batch_size, "grad_accum": cfg.grad_accum, "lr": cfg.lr,
                    "weight_decay": cfg.weight_decay, "warmup_ratio": cfg.warmup_ratio,
                    "max_length": cfg.max_length, "packing": cfg.packing, "precision": precision,
                    "lora": None if cfg.lora is None else cfg.lora.model_dump(), "seed": cfg.seed,
                    "use_gpu": cfg.use_gpu, "progress": progress, "run_id": run.info.run_id,
                    "work_dir": str(run_root / f"work-{key}"), "logging_steps": 5,
                },
                scaling_config=ScalingConfig(num_workers=cfg.num_workers, use_gpu=cfg.use_gpu,
                                             resources_per_worker={"CPU": cfg.cpus_per_worker}),
                run_config=RunConfig(
                    name=f"{cfg.name}-{key}", storage_path=str(run_root / "ray"),
                    worker_runtime_env={"env_vars": env_vars},
                    checkpoint_config=CheckpointConfig(num_to_keep=2, checkpoint_score_attribute="eval_loss",
                                                       checkpoint_score_order="min")),
            )
            result = trainer.fit()
        if result.error is not None:
            raise result.error
        best = min(result.best_checkpoints or [], key=lambda cm: cm[1].get("eval_loss", float("inf")), default=None)
        if best is None:
            raise RuntimeError("training reported no checkpoint")
        checkpoint, metrics = best
        model_dir = run_root / "model"
        meta = {"base_model": cfg.base_model, "planner": cfg.planner.name, "planner_options": cfg.planner.options,
                "prompt_format": fmt,
                "prompt_fingerprint": prompt_fingerprint(cfg.planner.name, fmt), "env": cfg.env.name,
                "precision": precision, "lora": None if cfg.lora is None else cfg.lora.model_dump(),
                "metrics": {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))}, "counts": counts,
                "config_key": key, "starts": read_starts(run_root / f"work-{key}")}
        from groundplan.grounding.canpay.lineage import save_lineage
        from ray.train.huggingface.transformers import RayTrainReportCallback

        with checkpoint.as_directory() as folder:
            save_say_model(base_path, Path(folder) / RayTrainReportCallback.CHECKPOINT_NAME, model_dir, meta,
                           lora=cfg.lora is not None)
        lineage.source = f"models:/{cfg.name} (run {run.info.run_id})"
        save_lineage(model_dir, lineage)
        mlflow.log_artifacts(str(model_dir), artifact_path="model")
        mlflow.log_metrics({f"best.{k}": float(v) for k, v in meta["metrics"].items()})
        from groundplan.pipelines.train.canpay import register_version

        version = register_version(cfg.name, f"{run.info.artifact_uri}/model", run.info.run_id, tracking_uri,
                                   tags={**lineage_tags(sources), "groundplan.say.prompt_fingerprint":
                                         meta["prompt_fingerprint"], "groundplan.say.planner": cfg.planner.name})
    uri = f"models:/{cfg.name}/{version.version}"
    log.info("registered %s (run %s) in %s", uri, run.info.run_id, tracking_uri)
    return SayTrainResult(model_uri=uri, version=int(version.version), run_id=run.info.run_id, tracking_uri=tracking_uri,
                          model_dir=model_dir, metrics=meta["metrics"], counts=counts)
