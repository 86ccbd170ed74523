"""The ``groundplan`` command: plan one instruction, evaluate a config, list plugins."""
from __future__ import annotations

import argparse
import logging
import math
import sys
from pathlib import Path
from typing import Any, Sequence

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from groundplan.core.errors import GroundplanError, InvalidInputError

console = Console()
log = logging.getLogger("groundplan")


def _prob(logv: float | None) -> str:
    if logv is None:  # an option SayCan's exact pruning never scored
        return "—"
    return "0" if logv == float("-inf") else f"{math.exp(logv):.3f}"


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _plan_llm(args: argparse.Namespace) -> Any:
    """``plan``'s LLM spec: ``--backend``/``--model`` with ``--set llm.<field>=value`` overrides (e.g.
    ``--set llm.backend=openai --set llm.options.base_url=http://host:8000/v1``), validated like a config's."""
    from pydantic import ValidationError

    from groundplan.config import LLMSpec, apply_overrides
    from groundplan.core.validation import describe_errors

    sets = list(args.set or [])
    if bad := [s for s in sets if not s.split("=", 1)[0].strip().startswith("llm.")]:
        raise InvalidInputError(f"plan --set takes llm.* overrides (llm.backend, llm.model, llm.options.<name>), got {bad}")
    data = apply_overrides({"llm": {"backend": args.backend, "model": args.model, "options": {}}}, sets)
    try:
        return LLMSpec.model_validate(data["llm"])
    except ValidationError as e:
        raise InvalidInputError(f"invalid llm: {describe_errors(e)}") from None


def cmd_plan(args: argparse.Namespace) -> int:
    from groundplan.config import PlannerSpec, check_llm_needs, check_say_model, probe_llm_needs, say_model_card
    from groundplan.core.types import Task
    from groundplan.core.validation import validate_instruction
    from groundplan.factory import build_env, make_llm, make_planner
    from groundplan.rollout.episode import run_episode

    instruction = validate_instruction(args.instruction)
    if args.chart:  # fail before the model loads, not after the episode
        from groundplan.pipelines.evaluate.sweep import check_writable

        check_writable(Path(args.chart).resolve().parent)
    env = build_env(args.env)
    affordance = args.affordance
    if affordance is None:  # planners that take no affordance ignore it
        affordance = env.default_affordance()
    # the charts show every option's scores, so SayCan's exact pruning (on in eval) is off here
    options = {"prune": False} if args.planner in ("saycan", "saycan_novf") else {}
    llm = _plan_llm(args)
    card = say_model_card(llm)
    if card is not None and card.get("planner") == args.planner:  # a fine-tuned Say model reads its own format
        options = {**card.get("planner_options", {}), **options}
    spec = PlannerSpec(name=args.planner, affordance=affordance if affordance != "none" else None, options=options)
    try:
        check_llm_needs(llm, [spec])
    except ValueError as e:
        raise InvalidInputError(str(e)) from None
    probe_llm_needs(llm, [spec])  # a server that cannot score is refused before the episode, quoting its answer
    check_say_model(llm, [spec])  # a fine-tuned Say model read through another prompt format is refused
    lm = make_llm(llm)
    planner = make_planner(spec, lm, args.max_steps)
    task = Task(task_id="cli", instruction=instruction, family="cli", goal=None)
    trace = run_episode(planner, env, task, args.seed, max_steps=args.max_steps, llm_name=llm.model)
    for step in trace.steps:
        # skills may look like rich markup (EAI's "[WALK] <laptop>"): printed as text
        table = Table(title=escape(f"step {step.index + 1}: {step.chosen}" + ("" if step.done else f"  [{'ok' if step.success else 'failed'}]")),
                      title_justify="left")
        table.add_column("option")
        table.add_column("LLM p", justify="right")
        table.add_column("affordance", justify="right")
        table.add_column("combined", justify="right")
        for c in sorted(step.candidates, key=lambda c: c.combined, reverse=True)[: args.top]:
            aff = "—" if c.affordance is None else f"{c.affordance:.3f}"
            style = "bold green" if c.skill == step.chosen else None
            cosine = c.extra.get("score") == "cosine"  # the Generative baseline ranks by embedding similarity
            table.add_row(escape(c.skill), f"cos {c.llm:.3f}" if cosine else _prob(c.llm), aff,
                          f"{c.combined:.3f}" if cosine else _prob(c.combined), style=style)
        console.print(table)
    if trace.error:
        console.print(f"[red]episode error: {trace.error}[/red]")
    plan = ", ".join(f"{i + 1}. {s}" for i, s in enumerate(s.chosen for s in trace.steps))
    console.print(f"[bold]Human:[/bold] {instruction}\n[bold]Robot:[/bold] {plan}")
    if args.chart:
        from groundplan.plots import plot_step_scores

        console.print(f"chart: {plot_step_scores(trace, args.chart, top=args.top)}")
    return 0


#: ``groundplan eval`` flags that override ``runtime`` fields of the config (flag dest -> field)
RUNTIME_FLAGS = {"address": "address", "workers": "workers", "envs_per_worker": "envs_per_worker",
                 "in_flight": "in_flight", "scorers": "scorers",
                 "scorer_gpus": "scorer_gpus", "scorer_threads": "scorer_threads",
                 "batch_window_ms": "batch_window_ms", "max_batch": "max_batch"}


def _resources(items: Sequence[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in items or []:
        name, sep, amount = item.partition("=")
        try:
            out[name.strip()] = float(amount) if sep else 1.0
        except ValueError:
            raise InvalidInputError(f"resource {item!r} is not NAME=AMOUNT") from None
    return out


def runtime_update(args: argparse.Namespace) -> dict[str, Any]:
    """The config's ``runtime`` fields the command line sets, as the typed values argparse parsed: the
    flags given, none of the ones left out (a command that declares only some of them gets only those)."""
    out = {field: getattr(args, dest) for dest, field in RUNTIME_FLAGS.items() if getattr(args, dest, None) is not None}
    if getattr(args, "local", False):
        out["executor"] = "local"
    if getattr(args, "no_mlflow", False):
        out["mlflow"] = False
    for flag, field in (("scorer_resource", "scorer_resources"), ("worker_resource", "worker_resources")):
        if getattr(args, flag, None):
            out[field] = _resources(getattr(args, flag))
    return out


def apply_eval_flags(cfg: Any, args: argparse.Namespace) -> Any:
    """``cfg`` (an ``EvalConfig`` loaded with its ``--set`` overrides) with ``groundplan eval``'s flags
    set on its typed fields: ``--full``, ``--output``, the runtime flags, then ``--planners``. Flags win
    over the YAML and ``--set``, and each value is validated by the field's own rules (RuntimeSpec's
    ranges) before anything starts; a bad one raises InvalidInputError naming the config field."""
    from groundplan.config import with_fields

    what = f"command-line flags for config {args.config}"
    update: dict[str, Any] = {}
    if args.full:
        update["tasks"] = with_fields(cfg.tasks, {"per_family": None}, what, "tasks")
    if args.output:
        update["output_dir"] = args.output  # a str field without constraints: argparse's str is its value
    if runtime := runtime_update(args):
        update["runtime"] = with_fields(cfg.runtime, runtime, what, "runtime")
    if update:
        cfg = cfg.model_copy(update=update)
    return keep_planners(cfg, args.planners) if args.planners else cfg


def whole_task_file(overrides: Sequence[str]) -> list[str]:
    """``--set`` overrides with ``tasks.per_family=null`` added when they name a task file
    (``tasks.file=...``) but no ``tasks.per_family``: a config's per-family cut is a quick look at the
    env's own task set, and whoever brings a file of their own expects all of it to run unless they ask
    for a subset (then ``--set tasks.per_family=N`` keeps the cut)."""
    keys = {item.split("=", 1)[0].strip() for item in overrides}
    if "tasks.file" in keys and "tasks.per_family" not in keys:
        return [*overrides, "tasks.per_family=null"]
    return list(overrides)


def keep_planners(cfg: Any, labels: str) -> Any:
    """The config with only the planners listed (comma-separated), in the config's order. A planner is
    named by its table label (``display``, oracles appended) or by the ``label`` its config gives it, so
    the label written in the config keeps working after the oracle suffix is added; an unknown or
    ambiguous name is refused with the config's labels."""
    from groundplan.core.errors import InvalidInputError

    wanted = [x.strip() for x in labels.split(",") if x.strip()]
    known = [p.display for p in cfg.planners]

    def matches(name: str) -> list[int]:
        exact = [i for i, p in enumerate(cfg.planners) if p.display == name]
        return exact or [i for i, p in enumerate(cfg.planners) if (p.label or p.name) == name]

    if unknown := [x for x in wanted if len(matches(x)) != 1]:
        raise InvalidInputError(f"--planners names {unknown} not in this config (or not one planner); "
                                f"its planners: {', '.join(known)}")
    keep = {i for x in wanted for i in matches(x)}
    return cfg.model_copy(update={"planners": [p for i, p in enumerate(cfg.planners) if i in keep]})


def cmd_eval(args: argparse.Namespace) -> int:
    from groundplan.config import load_config
    from groundplan.pipelines.evaluate.sweep import run_sweep

    cfg = apply_eval_flags(load_config(args.config, whole_task_file(args.set or [])), args)
    result = run_sweep(cfg, progress=not args.no_progress, resume=not args.fresh)
    from groundplan.envs import ENVS
    from groundplan.evaluation.summary import print_table, render_metric_table
    from groundplan.evaluation.tables import summary_table

    print_table(summary_table(result.summary, cfg.env.name, cfg.name), console)
    if result.best:  # planner grids: every method at its best variant (Zero-Shot Planners, A.1)
        from groundplan.evaluation.summary import method_rows

        metrics = ENVS.get(cfg.env.name).capabilities.table_measures
        rows = method_rows(result.summary, [(p.display, p.group) for p in cfg.planners], result.best)
        shown = list(metrics) if metrics else list(dict.fromkeys([*cfg.select_by, "execution_success", "mean_steps"]))
        title = f"{cfg.name}: each grid at its best variant by {' + '.join(cfg.select_by)}" + (
            f", a tie by {' + '.join(cfg.select_tie_break)}" if cfg.select_tie_break else "")
        print_table(render_metric_table(rows, shown, title=title), console)
        for group, row in result.best.items():
            console.print(f"  {group}: {row.planner}", markup=False)
    errors = sum(r.errors for r in result.summary if r.family == "all")
    if errors:
        console.print(f"[yellow]{errors} episode(s) recorded an error; see traces[/yellow]")
    console.print(f"traces: {result.run_dir / 'traces.jsonl'}  ({result.skipped} episode(s) reused from an earlier run)")
    if result.stale:
        console.print(f"[yellow]{result.stale} earlier trace(s) in that folder belong to another config: moved to "
                      "traces.other.jsonl, never reported (--fresh discards them)[/yellow]")
    if result.stats.get("mlflow_run_id"):
        console.print(f"MLflow run: {result.stats['mlflow_run_id']}")
    if result.stats.get("mlflow_error"):  # the results are on disk; the logged error line says how to log them
        return 3
    return 0


def cmd_tables(args: argparse.Namespace) -> int:
    from groundplan.evaluation import outcomes

    if args.export:
        names = [n.strip() for n in args.names.split(",")] if args.names else None
        path = outcomes.write_outcomes(args.export, outcomes.export_outcomes(args.runs, names, args.pair or (),
                                                                             args.eai_stored or ()))
        console.print(f"outcomes: {path}", markup=False)
        return 0
    if args.markdown:
        spec = outcomes.TableSpec.parse(args.options or "", "--options")
        for path in args.runs:
            console.print(outcomes.render_markdown(outcomes.load_outcomes(path), spec), markup=False,
                          highlight=False, soft_wrap=True)
        return 0
    if args.render:
        from groundplan.evaluation.pages import render_page

        for page in args.runs:
            render_page(page)
            console.print(f"rendered {page}", markup=False)
        return 0
    from groundplan.evaluation.tables import run_tables

    console.print(run_tables(args.runs, env=args.env, split=args.split), markup=False, highlight=False, soft_wrap=True)
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    import json

    from groundplan.evaluation.compare import compare_folders

    planners = [p.strip() for p in args.planners.split(",") if p.strip()] if args.planners else None
    pairs: dict[str, str] = {}
    for item in args.pair or []:
        a, sep, b = item.partition("=")
        if not sep or not a.strip() or not b.strip():
            raise InvalidInputError(f"--pair takes A_LABEL=B_LABEL, got {item!r}")
        pairs[a.strip()] = b.strip()
    result, text = compare_folders(args.run_a, args.run_b, planners, ignore_env_options=args.ignore_env_options,
                                   pairs=pairs)
    console.print(text, markup=False, highlight=False, soft_wrap=True)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
        console.print(f"comparison: {args.json}", markup=False)
    return 0


def cmd_log(args: argparse.Namespace) -> int:
    import mlflow

    from groundplan.pipelines.evaluate.sweep import log_run_folder

    run_id = log_run_folder(args.run, tracking_uri=args.tracking_uri)
    console.print(f"MLflow run: {run_id} in {mlflow.get_tracking_uri()}", markup=False)
    return 0


def cmd_report(args: argparse.Namespace) -> int:

    from groundplan.core.errors import InvalidInputError
    from groundplan.pipelines.evaluate.report import render_report

    run_dir = Path(args.run)
    if not (run_dir / "traces.jsonl").exists():
        raise InvalidInputError(f"no traces.jsonl in {run_dir}: give a run folder such as outputs/saycan_kitchen")
    console.print(f"report: {render_report(run_dir)}")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from groundplan.serve.signals import StopSignals

    stop = StopSignals()
    stop.install()  # first: loading the config and importing Ray take seconds; a signal then stops it cleanly too
    try:
        from groundplan.actors.scorer import import_plugins
        from groundplan.serve.config import load_serve_config

        import_plugins()  # $GROUNDPLAN_PLUGINS: backends of one's own, registered before the config names one
        cfg = load_serve_config(args.config, list(args.set or []))
        from groundplan.config import check_say_model, probe_llm_needs, with_fields

        if args.port is not None:  # validated like the YAML's port (1-65535)
            cfg = with_fields(cfg, {"port": args.port}, f"--port for serve config {args.config}")
        probe_llm_needs(cfg.llm, cfg.planners)  # an LLM server that cannot score is refused before serving
        check_say_model(cfg.llm, cfg.planners)  # and a fine-tuned Say model read through another prompt format
        if stop.received is not None:
            return stop.exit_status
        console.print(f"groundplan serve: http://{cfg.host}:{cfg.port}/ (API under /v1, OpenAPI at /docs)")
        if args.local:
            from groundplan.serve.local import run_local

            stop.uninstall()  # uvicorn handles SIGINT and SIGTERM itself
            run_local(cfg)
            return 0
        from groundplan.serve.app import run_server

        return run_server(cfg, address=args.address, stop=stop)  # 130 or 143 once SIGINT or SIGTERM stopped it
    finally:
        stop.uninstall()


def cmd_view(args: argparse.Namespace) -> int:
    from groundplan.viewer.server import check_folder, serve_viewer

    check_folder(args.output_dir)
    console.print(f"trace viewer: http://{args.host}:{args.port}/")
    serve_viewer(args.output_dir, args.host, args.port)
    return 0


def cmd_prompt(args: argparse.Namespace) -> int:
    """SayCanPay's few-shot prompt (App. A.1) from collected train trajectories, written to a file."""
    from groundplan.core.errors import InvalidInputError
    from groundplan.grounding.canpay.data import few_shot_prompt, read_trajectories

    trajs = read_trajectories([args.data], env=args.env, split="train")
    if not trajs:
        raise InvalidInputError(f"no train trajectories of env {args.env!r} under {args.data}; collect them first "
                                "(groundplan collect configs/collect_<env>.yaml)")
    text = few_shot_prompt(trajs, args.examples, seed=args.seed)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text, encoding="utf-8")
    console.print(f"wrote {args.out}: {text.count('[Goal]')} examples from {len(trajs)} train trajectories",
                  markup=False)
    return 0


def cmd_collect(args: argparse.Namespace) -> int:
    from groundplan.pipelines.collect.collect import run_collect
    from groundplan.pipelines.collect.config import load_collect_config

    cfg = load_collect_config(args.config, list(args.set or []))
    r = run_collect(cfg, progress=not args.no_progress, fresh=args.fresh)
    counts = ", ".join(f"{s}: {r.counts.get(s, 0)} ({r.successes.get(s, 0)} successful)" for s in cfg.splits)
    console.print(f"{cfg.name}: {r.appended} new, {r.skipped} already stored, {r.reruns} rerun(s), "
                  f"{len(r.errors)} error(s) in {r.wall_s:.1f} s; dataset {r.data_dir} has {counts}", markup=False)
    if r.mlflow_run_id:
        console.print(f"MLflow run: {r.mlflow_run_id}")
    return 1 if r.errors else 0


def _train_kind(path: str) -> str | None:
    """The ``kind`` field of a training YAML ('pointnav', 'say'), or None (a Can/Pay config); unreadable files
    are left to the config loader, which reports them."""
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError):
        return None
    return data.get("kind") if isinstance(data, dict) else None


def cmd_train(args: argparse.Namespace) -> int:
    from groundplan.pipelines.train.canpay import load_train_config, run_train

    if _train_kind(args.config) == "pointnav":
        from groundplan.pipelines.train.pointnav import (
            load_pointnav_config,
            run_train_pointnav,
        )

        res = run_train_pointnav(load_pointnav_config(args.config, list(args.set or [])), progress=not args.no_progress)
        m = res.metrics
        console.print(f"registered {res.model_uri} in {res.tracking_uri}; files: {res.model_dir}\n"
                      f"test point-goal episodes (n={int(m['test_n'])}): learned SR {100 * m['test_sr']:.1f}% "
                      f"[{100 * m['test_sr_lo']:.1f}, {100 * m['test_sr_hi']:.1f}] SPL {m['test_spl']:.3f}; "
                      f"A* SR {100 * m['astar_sr']:.1f}% SPL {m['astar_spl']:.3f}", markup=False)
        return 0
    if _train_kind(args.config) == "say":
        from groundplan.pipelines.train.say import load_say_config, run_train_say

        res = run_train_say(load_say_config(args.config, list(args.set or [])), progress=not args.no_progress)
        shown = " ".join(f"{k}={v:.4f}" for k, v in res.metrics.items() if k.startswith("eval_"))
        console.print(f"registered {res.model_uri} ({shown}; {res.counts['train_rows']} train / "
                      f"{res.counts['val_rows']} validation examples) in {res.tracking_uri}; files: {res.model_dir}",
                      markup=False)
        return 0
    result = run_train(load_train_config(args.config, list(args.set or [])), progress=not args.no_progress)
    shown = " ".join(f"{k}={v:.4f}" for k, v in result.metrics.items() if k.startswith("val_"))
    console.print(f"registered {result.model_uri} ({shown}) in {result.tracking_uri}; files: {result.model_dir}", markup=False)
    return 0


def cmd_improve(args: argparse.Namespace) -> int:
    from groundplan.pipelines.improve.report import plot_rounds, round_table
    from groundplan.pipelines.improve.rounds import STATE_FILE, load_improve_config, run_dir, run_improve

    cfg = load_improve_config(args.config, list(args.set or []))
    state = run_improve(cfg, progress=not args.no_progress)
    plot = plot_rounds(state, run_dir(cfg) / "rounds.png")
    console.print(round_table(state), markup=False, highlight=False, soft_wrap=True)
    console.print(f"rounds: {run_dir(cfg) / STATE_FILE}; plot: {plot}", markup=False)
    return 0


def cmd_eai(args: argparse.Namespace) -> int:
    from groundplan.pipelines.eai.score import EAIScoreConfig, score

    models = [m.strip() for m in args.models.split(",") if m.strip()] if args.models else None
    config = EAIScoreConfig(output=Path(args.output), models=models, semantics=args.semantics,
                            responses=Path(args.responses) if args.responses else None,
                            count_corrections=not args.no_corrections, runs=[Path(r) for r in args.runs],
                            answers=[Path(g) for g in args.answers])
    result = score(config)
    console.print(result["text"], markup=False, highlight=False, soft_wrap=True)
    console.print(f"verdicts, summary and table: {args.output}", markup=False)
    return 0


def cmd_eai_run(args: argparse.Namespace) -> int:
    from groundplan.pipelines.eai.run import load_run_config, run

    cfg = load_run_config(args.config)
    if args.output:
        cfg = cfg.model_copy(update={"output": Path(args.output)})
    result = run(cfg, overrides=args.set, runtime=runtime_update(args), progress=not args.no_progress,
                 resume=not args.fresh)
    console.print(result["text"], markup=False, highlight=False, soft_wrap=True)
    failed = [k for k, v in result["sweeps"].items() if "error" in v]
    console.print(f"leaderboard: {cfg.output / 'summary.json'}, {cfg.output / 'table.txt'}; runs: "
                  f"{', '.join(v['run_dir'] for v in result['sweeps'].values() if 'run_dir' in v)}", markup=False)
    return 1 if failed else 0


def cmd_list(args: argparse.Namespace) -> int:
    from groundplan.core import plugins
    from groundplan.core.measures import MEASURES
    from groundplan.envs import DATASETS, ENVS
    from groundplan.grounding import AFFORDANCES
    from groundplan.llm import LLM_BACKENDS
    from groundplan.planners import PLANNERS

    registries = (ENVS, PLANNERS, AFFORDANCES, LLM_BACKENDS, DATASETS, MEASURES)
    for reg in registries:  # a name an installed plugin added says which package it came from (docs/extending.md)
        names = [f"{n} (from {o.distribution or o.name})" if (o := reg.origin(n)) else n for n in reg.names()]
        console.print(f"[bold]{reg.kind}[/bold]: {escape(', '.join(names))}")
    if plugins.loaded():
        shown = ", ".join(f"{p.name} = {p.target} ({p.source})" for p in plugins.loaded())
        console.print(f"[bold]plugins[/bold]: {escape(shown)}")
    if not args.options:
        return 0
    for reg in registries[:-1]:
        for name in reg.names():
            try:
                cls = reg.config_class(name)
            except GroundplanError as e:  # an optional dependency is missing: say so, go on
                console.print(f"\n{reg.kind} {name}: {e}", markup=False)
                continue
            if cls is None:
                continue
            origin = reg.origin(name)
            table = Table(title=f"{reg.kind} '{name}' options ({cls.__name__}"
                          + (f", from {origin.source})" if origin else ")"), title_justify="left")
            for column in ("option", "default", "description"):
                table.add_column(column, overflow="fold")
            for field, info in cls.model_fields.items():
                table.add_row(field, repr(info.get_default(call_default_factory=True)), info.description or "")
            console.print(table)
    for name in MEASURES.names():
        m = MEASURES.get(name)
        console.print(f"measure {name}: {m.description}" + ("" if m.higher_is_better else " (lower is better)"), markup=False)
    return 0


#: options that several subcommands take, declared once here (option -> its flags and argparse keywords), so
#: a flag has the same name, type and default in every command that takes it; a command may reword its help
#: (:func:`add_shared_options`)
SHARED_OPTIONS: dict[str, tuple[tuple[str, ...], dict[str, Any]]] = {
    "set": (("--set",), {"action": "append", "default": [], "metavar": "KEY=VALUE",
                         "help": "override a config field (values are YAML)"}),
    "output": (("--output",), {"default": None, "help": "output folder"}),
    "fresh": (("--fresh",), {"action": "store_true", "help": "start over instead of reusing an earlier run's work"}),
    "no_progress": (("--no-progress",), {"action": "store_true", "help": "no progress bar"}),
    "local": (("--local",), {"action": "store_true", "help": "run in this process without Ray"}),
    "address": (("--address",), {"default": None, "help": "Ray cluster to join (default: RAY_ADDRESS or a local Ray)"}),
    "no_mlflow": (("--no-mlflow",), {"action": "store_true", "help": "do not log to MLflow"}),
}


def add_shared_options(parser: Any, **options: bool | str | dict[str, Any]) -> None:
    """Add the :data:`SHARED_OPTIONS` named as keywords to ``parser`` (a subcommand's parser or an argument
    group), in the order given: ``True`` adds one as declared, a string is this command's help for it, and
    a dict changes more of its keywords for this command (``help``, ``metavar``, ``required``)."""
    for name, change in options.items():
        flags, keywords = SHARED_OPTIONS[name]
        if isinstance(change, str):
            change = {"help": change}
        parser.add_argument(*flags, **{**keywords, **(change if isinstance(change, dict) else {})})


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
    p.add_argument("--top", type=_positive_int, default=5, help="options shown per step")
    p.add_argument("--chart", default=None, help="write a PNG bar chart of the scores (SayCan Fig. 7)")
    add_shared_options(p, set={"metavar": "llm.KEY=VALUE",
                               "help": "override the LLM (values are YAML): llm.backend, llm.model, llm.options.<name>"})
    p.set_defaults(func=cmd_plan)

    e = sub.add_parser("eval", help="run an evaluation config and print the per-family table")
    e.add_argument("config")
    e.add_argument("--full", action="store_true", help="the full task set instead of the config's selection")
    e.add_argument("--planners", default=None, metavar="LABEL,LABEL",
                   help="run only these planners of the config (their labels, comma-separated)")
    add_shared_options(e, set="override a config field, e.g. seeds=[0,1]",
                       output="output directory (default: the config's output_dir)",
                       fresh="ignore traces from an earlier run of this config", no_progress=True)
    g = e.add_argument_group("runtime (overrides the config's runtime section)")
    add_shared_options(g, local="run in this process without Ray (default: Ray actors, a local Ray unless --address)",
                       address="join this Ray cluster ('auto', ray://host:10001); default: RAY_ADDRESS")
    g.add_argument("--workers", type=int, default=None, help="episode-runner actors (default 4)")
    g.add_argument("--envs-per-worker", type=int, default=None,
                   help="envs per episode-runner actor, each playing an episode in a thread (default 1)")
    g.add_argument("--in-flight", type=int, default=None, help="episodes in flight (default: workers x envs per worker)")
    g.add_argument("--scorers", type=int, default=None, help="LLM scorer replicas (default 1)")
    g.add_argument("--scorer-gpus", type=float, default=None, help="GPUs per scorer replica (default 0)")
    g.add_argument("--scorer-threads", type=int, default=None,
                   help="torch threads per scorer (default: all cores of its node; Ray would give it 1)")
    g.add_argument("--batch-window-ms", type=float, default=None, help="scorer batching window (default 5 ms)")
    g.add_argument("--max-batch", type=int, default=None, help="most score requests per batch (default 32)")
    g.add_argument("--scorer-resource", action="append", default=[], metavar="NAME=AMOUNT",
                   help="custom Ray resource each scorer needs, e.g. scorer=1 (GPU nodes)")
    g.add_argument("--worker-resource", action="append", default=[], metavar="NAME=AMOUNT",
                   help="custom Ray resource each episode runner needs, e.g. sim=1 (CPU nodes)")
    add_shared_options(g, no_mlflow="do not log the sweep to MLflow (no tracking server needed; `groundplan log` can "
                       "log it later)")
    e.set_defaults(func=cmd_eval)

    lg = sub.add_parser("log", help="log a finished sweep's run folder to MLflow (after --no-mlflow, or when the "
                        "tracking server was down at the sweep's end)")
    lg.add_argument("run", help="a run folder, e.g. outputs/saycan_kitchen")
    lg.add_argument("--tracking-uri", default=None,
                    help="MLflow tracking URI (default: MLFLOW_TRACKING_URI, else SQLite under <run folder>/../mlruns)")
    lg.set_defaults(func=cmd_log)

    tb = sub.add_parser("tables", help="print the table a run declares (SayCanPay's, SayNav's, or the summary), "
                        "with n, 95%% intervals and Holm-adjusted paired tests")
    tb.add_argument("runs", nargs="+", help="run folders (groundplan eval's output); several make one table")
    tb.add_argument("--env", default=None, help="SayCanPay: the env whose reference plans are the experts "
                    "(default: the traces')")
    tb.add_argument("--split", default=None, help="SayCanPay: the env's split the runs used (default: its own)")
    mode = tb.add_mutually_exclusive_group()
    mode.add_argument("--export", default=None, metavar="FILE", help="write the runs' episode outcomes (identity and "
                      "measures, no prompts) to FILE, the committed data a results table is rendered from")
    mode.add_argument("--markdown", action="store_true", help="the arguments are outcomes files: print each one's "
                      "table in Markdown (clustered 95%% intervals, Holm-adjusted paired tests)")
    mode.add_argument("--render", action="store_true", help="the arguments are Markdown pages: re-render every "
                      "<!-- outcomes: FILE -->, <!-- published-table: FILE -->, <!-- precision: FILE --> and "
                      "<!-- pointnav: FILE --> block from its file")
    tb.add_argument("--names", default=None, metavar="NAME,NAME", help="--export: each run's name in the tables "
                    "(default: its config's name)")
    tb.add_argument("--pair", action="append", default=None, metavar="RUN:LABEL=RUN:LABEL", help="--export: also "
                    "test these two rows against each other (e.g. a fine-tuned row and a frozen row of another "
                    "prompt); repeatable")
    tb.add_argument("--eai-stored", action="append", default=None, metavar="MODEL", help="--export: add EAI's "
                    "stored answers of MODEL (e.g. gpt-3.5-turbo-0125) as a row on the EAI runs' tasks, judged as the "
                    "leaderboard judges them, so --pair can test a run's row against it; repeatable; 'all': every stored "
                    "LLM")
    tb.add_argument("--options", default=None, metavar="'KEY=VALUE ...'", help="--markdown: how the table is drawn, "
                    "as a page's marker says it: measures=NAME,NAME (shown, in order), by=family, tests=NAME,NAME "
                    "(paired), paired=all|listed, group=planner|run")
    tb.set_defaults(func=cmd_tables)

    cp = sub.add_parser("compare", help="compare two runs on the episodes they share: per planner, success with "
                        "95%% intervals, Holm-adjusted McNemar tests, paired differences of the env's measures")
    cp.add_argument("run_a", help="the baseline run folder (or a folder of runs), e.g. outputs/before/saycan_kitchen")
    cp.add_argument("run_b", help="the run to compare with it (differences are B - A)")
    cp.add_argument("--planners", default=None, metavar="LABEL,LABEL", help="compare only these planner labels")
    cp.add_argument("--ignore-env-options", action="store_true",
                    help="pair the episodes even though the runs' env options differ (the report says so)")
    cp.add_argument("--json", default=None, metavar="PATH", help="also write the comparison as JSON to PATH")
    cp.add_argument("--pair", action="append", default=None, metavar="A_LABEL=B_LABEL",
                    help="pair A's planner A_LABEL with B's B_LABEL (e.g. a frozen row with its fine-tuned twin whose "
                    "label names another prompt); repeatable")
    cp.set_defaults(func=cmd_compare)

    r = sub.add_parser("report", help="render HTML pages (frames, prompts, feedback, scores) for a run's episodes")
    r.add_argument("run", help="a run folder, e.g. outputs/inner_monologue_tabletop")
    r.set_defaults(func=cmd_report)

    t = sub.add_parser("train", help="train a SayCanPay Can or Pay model on Ray Train, fine-tune the planner's LM (Say; "
                       "a config with kind: say) on Ray Train, or SayNav's point-goal policy with RLlib (kind: pointnav), "
                       "and register it in MLflow")
    t.add_argument("config", help="e.g. configs/train_can_kitchen.yaml")
    add_shared_options(t, set="override a config field, e.g. epochs=5", no_progress=True)
    t.set_defaults(func=cmd_train)

    im = sub.add_parser("improve", help="online self-improvement: rounds of rollouts of the current Say model on train "
                        "tasks, its successful episodes kept, Say fine-tuned on them on Ray Train and evaluated; "
                        "resumes where a killed run stopped")
    im.add_argument("config", help="an improve config, e.g. configs/improve_babyai.yaml")
    add_shared_options(im, set="override a config field, e.g. rounds=3", no_progress=True)
    im.set_defaults(func=cmd_improve)

    pr = sub.add_parser("prompt", help="write SayCanPay's few-shot prompt (App. A.1) from collected train "
                        "trajectories")
    pr.add_argument("data", help="a collected dataset folder or Parquet file, e.g. outputs/collect_babyai/data")
    pr.add_argument("env", help="the env whose trajectories to use, e.g. babyai")
    pr.add_argument("out", help="the prompt file to write, e.g. groundplan/planners/prompts/saycanpay_babyai.txt")
    pr.add_argument("--examples", type=int, default=3, help="successful trajectories with distinct goals (default 3)")
    pr.add_argument("--seed", type=int, default=0, help="which ones are drawn")
    pr.set_defaults(func=cmd_prompt)

    c = sub.add_parser("collect", help="collect expert (or planner) trajectories into sharded Parquet (SayCanPay)")
    c.add_argument("config", help="a collect config, e.g. configs/collect_babyai.yaml")
    add_shared_options(c, set="override a field, e.g. limit=10", fresh="delete the stored shards first", no_progress=True)
    c.set_defaults(func=cmd_collect)

    sv = sub.add_parser("serve", help="serve planning over HTTP (Ray Serve): /v1/score, /v1/plan, /v1/sessions")
    sv.add_argument("config", help="a serve config, e.g. configs/serve_kitchen.yaml")
    add_shared_options(sv, set="override a config field")
    sv.add_argument("--port", type=int, default=None, help="override the config's port")
    add_shared_options(sv, address="Ray cluster address (default: RAY_ADDRESS or a local Ray)",
                       local="one process, no Ray (uvicorn over the same API; no batching)")
    sv.set_defaults(func=cmd_serve)

    v = sub.add_parser("view", help="browse a sweep's traces in a local web page")
    v.add_argument("output_dir", help="an output folder (outputs/<name>) or a folder of them")
    v.add_argument("--host", default="127.0.0.1")
    v.add_argument("--port", type=int, default=8001)
    v.set_defaults(func=cmd_view)

    ea = sub.add_parser("eai", help="the Embodied Agent Interface's VirtualHome action sequencing: groundplan's planners "
                        "and the 15 stored LLMs on one leaderboard")
    ea_sub = ea.add_subparsers(dest="eai_command", required=True)
    er = ea_sub.add_parser("run", help="the whole leaderboard from one config: the sweep of its eval config once per "
                           "model (resumable), then every row beside the 15 stored LLMs, both semantics, paired tests")
    er.add_argument("config", help="an EAI run config, e.g. configs/eai_leaderboard.yaml")
    add_shared_options(er, set="override a field of the sweep's eval config, e.g. env.options.limit=5",
                       output="folder for the leaderboard (default: the config's output)",
                       fresh="replay every episode instead of reusing the run folders' traces", no_progress=True,
                       local="run the sweeps in this process without Ray", address=True)
    add_shared_options(er, no_mlflow="do not log the sweeps to MLflow (`groundplan log RUN` logs one later)")
    er.set_defaults(func=cmd_eai_run)
    es = ea_sub.add_parser("score", help="score the stored LLM outputs under the official and corrected semantics: "
                           "per-task verdicts (JSONL) and per-model table with 95%% intervals")
    es.add_argument("--models", default=None, metavar="MODEL,MODEL", help="stored models (default: all 15)")
    es.add_argument("--semantics", choices=["official", "corrected", "both"], default="both")
    add_shared_options(es, output={"required": True, "help": "folder for verdicts.jsonl, summary.json, table.txt"})
    es.add_argument("--responses", default=None, help="folder of <model>_outputs.json (default: the package's)")
    es.add_argument("--no-corrections", action="store_true", help="skip counting each correction alone")
    es.add_argument("--runs", nargs="*", default=[], metavar="RUN", help="groundplan eval runs of the virtualhome_eai "
                    "env: their planners as rows beside the stored models, on the tasks they ran")
    es.add_argument("--answers", nargs="*", default=[], metavar="PATH", help="answer files in EAI's format made "
                    "elsewhere (<label>_outputs.json, or folders of them): open-loop rows beside the stored models")
    es.set_defaults(func=cmd_eai)

    ls = sub.add_parser("list", help="list registered envs, planners, affordances, LLM backends, datasets, measures")
    ls.add_argument("--options", action="store_true", help="also every plugin's options with defaults and descriptions")
    ls.set_defaults(func=cmd_list)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return args.func(args)
    except GroundplanError as e:  # a message may quote third-party text (a plugin's error): never markup
        console.print(f"[red]error:[/red] {escape(str(e))}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
