"""How well learned Cans, and SayCan's two LLM scores, rank EAI's skills: the choice behind SayCan's
learned-Can row on EAI, made on the Cans' validation tasks.

SayCan multiplies the LLM score of every skill by its affordance (Ahn et al. 2022, Algorithm 1), so a Can
helps only if it ranks the feasible, useful next step above the ~245 others of an EAI task. For each task,
this walks the gold program's first ``--steps`` steps and ranks every skill after the gold history: by each
Can's p_can, and with ``--llm`` by the LM's score of SayCan's prompt (sum and mean of the option's token
log-probs) and by the two combined (:mod:`groundplan.evaluation.eai.can_probe`). ``--tasks validation``
(the default) probes the models' validation tasks (their lineage; every model must hold the same ones),
``--tasks test`` the 20-task test sample of ``configs/eai_virtualhome.yaml``, to describe a choice already
made, never to make one.

    python benchmarks/probe_eai_can.py --model models:/can-eai/1 --model models:/can-eai-listed/1 \\
        --llm smollm2-135m-instruct --output docs/results/data/eai/can_choice_validation.json

``--feasibility`` adds, per Can, how well it separates each probed step's feasible skills from the infeasible ones
(the simulator's own check after the gold history; the AUC, 0.5 for a Can that does not separate them), logged and
in the result line as ``can_<model>_feasibility_auc`` (the mean over the probed steps).

The data file renders as a ``<!-- can-probe: FILE -->`` block (``groundplan tables --render PAGE``). The
last line is ``result: key=value ...``.
"""
from __future__ import annotations

import argparse
import logging

log = logging.getLogger("probe_eai_can")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", action="append", help="a Can model URI or folder (repeat to compare)")
    ap.add_argument("--tracking-uri", default="sqlite:///outputs/train/mlruns/mlflow.db")
    ap.add_argument("--tasks", choices=["validation", "test"], default="validation")
    ap.add_argument("--llm", default=None, help="an LM name: adds the LLM and SayCan scorers")
    ap.add_argument("--prompt", default="saycan_eai", help="SayCan's prompt (as in configs/eai_virtualhome.yaml)")
    ap.add_argument("--steps", type=int, default=3, help="gold steps probed per task")
    ap.add_argument("--limit", type=int, default=20, help="the test sample's size (--tasks test)")
    ap.add_argument("--sample-seed", type=int, default=0)
    ap.add_argument("--output", default=None, help="write the data file here")
    ap.add_argument("--feasibility", action="store_true", help="also how well each Can separates the step's feasible "
                    "skills from the infeasible ones by the simulator's own check (AUC), after the gold history")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    from groundplan.core.errors import InvalidInputError
    from groundplan.envs.virtualhome.eai.tasks import sample_ids
    from groundplan.evaluation.eai import can_probe
    from groundplan.grounding.canpay.model import resolve_model_folder
    from groundplan.grounding.saycanpay import LearnedCanPay

    models = args.model or ["models:/can-eai/1"]
    labels = [m.removeprefix("models:/").split("/")[0] for m in models]
    cans = {label: LearnedCanPay(can_model=m, tracking_uri=args.tracking_uri, device="cpu") for label, m in zip(labels, models)}
    if args.tasks == "validation":
        held = {m: can_probe.validation_tasks(resolve_model_folder(m, args.tracking_uri), m) for m in models}
        if len({tuple(v) for v in held.values()}) > 1:
            raise InvalidInputError("the models hold different validation tasks, so no choice between them is paired: "
                                    + "; ".join(f"{m}: {len(v)}" for m, v in held.items()))
        task_ids = held[models[0]]
    else:
        task_ids = sample_ids("official", args.limit, args.sample_seed)
    lm = None
    if args.llm:
        from groundplan.llm.hf import HFLanguageModel

        lm = HFLanguageModel(model=args.llm)
    log.info("probing %d %s tasks, %d gold steps each, with %s%s", len(task_ids), args.tasks, args.steps,
             ", ".join(models), f" and {args.llm}" if lm else "")
    rows = []
    for r in can_probe.probe(task_ids, cans, lm, prompt=args.prompt, steps=args.steps, feasibility=args.feasibility):
        log.info("%s step %d %s (%d skills): %s", r["task"], r["step"], r["gold"], r["skills"],
                 ", ".join(f"{k} {v}" for k, v in r["ranks"].items()))
        rows.append(r)
    pairs, choices = [], {}
    if len(labels) > 1:
        pairs.append((f"can {labels[0]}", f"can {labels[1]}"))
        choices["Can"] = [f"can {label}" for label in labels]
    if lm is not None:
        combined = [f"SayCan {mode} × {label}" for mode in can_probe.LLM_SCORES for label in labels]
        pairs += [(f"SayCan sum × {label}", f"SayCan mean × {label}") for label in labels]
        choices["SayCan scorer"] = combined
    meta = {"title": f"Gold-step ranks on the {args.tasks} tasks" + (f", {args.llm}" if lm else ""),
            "tasks": f"{args.tasks} tasks", "models": models, "llm": args.llm, "prompt": args.prompt,
            "steps": args.steps, "pairs": pairs, "choices": choices}
    if args.output:
        can_probe.write(args.output, rows, **meta)
    print(can_probe.render_markdown({**meta, "rows": rows}))
    summary = {s["scorer"]: s for s in can_probe.summarise(rows)}
    aucs = {label: [r["auc"][label] for r in rows if r.get("auc", {}).get(label) is not None] for label in labels}
    for label, values in aucs.items():
        if values:
            log.info("can %s: feasible above infeasible (AUC) %.3f mean over %d steps, min %.3f", label,
                     sum(values) / len(values), len(values), min(values))
    print("result: " + f"tasks={len(task_ids)} gold_steps={len(rows)} " + " ".join(
        f"{k.replace(' ', '_').replace('×', 'x')}_median_rank={can_probe.format_rank(v['median'])}" for k, v in summary.items())
        + "".join(f" can_{label}_feasibility_auc={sum(v) / len(v):.3f}" for label, v in aucs.items() if v))


if __name__ == "__main__":
    main()
