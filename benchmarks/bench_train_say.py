"""Say fine-tuning throughput: groundplan's training step against a plain transformers loop, same data, one run.

Both sides train the same LoRA adapter (peft, r 16, every linear layer) on the same Say decisions (the
prompts a planner reads and the steps it chose, ``groundplan train``'s examples file) with AdamW and the
loss on the completion tokens only, each decision's completion once, read after its own prompt: the same
objective.

- ``plain``: what a transformers user writes first: one row per decision, batches of ``--batch`` rows
  padded to the longest, an attention mask, float32;
- ``groundplan``: what the Say trainer runs (TRL's SFT recipe inside Ray Train): a trajectory's decisions
  whose prompts extend each other as one sequence (``decision_chains``: every completion in the loss, each
  after exactly its prompt's text), packed into rows of ``--max-length`` tokens by TRL's best-fit packing,
  no padding (TRL's padding-free collator: one flat row, position ids restarting per sequence, so none
  attends to another), bf16 autocast where the CPU has AVX512-BF16 or AMX (float32 elsewhere;
  ``--precision`` forces one).

Each round trains one pass over the same ``--examples`` decisions on each side, the sides alternating
(the harness's rounds). The speed-up is the time ratio for the same decisions; decisions/s is the unit
both sides share, tokens/s counts each side's own real tokens (no padding), which the chains make fewer.
``peak_fraction`` = 4 x parameters x the side's tokens / time / the measured matmul peak at its precision
(a LoRA step runs the frozen weights forward and backward to the activations, about 4 FLOPs per parameter
per token; attention not counted). ``packed_loss_gap``: the largest difference between a sequence's loss
computed packed and alone, in float32 before training (checks the packing's masks: it must be ~1e-6).

Last line: ``result: plain_dec_s=... groundplan_dec_s=... speedup=... speedup_lo=... speedup_hi=...
plain_tok_s=... groundplan_tok_s=... plain_peak_fraction=... groundplan_peak_fraction=... precision=...
packed_loss_gap=... decisions=... rounds=...``

    python benchmarks/bench_train_say.py [--examples-file outputs/train/say-virtualhome/examples-*.json] [--rounds 3]
"""
from __future__ import annotations

import argparse
import glob
import json
import logging
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks.*, when run as a script
from benchmarks.flops import matmul_flops  # noqa: E402
from benchmarks.harness import alternating, log_interval, report, setup_logging  # noqa: E402

log = logging.getLogger("benchmarks.train_say")


def labelled(rows: list[dict]) -> list[dict]:
    """The trainer's tokenised rows (``input_ids``, ``completion_mask``) with labels: the prompt's tokens -100."""
    return [{"input_ids": r["input_ids"], "labels": [t if m else -100 for t, m in zip(r["input_ids"], r["completion_mask"])]}
            for r in rows]


def lora_model(path: str, seed: int):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="sdpa")
    model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules="all-linear",
                                             task_type="CAUSAL_LM"))
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    return model, opt


def padded_batches(rows: list[dict], batch: int, pad_id: int) -> list[dict]:
    out = []
    for i in range(0, len(rows), batch):
        chunk = rows[i: i + batch]
        n = max(len(r["input_ids"]) for r in chunk)
        ids = torch.full((len(chunk), n), pad_id)
        mask = torch.zeros((len(chunk), n), dtype=torch.long)
        labels = torch.full((len(chunk), n), -100)
        for j, r in enumerate(chunk):
            k = len(r["input_ids"])
            ids[j, :k] = torch.tensor(r["input_ids"])
            mask[j, :k] = 1
            labels[j, :k] = torch.tensor(r["labels"])
        out.append({"input_ids": ids, "attention_mask": mask, "labels": labels})
    return out


def packed_batches(rows: list[dict], max_length: int, rows_per_batch: int, pad_id: int) -> list[dict]:
    """TRL's best-fit packing and padding-free collator, as the Say trainer's SFTTrainer uses them."""
    from datasets import Dataset
    from trl.data_utils import pack_dataset
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    packed = pack_dataset(Dataset.from_list(rows), seq_length=max_length, strategy="bfd")
    collator = DataCollatorForLanguageModeling(pad_token_id=pad_id, padding_free=True)
    items = packed.to_list()
    return [collator(items[i: i + rows_per_batch]) for i in range(0, len(items), rows_per_batch)]


def real_tokens(batches: list[dict]) -> int:
    return sum(int(b["attention_mask"].sum()) if "attention_mask" in b else int(b["input_ids"].numel())
               for b in batches)


def train_pass(model, opt, batches: list[dict], bf16: bool) -> float:
    model.train()
    t0 = time.perf_counter()
    for b in batches:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = model(**{k: v for k, v in b.items() if k in ("input_ids", "attention_mask", "labels",
                                                                "position_ids")}, use_cache=False).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return time.perf_counter() - t0


@torch.inference_mode()
def packed_loss_gap(model, rows: list[dict], max_length: int, pad_id: int) -> float:
    """Largest |loss(example packed with others) - loss(example alone)| over the first packed row's examples."""
    import torch.nn.functional as F

    model.eval()
    batch = packed_batches(rows, max_length, 1, pad_id)[0]
    # without a cache: transformers reads restarting position ids as packed sequences (a block-diagonal mask)
    # only when no key/value cache is being built, as TRL's SFTTrainer runs its forwards
    logits = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"], use_cache=False).logits[0].float()
    pos = batch["position_ids"][0]
    starts = [i for i in range(len(pos)) if pos[i] == 0] + [len(pos)]
    gap = 0.0
    for a, b in zip(starts, starts[1:]):
        ids = batch["input_ids"][0, a:b]
        labels = batch["labels"][0, a:b]
        alone = model(input_ids=ids[None], use_cache=False).logits[0].float()
        lp_packed = F.cross_entropy(logits[a:b - 1], labels[1:], ignore_index=-100)
        lp_alone = F.cross_entropy(alone[:-1], labels[1:], ignore_index=-100)
        gap = max(gap, abs(float(lp_packed - lp_alone)))
    return gap


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples-file", default="outputs/train/say-*/examples-*.json",
                    help="a Say examples file written by groundplan train (a glob: the newest match)")
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--examples", type=int, default=64, help="decisions per side per round (the file's first)")
    ap.add_argument("--batch", type=int, default=4, help="plain side: examples per step")
    ap.add_argument("--max-length", type=int, default=512, help="groundplan side: tokens per packed row")
    ap.add_argument("--rows", type=int, default=4, help="groundplan side: packed rows per step")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--precision", choices=["auto", "float32", "bfloat16"], default="auto")
    args = ap.parse_args(argv)
    setup_logging()

    from transformers import AutoTokenizer

    from groundplan.core.hardware import cpu_has_bf16
    from groundplan.llm.loading import resolve_model_path

    files = sorted(glob.glob(args.examples_file), key=lambda p: Path(p).stat().st_mtime)
    if not files:
        raise SystemExit(f"no examples file matches {args.examples_file}: run groundplan train "
                         "configs/train_say_babyai.yaml once (it writes the examples before training)")
    examples = json.loads(Path(files[-1]).read_text())["train"]
    path = resolve_model_path(args.model)
    tok = AutoTokenizer.from_pretrained(path)
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    from groundplan.pipelines.train.say import sft_rows

    decisions = examples[: args.examples]
    rows = labelled(sft_rows(decisions, tok, args.max_length, None, 0, merge=False)[0])
    chains = labelled(sft_rows(decisions, tok, args.max_length, None, 0, merge=True)[0])
    bf16 = cpu_has_bf16() if args.precision == "auto" else args.precision == "bfloat16"
    precision = "bfloat16" if bf16 else "float32"
    plain_batches = padded_batches(rows, args.batch, pad)
    packed = packed_batches(chains, args.max_length, args.rows, pad)
    tokens = sum(len(r["input_ids"]) for r in rows)
    gp_tokens = sum(len(r["input_ids"]) for r in chains)
    padded = sum(int(b["input_ids"].numel()) for b in plain_batches)
    log.info("%d decisions: plain %d tokens in %d steps padded to %d tokens (%.0f%% padding); groundplan %d chains, "
             "%d tokens, %d steps of packed rows of at most %d tokens; precision %s, torch threads %d", len(rows),
             tokens, len(plain_batches), padded, 100 * (1 - tokens / padded), len(chains), gp_tokens, len(packed),
             args.max_length, precision, torch.get_num_threads())
    plain_model, plain_opt = lora_model(path, 0)
    gp_model, gp_opt = lora_model(path, 0)
    gap = packed_loss_gap(gp_model, chains, args.max_length, pad)
    log.info("packed vs alone loss, float32: max gap %.2e", gap)
    params = sum(p.numel() for p in plain_model.parameters())
    peaks = {"float32": matmul_flops(torch.float32, "cpu")}
    peaks["bfloat16"] = matmul_flops(torch.bfloat16, "cpu") if bf16 else peaks["float32"]
    log.info("matmul peak: float32 %.1f GFLOP/s, bf16 %.1f GFLOP/s", peaks["float32"] / 1e9, peaks["bfloat16"] / 1e9)
    train_pass(plain_model, plain_opt, plain_batches[:1], False)  # warm-up
    train_pass(gp_model, gp_opt, packed[:1], bf16)

    def on_round(r, order, got):
        log.info("round %d (%s): plain %.1f s, groundplan %.1f s", r + 1, " then ".join(order), got["plain"],
                 got["groundplan"])

    times = alternating({"plain": lambda: train_pass(plain_model, plain_opt, plain_batches, False),
                         "groundplan": lambda: train_pass(gp_model, gp_opt, packed, bf16)}, args.rounds, on_round)
    ratios = [p / g for p, g in zip(times["plain"], times["groundplan"])]
    mid, lo, hi = log_interval(ratios)
    plain_s, gp_s = statistics.median(times["plain"]), statistics.median(times["groundplan"])
    report({"plain_dec_s": round(len(rows) / plain_s, 2), "groundplan_dec_s": round(len(rows) / gp_s, 2),
            "speedup": round(mid, 3), "speedup_lo": round(lo, 3), "speedup_hi": round(hi, 3),
            "plain_tok_s": round(tokens / plain_s, 1), "groundplan_tok_s": round(gp_tokens / gp_s, 1),
            "plain_peak_fraction": round(4 * params * tokens / plain_s / peaks["float32"], 3),
            "groundplan_peak_fraction": round(4 * params * gp_tokens / gp_s / peaks[precision], 3),
            "precision": precision, "packed_loss_gap": f"{gap:.1e}", "decisions": len(rows), "rounds": args.rounds})


if __name__ == "__main__":
    main()
