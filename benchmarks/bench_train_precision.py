"""Say fine-tuning in float32 against bf16 autocast, the trainer's own step, one run: speed and the loss curves.

Two copies of the same LoRA adapter (seed 0, ``bench_train_say``'s model) train on the same decision chains,
packed as the Say trainer packs them, one in float32 and one under ``torch.autocast(bfloat16)``, epoch by epoch,
the sides alternating which goes first. After every epoch both are evaluated in float32 on the same validation
decisions (validation *tasks*: the examples file's own split), so the curves compare what each precision
learned, not how each precision computes a loss.

Data file (``--out``): every training step's loss and every epoch's time and validation loss, per side; the plot
(``--plot``) is drawn from it. Last line: ``result: speedup=... speedup_lo=... speedup_hi=... float32_tok_s=...
bfloat16_tok_s=... final_val_float32=... final_val_bfloat16=... val_gap=... epochs=... decisions=...``

    python benchmarks/bench_train_precision.py [--examples-file outputs/train/say-virtualhome/examples-*.json]
        [--examples 384] [--validation 96] [--epochs 6]
"""
from __future__ import annotations

import argparse
import glob
import json
import logging
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks.*, when run as a script
from benchmarks.bench_train_say import labelled, lora_model, packed_batches  # noqa: E402
from benchmarks.harness import alternating, data_file_args, log_interval, report, setup_logging  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "docs" / "results" / "data" / "say" / "train_precision.json"
PLOT = ROOT / "docs" / "results" / "figures" / "train-precision.png"
log = logging.getLogger("benchmarks.train_precision")


def train_epoch(model, opt, batches: list[dict], bf16: bool, losses: list[float]) -> float:
    """One pass over ``batches`` (autocast to bf16 when ``bf16``); appends each step's loss; returns seconds."""
    import time

    model.train()
    t0 = time.perf_counter()
    for b in batches:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = model(**{k: v for k, v in b.items() if k in ("input_ids", "labels", "position_ids")},
                         use_cache=False).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()))
    return time.perf_counter() - t0


@torch.inference_mode()
def validation_loss(model, batches: list[dict]) -> float:
    """Mean completion-token loss over ``batches``, in float32 (no autocast), weighted by tokens."""
    model.eval()
    total, n = 0.0, 0
    for b in batches:
        k = int((b["labels"] != -100).sum())
        loss = model(**{k2: v for k2, v in b.items() if k2 in ("input_ids", "labels", "position_ids")}, use_cache=False).loss
        total += float(loss) * k
        n += k
    return total / max(n, 1)


def plot(data: dict, path: Path) -> Path:
    """Training loss per step (a moving mean) and validation loss per epoch, both precisions."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
    for side, d in data["sides"].items():
        losses = d["train_losses"]
        w = max(1, len(losses) // 40)
        smooth = [sum(losses[max(0, i - w + 1): i + 1]) / len(losses[max(0, i - w + 1): i + 1]) for i in range(len(losses))]
        a.plot(range(1, len(losses) + 1), smooth, label=side)
        b.plot(range(0, len(d["val_losses"])), d["val_losses"], "o-", label=side)
    a.set_xlabel("training step")
    a.set_ylabel(f"training loss (moving mean of {max(1, len(losses) // 40)})")
    b.set_xlabel("epoch")
    b.set_ylabel("validation loss (float32 evaluation)")
    for ax in (a, b):
        ax.grid(True, alpha=0.3)
        ax.legend()
    fig.suptitle(f"Say LoRA fine-tuning, float32 vs bf16 autocast ({data['decisions']} decisions, {data['examples_file']})")
    from groundplan.core.figures import save_figure

    return save_figure(fig, path, dpi=110)


def summary(data: dict) -> dict:
    """The result fields, recomputed from the data file."""
    f32, b16 = data["sides"]["float32"], data["sides"]["bfloat16"]
    ratios = [a / b for a, b in zip(f32["epoch_s"], b16["epoch_s"])]
    mid, lo, hi = log_interval(ratios)
    tok = data["tokens_per_epoch"]
    return {"speedup": round(mid, 3), "speedup_lo": round(lo, 3), "speedup_hi": round(hi, 3),
            "float32_tok_s": round(tok / statistics.median(f32["epoch_s"]), 1),
            "bfloat16_tok_s": round(tok / statistics.median(b16["epoch_s"]), 1),
            "final_val_float32": round(f32["val_losses"][-1], 4), "final_val_bfloat16": round(b16["val_losses"][-1], 4),
            "val_gap": round(b16["val_losses"][-1] - f32["val_losses"][-1], 4), "epochs": len(ratios),
            "decisions": data["decisions"]}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples-file", default="outputs/train/say-virtualhome/examples-*.json")
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--examples", type=int, default=384, help="training decisions (the file's first)")
    ap.add_argument("--validation", type=int, default=96, help="validation decisions (the file's first)")
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--max-length", type=int, default=512)
    ap.add_argument("--rows", type=int, default=4)
    data_file_args(ap, DATA, PLOT)
    args = ap.parse_args(argv)
    setup_logging()
    out = Path(args.out)
    if not args.render_only:
        from transformers import AutoTokenizer

        from groundplan.llm.loading import resolve_model_path
        from groundplan.pipelines.train.say import sft_rows

        files = sorted(glob.glob(args.examples_file), key=lambda p: Path(p).stat().st_mtime)
        if not files:
            raise SystemExit(f"no examples file matches {args.examples_file}: run groundplan train on a Say config once")
        examples = json.loads(Path(files[-1]).read_text())
        path = resolve_model_path(args.model)
        tok = AutoTokenizer.from_pretrained(path)
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        train = labelled(sft_rows(examples["train"][: args.examples], tok, args.max_length, None, 0, merge=True)[0])
        val = labelled(sft_rows(examples["validation"][: args.validation], tok, args.max_length, None, 0, merge=True)[0])
        train_b = packed_batches(train, args.max_length, args.rows, pad)
        val_b = packed_batches(val, args.max_length, args.rows, pad)
        models = {"float32": lora_model(path, 0), "bfloat16": lora_model(path, 0)}
        sides = {k: {"train_losses": [], "epoch_s": [], "val_losses": [validation_loss(m, val_b)]} for k, (m, _) in models.items()}

        def epoch(name: str) -> float:
            model, opt = models[name]
            s = train_epoch(model, opt, train_b, name == "bfloat16", sides[name]["train_losses"])
            sides[name]["epoch_s"].append(round(s, 3))
            sides[name]["val_losses"].append(round(validation_loss(model, val_b), 5))
            return s

        alternating({"float32": lambda: epoch("float32"), "bfloat16": lambda: epoch("bfloat16")}, args.epochs,
                    lambda r, order, got: log.info("epoch %d (%s): %s", r + 1, " then ".join(order), ", ".join(
                        f"{k} {v:.1f} s, val {sides[k]['val_losses'][-1]:.4f}" for k, v in got.items())))
        for s in sides.values():
            s["train_losses"] = [round(x, 5) for x in s["train_losses"]]
        data = {"examples_file": files[-1], "model": args.model, "decisions": args.examples, "validation_decisions": args.validation,
                "tokens_per_epoch": sum(len(r["input_ids"]) for r in train), "steps_per_epoch": len(train_b),
                "torch_threads": torch.get_num_threads(), "sides": sides}
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    data = json.loads(out.read_text(encoding="utf-8"))
    plot(data, Path(args.plot))
    report(summary(data))


if __name__ == "__main__":
    main()
