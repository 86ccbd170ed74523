"""The ``groundplan`` command: plan one instruction, evaluate a config, list plugins."""
from __future__ import annotations

import argparse
import logging
import math
import sys
from typing import Sequence

from rich.console import Console
from rich.table import Table

from groundplan.core.errors import GroundplanError
from groundplan.pipelines.distributed import add_ray_arguments

console = Console()
log = logging.getLogger("groundplan")


def _prob(logv: float) -> str:
    return "0" if logv == float("-inf") else f"{math.exp(logv):.3f}"


def cmd_plan(args: argparse.Namespace) -> int:
    from groundplan.config import PlannerSpec
    from groundplan.core.types import Task
    from groundplan.core.validation import validate_instruction
    from groundplan.envs import ENVS
    from groundplan.factory import make_planner
    from groundplan.llm import load_llm
    from groundplan.rollout.episode import run_episode

    instruction = validate_instruction(args.instruction)
    env = ENVS.get(args.env)()
    affordance = args.affordance
    if affordance is None and args.planner == "saycan":
        affordance = env.default_affordance()
    spec = PlannerSpec(name=args.planner, affordance=affordance if affordance != "none" else None)
    lm = load_llm(args.backend, model=args.model)
    planner = make_planner(spec, lm, args.max_steps)
    task = Task(task_id="cli", instruction=instruction, family="cli", goal=None)
    trace = run_episode(planner, env, task, args.seed, max_steps=args.max_steps, llm_name=args.model)
    for step in trace.steps:
        table = Table(title=f"step {step.index + 1}: {step.chosen}" + ("" if step.done else f"  [{'ok' if step.success else 'failed'}]"),
                      title_justify="left")
        table.add_column("option")
        table.add_column("LLM p", justify="right")
        table.add_column("affordance", justify="right")
        table.add_column("combined", justify="right")
        for c in sorted(step.candidates, key=lambda c: c.combined, reverse=True)[: args.top]:
            aff = "—" if c.affordance is None else f"{c.affordance:.3f}"
            style = "bold green" if c.skill == step.chosen else None
            table.add_row(c.skill, _prob(c.llm) if trace.planner != "generative" else f"cos {c.llm:.3f}", aff,
                          _prob(c.combined) if trace.planner != "generative" else f"{c.combined:.3f}", style=style)
        console.print(table)
    if trace.error:
        console.print(f"[red]episode error: {trace.error}[/red]")
    plan = ", ".join(f"{i + 1}. {s}" for i, s in enumerate(s.chosen for s in trace.steps))
    console.print(f"[bold]Human:[/bold] {instruction}\n[bold]Robot:[/bold] {plan}")
    if args.chart:
        from groundplan.plots import plot_step_scores

        console.print(f"chart: {plot_step_scores(trace, args.chart, top=args.top)}")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from groundplan.config import load_config
    from groundplan.pipelines.evaluate import run_eval
    from groundplan.pipelines.summary import render_table

    overrides = list(args.set or [])
    if args.full:
        overrides.append("tasks.per_family=null")
    if args.output:
        overrides.append(f"output_dir={args.output}")
    cfg = load_config(args.config, overrides)
    if args.local:
        result = run_eval(cfg, progress=not args.no_progress, resume=not args.fresh)
    else:
        from groundplan.pipelines.distributed import ray_kwargs_from_args, run_eval_ray

        result = run_eval_ray(cfg, progress=not args.no_progress, resume=not args.fresh, **ray_kwargs_from_args(args))
    from groundplan.envs import ENVS
    from groundplan.pipelines.summary import render_metric_table

    metrics = ENVS.get(cfg.env.name).capabilities.table_measures
    if metrics:  # env-specific metrics, e.g. Zero-Shot Planners' executability / LCS (Table 2)
        console.print(render_metric_table(result.summary, list(metrics) + ["mean_steps"], title=f"{cfg.name}: all test tasks"))
    else:
        console.print(render_table(result.summary, title=cfg.name))
    if result.best:  # planner grids: every method at its best variant (Zero-Shot Planners, A.1)
        from groundplan.pipelines.summary import method_rows

        rows = method_rows(result.summary, [(p.display, p.group) for p in cfg.planners], result.best)
        shown = list(metrics) if metrics else list(dict.fromkeys([*cfg.select_by, "execution_success", "mean_steps"]))
        title = f"{cfg.name}: each grid at its best variant by {' + '.join(cfg.select_by)}"
        console.print(render_metric_table(rows, shown, title=title))
        for group, row in result.best.items():
            console.print(f"  {group}: {row.planner}", markup=False)
    errors = sum(r.errors for r in result.summary if r.family == "all")
    if errors:
        console.print(f"[yellow]{errors} episode(s) recorded an error; see traces[/yellow]")
    console.print(f"traces: {result.run_dir / 'traces.jsonl'}  ({result.skipped} episode(s) reused from an earlier run)")
    if result.stats.get("mlflow_run_id"):
        console.print(f"MLflow run: {result.stats['mlflow_run_id']}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from pathlib import Path

    from groundplan.core.errors import InvalidInputError
    from groundplan.report import render_report

    run_dir = Path(args.run)
    if not (run_dir / "traces.jsonl").exists():
        raise InvalidInputError(f"no traces.jsonl in {run_dir}: give a run folder such as outputs/saycan_kitchen")
    console.print(f"report: {render_report(run_dir)}")
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from groundplan.pipelines.train import load_train_config, run_train

    result = run_train(load_train_config(args.config, list(args.set or [])), progress=not args.no_progress)
    shown = " ".join(f"{k}={v:.4f}" for k, v in result.metrics.items() if k.startswith("val_"))
    console.print(f"registered {result.model_uri} ({shown}) in {result.tracking_uri}; files: {result.model_dir}", markup=False)
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from groundplan.envs import ENVS
    from groundplan.grounding import AFFORDANCES
    from groundplan.llm import LLM_BACKENDS
    from groundplan.planners import PLANNERS

    for reg in (ENVS, PLANNERS, AFFORDANCES, LLM_BACKENDS):
        console.print(f"[bold]{reg.kind}[/bold]: {', '.join(reg.names())}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="groundplan", description="Grounded LLM planning for robots.")
    ap.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = ap.add_subparsers(dest="command", required=True)

    p = sub.add_parser("plan", help="plan one instruction and show each step's scores")
    p.add_argument("instruction")
    p.add_argument("--env", default="kitchen")
    p.add_argument("--planner", default="saycan")
    p.add_argument("--affordance", default=None, help="affordance source (default: the env's; 'none' disables)")
    p.add_argument("--backend", default="hf")
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-steps", type=int, default=20)
    p.add_argument("--top", type=int, default=5, help="options shown per step")
    p.add_argument("--chart", default=None, help="write a PNG bar chart of the scores (SayCan Fig. 7)")
    p.set_defaults(func=cmd_plan)

    e = sub.add_parser("eval", help="run an evaluation config and print the per-family table")
    e.add_argument("config")
    e.add_argument("--full", action="store_true", help="the full task set instead of the config's selection")
    e.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config field, e.g. seeds=[0,1]")
    e.add_argument("--output", default=None, help="output directory (default: the config's output_dir)")
    e.add_argument("--fresh", action="store_true", help="ignore traces from an earlier run of this config")
    e.add_argument("--no-progress", action="store_true")
    add_ray_arguments(e)
    e.set_defaults(func=cmd_eval)

    r = sub.add_parser("report", help="render HTML pages (frames, prompts, feedback, scores) for a run's episodes")
    r.add_argument("run", help="a run folder, e.g. outputs/inner_monologue_tabletop")
    r.set_defaults(func=cmd_report)

    t = sub.add_parser("train", help="train a SayCanPay Can or Pay model on Ray Train and register it in MLflow")
    t.add_argument("config", help="e.g. configs/train_can_kitchen.yaml")
    t.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config field, e.g. epochs=5")
    t.add_argument("--no-progress", action="store_true")
    t.set_defaults(func=cmd_train)

    ls = sub.add_parser("list", help="list registered envs, planners, affordances and LLM backends")
    ls.set_defaults(func=cmd_list)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return args.func(args)
    except GroundplanError as e:
        console.print(f"[red]error:[/red] {e}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
