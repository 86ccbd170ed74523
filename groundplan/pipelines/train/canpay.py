"""Training of SayCanPay's Can and Pay models on Ray Train (``groundplan train configs/train_<model>.yaml``).

The driver reads the trajectories (Parquet, the collect schema), splits them 80/20 (Table 8) by task,
never by trajectory (a validation task's other seeds and twins are not training data), builds Sec. 6.1's
InfoNCE triples or Sec. 6.2's discounted-return pairs, opens an MLflow run and starts a Ray Train
``TorchTrainer``. Each worker trains a data-parallel replica
(``prepare_model`` / ``prepare_data_loader``: one worker here, DDP over many on a cluster with no code
change); after every epoch rank 0 computes the validation metric (Can: F1 of sigmoid(logit) > 0.5 over
positives and negatives, and InfoNCE top-1 accuracy; Pay: MSE) and logs it to the MLflow run, and
reports a checkpoint to Ray Train when the metric improves. The driver then logs the best checkpoint
as the run's ``model`` artifact and registers it in the MLflow model registry under the config's
``name`` — load it with ``models:/<name>/<version>`` (e.g. in ``saycanpay_learned``'s options).

The config's ``data`` names folders, or the collection itself as MLflow recorded it (``runs:/<collect run
id>``, ``datasets:/<name>[@<digest>]``: :mod:`groundplan.datasets.source`); then the run logs the collect
run's dataset as its input and tags the run and the registered version with the collect run, dataset and
folder, so a model in the registry says which collection it came from.

Everything is written under ``<output_dir>/<name>/`` (Ray Train storage, the model folder) and the
MLflow store (default ``<output_dir>/mlruns/mlflow.db``); nothing goes to the working directory.
"""
from __future__ import annotations

import logging
import shutil
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from groundplan.core.errors import InvalidInputError
from groundplan.grounding.canpay.config import TrainConfig

log = logging.getLogger(__name__)


@dataclass
class TrainResult:
    """What a training run produced: the registered model URI and where everything is."""

    model_uri: str  # models:/<name>/<version>
    version: int
    run_id: str
    tracking_uri: str
    model_dir: Path
    metrics: dict[str, float] = field(default_factory=dict)
    history: list[dict[str, float]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)


def load_train_config(path: str | Path, overrides: list[str] | None = None) -> TrainConfig:
    """Read and validate a training YAML; ``key.path=value`` overrides are applied first."""
    from groundplan.config import load_yaml_model

    return load_yaml_model(TrainConfig, path, overrides, "training config")


def reference_lineage(cfg: TrainConfig, tracking_uri: str | None) -> Any:
    """The lineage of ``cfg.split_like``'s model (None when the config splits on its own), read before any
    data: a reference without one is refused, since its validation tasks would be unknown."""
    if cfg.split_like is None:
        return None
    from groundplan.grounding.canpay.lineage import required_lineage
    from groundplan.llm.loading import is_model_uri, resolve_model_path

    path = resolve_model_path(cfg.split_like, tracking_uri) if is_model_uri(cfg.split_like) else cfg.split_like
    return required_lineage(path, f"split_like {cfg.split_like}", "its validation tasks are unknown")


def build_examples(cfg: TrainConfig, paths: list[str] | None = None,
                   reference: Any = None) -> tuple[list[Any], list[Any], dict[str, int], Any]:
    """(train examples, validation examples, counts, lineage) for the config's model kind; the lineage
    (:mod:`groundplan.grounding.canpay.lineage`) lists the train and validation tasks by what the model
    reads of them, and is saved with the model. ``paths`` are the data paths :func:`run_train` resolved
    from ``cfg.data`` (default: ``cfg.data`` as paths); ``reference``: :func:`reference_lineage`'s, whose
    validation tasks are this model's (:func:`~groundplan.grounding.canpay.data.split_like`)."""
    from groundplan.grounding.canpay.lineage import trajectories_lineage
    from groundplan.grounding.canpay.data import (
        can_examples,
        pay_examples,
        read_trajectories,
        split_like,
        split_trajectories,
        task_groups,
    )

    from groundplan.grounding.canpay.views import goal_view

    view = goal_view(cfg.model.goal_view)
    trajs = [replace(t, goal=view(t.goal))  # the model reads its view of the instruction
             for t in read_trajectories(cfg.data if paths is None else paths, env=cfg.env, split=cfg.split)]
    if cfg.max_trajectories is not None and len(trajs) > cfg.max_trajectories:
        import random

        trajs = sorted(random.Random(cfg.seed).sample(trajs, cfg.max_trajectories), key=lambda t: t.traj_id)
    if len(trajs) < 2:
        raise InvalidInputError(f"{len(trajs)} trajectories of env={cfg.env} split={cfg.split} in {cfg.data}; "
                                "training needs at least 2")
    if cfg.model.kind == "can" and cfg.can_negatives == "feasibility" and not any(t.listed_feasible for t in trajs):
        raise InvalidInputError(f"can_negatives: feasibility needs listed actions labelled by the simulator, and no "
                                f"trajectory in {cfg.data} has them: collect with label_listed: true")
    from groundplan.envs import ENVS

    by = ENVS.get(cfg.env).capabilities.disjoint_by  # an env split by task name: its programs of a name are one task
    if reference is not None:
        val_ids = {e.task_id for e in reference.examples if e.role == "validation"}
        train_t, val_t = split_like(trajs, val_ids, by=by, source=reference.source)
    else:
        train_t, val_t = split_trajectories(trajs, cfg.val_fraction, cfg.seed, by=by)
    if not val_t:
        raise InvalidInputError(f"the {len(trajs)} trajectories of env={cfg.env} split={cfg.split} in {cfg.data} "
                                "are all of one task; a validation split by task needs at least 2")
    if cfg.model.kind == "can":
        train = can_examples(train_t, cfg.seed, cfg.can_negatives)
        val = can_examples(val_t, cfg.seed + 1, cfg.can_negatives)
    else:
        delta = cfg.resolved_delta
        train, val = pay_examples(train_t, delta, cfg.seed), pay_examples(val_t, delta, cfg.seed + 1)
    if not train or not val:
        raise InvalidInputError(f"no {cfg.model.kind} examples could be built from {len(trajs)} trajectories")
    counts = {"trajectories": len(trajs), "train_trajectories": len(train_t), "val_trajectories": len(val_t),
              "train_tasks": len(task_groups(train_t, by)), "val_tasks": len(task_groups(val_t, by)),
              "train_examples": len(train), "val_examples": len(val)}
    return train, val, counts, trajectories_lineage(cfg.name, {"train": train_t, "validation": val_t},
                                                    cfg.model.goal_view)


# ------------------------------------------------------------------------------------ worker
def _batches(model: Any, examples: list[Any], kind: str, batch_size: int):
    """(logits, labels/targets) of ``examples`` in evaluation mode, batch by batch."""
    import torch

    from groundplan.grounding.canpay.model import tokenize

    net, tok, max_len = model["net"], model["tokenizer"], model["max_length"]
    device = next(net.parameters()).device
    for i in range(0, len(examples), batch_size):
        chunk = examples[i: i + batch_size]
        texts = [t for e in chunk for t in e.texts] if kind == "can" else [e.text for e in chunk]
        ids, mask = tokenize(tok, texts, max_len)
        logits = net(ids.to(device), mask.to(device))
        if kind == "can":
            yield logits.view(len(chunk), 3), None
        else:
            yield logits, torch.tensor([e.target for e in chunk], dtype=torch.float32, device=device)


def evaluate(model: dict[str, Any], examples: list[Any], kind: str, batch_size: int = 64) -> dict[str, float]:
    """Validation metrics: Can → f1 (sigmoid > 0.5, positive vs the two negatives), top-1 accuracy of
    the positive among its triple, InfoNCE loss; Pay → mse."""
    import torch

    from groundplan.grounding.canpay.losses import f1_score, info_nce_loss, pay_loss

    net = model["net"]
    was_training = net.training
    net.eval()
    out: dict[str, float] = {}
    with torch.inference_mode():
        if kind == "can":
            labels, predicted, top1, losses = [], [], 0, []
            for logits, _ in _batches(model, examples, kind, batch_size):
                losses.append(float(info_nce_loss(logits)) * len(logits))
                top1 += int((logits.argmax(1) == 0).sum())
                p = torch.sigmoid(logits) > 0.5
                for row in p.tolist():
                    labels += [1, 0, 0]
                    predicted += [int(x) for x in row]
            out = {"val_f1": f1_score(labels, predicted), "val_top1": top1 / len(examples),
                   "val_info_nce": sum(losses) / len(examples)}
        else:
            total = 0.0
            for logits, target in _batches(model, examples, kind, batch_size):
                total += float(pay_loss(logits, target)) * len(target)
            out = {"val_mse": total / len(examples)}
    net.train(was_training)
    return out


def train_loop(config: dict[str, Any]) -> None:
    """Ray Train's per-worker loop (data-parallel; rank 0 evaluates, logs to MLflow and checkpoints)."""
    import random

    import ray.train
    import ray.train.torch
    import torch
    from torch.utils.data import DataLoader
    from tqdm.auto import tqdm

    from groundplan.grounding.canpay.config import CanPayModelConfig
    from groundplan.grounding.canpay.losses import info_nce_loss, pay_loss
    from groundplan.grounding.canpay.model import CanPayModel, tokenize

    ctx = ray.train.get_context()
    rank = ctx.get_world_rank()
    torch.manual_seed(config["seed"])
    random.seed(config["seed"])
    mcfg = CanPayModelConfig.model_validate(config["model"])
    kind = mcfg.kind
    base = CanPayModel(mcfg, device="cpu")
    tokenizer = base.tokenizer
    net = ray.train.torch.prepare_model(base.net)
    inner = getattr(net, "module", net)
    groups = [{"params": inner.head.parameters(), "lr": config["lr_head"]}]
    if config["lr_encoder"] > 0:
        groups.append({"params": inner.encoder.parameters(), "lr": config["lr_encoder"]})
    else:
        for p in inner.encoder.parameters():
            p.requires_grad_(False)
    opt = torch.optim.AdamW(groups, weight_decay=config["weight_decay"])
    train, val = config["train"], config["val"]

    def collate(batch: list[Any]):
        if kind == "can":
            ids, mask = tokenize(tokenizer, [t for e in batch for t in e.texts], mcfg.max_length)
            return ids, mask, None
        ids, mask = tokenize(tokenizer, [e.text for e in batch], mcfg.max_length)
        return ids, mask, torch.tensor([e.target for e in batch], dtype=torch.float32)

    loader = ray.train.torch.prepare_data_loader(
        DataLoader(train, batch_size=config["batch_size"], shuffle=True, collate_fn=collate))
    client = None
    if rank == 0 and config.get("run_id"):
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=config["tracking_uri"])
    metric = "val_f1" if kind == "can" else "val_mse"
    best = None
    step = 0
    for epoch in range(config["epochs"]):
        if ray.train.get_context().get_world_size() > 1 and hasattr(loader, "sampler") and hasattr(loader.sampler, "set_epoch"):
            loader.sampler.set_epoch(epoch)
        net.train()
        total, count = 0.0, 0
        t0 = time.perf_counter()
        for ids, mask, target in tqdm(loader, desc=f"{kind} epoch {epoch + 1}", disable=rank != 0 or not config["progress"]):
            logits = net(ids, mask)
            if kind == "can":
                loss = info_nce_loss(logits.view(-1, 3), config["bce_weight"])
            else:
                loss = pay_loss(logits, target.to(logits.device))
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(ids)
            count += len(ids)
            step += 1
        metrics = {"epoch": epoch + 1, "train_loss": total / max(count, 1), "epoch_s": time.perf_counter() - t0}
        checkpoint = None
        if rank == 0:
            metrics.update(evaluate({"net": inner, "tokenizer": tokenizer, "max_length": mcfg.max_length}, val, kind))
            if client is not None:
                for key, value in metrics.items():
                    if key != "epoch":
                        client.log_metric(config["run_id"], key, float(value), step=epoch + 1)
            better = best is None or (metrics[metric] > best if kind == "can" else metrics[metric] < best)
            if better or epoch == 0:
                best = metrics[metric]
                folder = tempfile.mkdtemp(prefix="canpay-ckpt-")
                CanPayModel(mcfg, net=inner, tokenizer=tokenizer, device="cpu").save(
                    folder, meta={"epoch": epoch + 1, **{k: float(v) for k, v in metrics.items()}})
                checkpoint = ray.train.Checkpoint.from_directory(folder)
        ray.train.report(metrics, checkpoint=checkpoint)


# ------------------------------------------------------------------------------------ driver
def register_version(name: str, source: str, run_id: str, tracking_uri: str, tags: dict[str, str] | None = None):
    """A new version of registered model ``name`` whose files are the run's ``model`` artifact folder,
    tagged with ``tags`` (the data lineage: the registry answers which collection a version read).

    MLflow 3's ``register_model("runs:/...")`` only accepts flavour-logged models; the Can/Pay folder is
    a plain artifact (encoder + head + json), so the version is created from its artifact URI."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)
    try:
        client.create_registered_model(name)
    except MlflowException:
        pass  # exists already: add a version
    return client.create_model_version(name, source=source, run_id=run_id, tags=tags or None)


def log_training_inputs(run_id: str, sources: list[Any], tracking_uri: str) -> None:
    """Log each collection the run read (a :class:`~groundplan.datasets.source.DataSource` with the dataset
    its collect run logged) as the run's ``training`` input: the same name, digest and source, so MLflow
    shows one dataset with its collect run and the runs trained on it. Plain paths log no input (no
    collect run vouches for them); they are in the ``data`` param and ``groundplan.data.source`` tag."""
    from mlflow.entities import DatasetInput, InputTag
    from mlflow.tracking import MlflowClient
    from mlflow.utils.mlflow_tags import MLFLOW_DATASET_CONTEXT

    from groundplan.datasets.source import TRAINING_CONTEXT

    inputs = [DatasetInput(s.dataset, [InputTag(MLFLOW_DATASET_CONTEXT, TRAINING_CONTEXT)])
              for s in sources if s.dataset is not None]
    if inputs:
        MlflowClient(tracking_uri=tracking_uri).log_inputs(run_id, datasets=inputs)


def run_train(cfg: TrainConfig, progress: bool = True, ray_address: str | None = None) -> TrainResult:
    """Train, log to MLflow, register; see the module docstring. A tracking server that does not answer
    fails here, before the data is read or a model built (once training runs, MLflow's own retries ride
    out a server's short absence), and so does a ``data`` entry naming a collection (``runs:/<id>``,
    ``datasets:/<name>``) that the store does not hold, resolved once here
    (:func:`groundplan.datasets.source.resolve_data`). The run then records which collection it read: the
    collect run's dataset as its ``training`` input, and tags on the run and the registered version."""
    from groundplan.pipelines.tracking import (
        check_tracking_server,
        resolve_tracking_uri,
        use_experiment,
    )

    tracking_uri = resolve_tracking_uri(cfg.output_dir, cfg.tracking_uri)
    check_tracking_server(tracking_uri, hint="leave tracking_uri and MLFLOW_TRACKING_URI unset to register in the "
                          "SQLite store under output_dir")
    from groundplan.datasets.source import lineage_tags, resolve_data

    reference = reference_lineage(cfg, tracking_uri)
    sources = resolve_data(cfg.data, tracking_uri)
    import mlflow
    from ray.train import CheckpointConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from groundplan.pipelines.tracking import flatten

    train, val, counts, lineage = build_examples(cfg, [p for s in sources for p in s.paths], reference)
    log.info("%s: %s", cfg.name, counts)
    run_root = (Path(cfg.output_dir) / cfg.name).resolve()
    run_root.mkdir(parents=True, exist_ok=True)
    use_experiment(cfg.experiment, cfg.output_dir, tracking_uri)
    with mlflow.start_run(run_name=cfg.name) as run:
        params = {k: v for k, v in flatten(cfg.model_dump()).items() if k != "data"}
        params["data"] = ",".join(cfg.data)[:500]
        params["delta"] = cfg.resolved_delta
        mlflow.log_params({k: str(v)[:500] for k, v in params.items()})
        mlflow.log_metrics({f"data.{k}": float(v) for k, v in counts.items()})
        tags = lineage_tags(sources)
        mlflow.set_tags(tags)
        log_training_inputs(run.info.run_id, sources, tracking_uri)
        from groundplan.actors.group import RunnerGroup

        # the trainer's workers plus its controller actor
        with RunnerGroup(address=ray_address, cpus_needed=max(2, cfg.num_workers * cfg.cpus_per_worker + 1),
                         log_to_driver=progress, include_dashboard=True):
            trainer = TorchTrainer(
                train_loop,
                train_loop_config={
                    "model": cfg.model.model_dump(), "train": train, "val": val, "epochs": cfg.epochs,
                    "batch_size": cfg.batch_size, "lr_head": cfg.lr_head, "lr_encoder": cfg.lr_encoder,
                    "weight_decay": cfg.weight_decay, "bce_weight": cfg.bce_weight, "seed": cfg.seed,
                    "run_id": run.info.run_id, "tracking_uri": tracking_uri, "progress": progress,
                },
                scaling_config=ScalingConfig(num_workers=cfg.num_workers, use_gpu=cfg.use_gpu,
                                             resources_per_worker={"CPU": cfg.cpus_per_worker}),
                run_config=RunConfig(name=f"{cfg.name}-{run.info.run_id[:8]}", storage_path=str(run_root / "ray"),
                                     # checkpoints are reported only when the metric improves: the last is the best
                                     checkpoint_config=CheckpointConfig(num_to_keep=1)),
            )
            result = trainer.fit()
        if result.error is not None:
            raise result.error
        if result.checkpoint is None:
            raise RuntimeError("training reported no checkpoint")
        model_dir = run_root / "model"
        shutil.rmtree(model_dir, ignore_errors=True)
        with result.checkpoint.as_directory() as folder:
            shutil.copytree(folder, model_dir)
        from groundplan.grounding.canpay.lineage import save_lineage

        lineage.source = f"models:/{cfg.name} (run {run.info.run_id})"
        save_lineage(model_dir, lineage)  # logged with the model: the evaluation checks test sets against it
        history = [dict(r) for r in result.metrics_dataframe.to_dict("records")] if result.metrics_dataframe is not None else []
        mlflow.log_artifacts(str(model_dir), artifact_path="model")
        import json

        best = json.loads((model_dir / "canpay.json").read_text())["meta"]
        mlflow.log_metrics({f"best.{k}": float(v) for k, v in best.items() if isinstance(v, (int, float))})
        version = register_version(cfg.name, f"{run.info.artifact_uri}/model", run.info.run_id, tracking_uri,
                                   tags=tags)
    uri = f"models:/{cfg.name}/{version.version}"
    log.info("registered %s (run %s) in %s", uri, run.info.run_id, tracking_uri)
    return TrainResult(model_uri=uri, version=int(version.version), run_id=run.info.run_id, tracking_uri=tracking_uri,
                       model_dir=model_dir, metrics={k: float(v) for k, v in best.items() if isinstance(v, (int, float))},
                       history=history, counts=counts)
