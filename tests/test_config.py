"""Experiment configs: the shipped YAML validates, bad fields and unknown names fail early and clearly."""
from __future__ import annotations

from pathlib import Path

import pytest

from groundplan.config import EvalConfig, load_config
from groundplan.core.errors import InvalidInputError, UnknownNameError

#: the eval configs (serve, collect, train, improve and EAI leaderboard configs have schemas of their own)
CONFIGS = sorted(p for p in Path(__file__).resolve().parents[1].joinpath("configs").glob("*.yaml")
                 if not p.name.startswith(("serve_", "collect_", "train_", "improve_", "eai_leaderboard")))
IMPROVE_CONFIGS = sorted(Path(__file__).resolve().parents[1].joinpath("configs").glob("improve_*.yaml"))
EAI_RUN_CONFIGS = sorted(Path(__file__).resolve().parents[1].joinpath("configs").glob("eai_leaderboard*.yaml"))
KITCHEN = Path(__file__).resolve().parents[1] / "configs" / "saycan_kitchen.yaml"


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_shipped_configs_validate(path):
    assert load_config(path).planners


@pytest.mark.parametrize("path", EAI_RUN_CONFIGS, ids=lambda p: p.name)
def test_shipped_eai_run_configs_validate(path):
    pytest.importorskip("virtualhome_eval")
    from groundplan.pipelines.eai.run import load_run_config, model_sweeps

    sweeps = model_sweeps(load_run_config(path))  # each model's eval config, validated as eval would
    assert len(sweeps) == len({s.name for s in sweeps}) >= 1 and all(s.planners for s in sweeps)


@pytest.mark.parametrize("path", IMPROVE_CONFIGS, ids=lambda p: p.name)
def test_shipped_improve_configs_validate(path):
    from groundplan.pipelines.improve.rounds import load_improve_config

    cfg = load_improve_config(path)
    assert cfg.rounds >= 2 and cfg.actor.options.get("sample_temperature", 0) > 0


def test_defaults_are_complete():
    cfg = EvalConfig()
    assert cfg.env.name == "kitchen" and cfg.llm.model == "smollm2-135m-instruct" and cfg.seeds == [0]


def test_unknown_field_is_named(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("name: x\nplanners:\n  - name: saycan\n    afordance: kitchen_value\n")
    with pytest.raises(InvalidInputError, match=r"unknown option 'planners\.0\.afordance'"):
        load_config(p)


def test_bad_value_is_named(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("max_steps: 0\n")
    with pytest.raises(InvalidInputError, match="max_steps"):
        load_config(p)


def test_unknown_planner_lists_valid_names(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("planners:\n  - name: saycna\n")
    with pytest.raises(UnknownNameError, match="unknown planner 'saycna'; valid planner names: ") as err:
        load_config(p)
    for name in ("saycan", "saycan_novf", "generative"):
        assert name in str(err.value)


def test_unknown_env_lists_valid_names():
    with pytest.raises(UnknownNameError, match="unknown env 'kitchn'; valid env names: .*kitchen"):
        EvalConfig.model_validate({"env": {"name": "kitchn"}})


def test_overrides(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("tasks:\n  per_family: 3\n")
    cfg = load_config(p, ["tasks.per_family=null", "seeds=[1, 2]", "llm.model=some/model"])
    assert cfg.tasks.per_family is None and cfg.seeds == [1, 2] and cfg.llm.model == "some/model"


@pytest.mark.parametrize("field", ["families", "ids"])
def test_an_empty_task_selection_is_a_config_error_not_all_tasks(field):
    """Only null means "all tasks": an empty list is refused at load, naming the field, rather than running
    the whole task set (84 kitchen tasks for ``families: []``)."""
    with pytest.raises(InvalidInputError, match=rf"option 'tasks\.{field}': List should have at least 1 item"):
        load_config(KITCHEN, [f"tasks.{field}=[]"])
    assert getattr(load_config(KITCHEN, [f"tasks.{field}=null"]).tasks, field) is None


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(InvalidInputError, match="not found"):
        load_config(tmp_path / "nope.yaml")
    p = tmp_path / "bad.yaml"
    p.write_text("name: [unclosed\n")
    with pytest.raises(InvalidInputError, match="not valid YAML"):
        load_config(p)


def test_planner_grid_expands_to_labelled_variants():
    cfg = EvalConfig.model_validate({"planners": [
        {"name": "zeroshot", "label": "Translated", "options": {"num_samples": 5, "epsilon": 0.0},
         "grid": {"temperature": [0.1, 0.6], "epsilon": [0, 0.4]}},
        {"name": "zeroshot_vanilla", "label": "Vanilla"},
    ]})
    labels = [p.display for p in cfg.planners]
    assert labels == ["Translated [temperature=0.1 epsilon=0]", "Translated [temperature=0.1 epsilon=0.4]",
                      "Translated [temperature=0.6 epsilon=0]", "Translated [temperature=0.6 epsilon=0.4]", "Vanilla"]
    last = cfg.planners[3]
    assert last.options == {"num_samples": 5, "epsilon": 0.4, "temperature": 0.6} and last.group == "Translated"
    assert cfg.grids == {"Translated": labels[:4]}
    again = EvalConfig.model_validate(cfg.model_dump())  # e.g. a config shipped to Ray workers
    assert [p.display for p in again.planners] == labels and again.hash() == cfg.hash()


def test_a_grid_over_an_oracle_planner_names_its_oracle_once():
    cfg = EvalConfig.model_validate({"env": {"name": "virtualhome_eai"}, "planners": [
        {"name": "saycan", "label": "SayCan", "affordance": "virtualhome_preconditions",
         "grid": {"length_alpha": [0.0, 0.25]}, "options": {"llm_score": "power"}}]})
    labels = [p.display for p in cfg.planners]
    assert labels == ["SayCan [length_alpha=0.0] (oracle simulator preconditions)",
                      "SayCan [length_alpha=0.25] (oracle simulator preconditions)"]
    assert cfg.grids == {"SayCan (oracle simulator preconditions)": labels}
    assert [p.display for p in EvalConfig.model_validate(cfg.model_dump()).planners] == labels


def test_bad_planner_grids_are_named(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("planners:\n  - name: saycan\n    grid: {llm_score: []}\n")
    with pytest.raises(InvalidInputError, match=r"planners\.0\.grid.*'llm_score' lists no values"):
        load_config(p)
    p.write_text("planners:\n  - {name: saycan, label: 'A [llm_score=sum]'}\n  - {name: saycan, label: A, grid: {llm_score: [sum]}}\n")
    with pytest.raises(InvalidInputError, match="labels must be unique"):
        load_config(p)


@pytest.mark.parametrize("override, match", [
    ("llm.options.bogus=1", "llm backend 'hf' options: unknown option 'bogus'"),
    ("llm.options.prefix_cache_mb=-1", "'prefix_cache_mb'"),
    ("planners.0.options.llm_score=max", "planner 'SayCan' options: option 'llm_score'"),
    ("planners.0.affordance_options.pick_v_min=banana", "affordance 'kitchen_value' options"),
    ("env.options.mode=physics", "env 'kitchen' options: option 'mode'"),
    ("runtime.batch_window_ms=-1", "runtime.batch_window_ms"),
    ("runtime.max_batch=0", "runtime.max_batch"),
    ("select_by=[executabilty]", r"select_by/select_tie_break name \['executabilty'\].*available: execution_success"),
    ("select_tie_break=[goals]", r"select_by/select_tie_break name \['goals'\].*available: execution_success"),
])
def test_plugin_and_runtime_options_are_typed_and_fail_at_load(override, match):
    """Every plugin's options are validated at load against the class it registered; nothing is built."""
    with pytest.raises(InvalidInputError, match=match):
        load_config(KITCHEN, [override])


def test_every_registered_plugin_declares_a_typed_options_class():
    from pydantic import BaseModel

    from groundplan.envs import ENVS
    from groundplan.grounding import AFFORDANCES
    from groundplan.llm import LLM_BACKENDS
    from groundplan.planners import PLANNERS

    for registry in (ENVS, PLANNERS, AFFORDANCES, LLM_BACKENDS):
        for name in registry.names():
            cls = registry.config_class(name)
            assert isinstance(cls, type) and issubclass(cls, BaseModel), (registry.kind, name)
            assert cls.model_config.get("extra") == "forbid", (registry.kind, name)
            assert all(f.description for f in cls.model_fields.values() if f.description is not None)


def test_runtime_is_not_part_of_the_config_hash():
    base = load_config(KITCHEN)
    assert load_config(KITCHEN, ["runtime.workers=8", "runtime.executor=local"]).hash() == base.hash()
    assert load_config(KITCHEN, ["max_steps=7"]).hash() != base.hash()
    # an unset select_tie_break leaves the hash (and so the resumable runs) of the configs made before it
    assert base.hash() == "fc8e3204f793"
    assert load_config(KITCHEN, ["select_tie_break=[plan_success]"]).hash() != base.hash()


def test_eval_planners_flag_keeps_the_named_planners_and_refuses_unknown_ones():
    from groundplan.cli import keep_planners

    cfg = load_config(Path(__file__).resolve().parents[1] / "configs" / "inner_monologue_tabletop.yaml")
    kept = keep_planners(cfg, "+Scene, Open loop")
    assert [p.display for p in kept.planners] == ["Open loop", "+Scene"]  # the config's order
    with pytest.raises(InvalidInputError, match="'GPT-9'.*Open loop, \\+Success"):
        keep_planners(cfg, "Open loop,GPT-9")


def test_eval_planners_flag_takes_the_config_label_of_an_oracle_row():
    """The README's row-group commands name oracle rows by the label their config writes; the table
    label has the oracle appended, and both must select the same one planner."""
    from groundplan.cli import keep_planners

    cfg = load_config(Path(__file__).resolve().parents[1] / "configs" / "saycanpay_babyai.yaml")
    by_label = keep_planners(cfg, "GA-SC,GA-SC (oracle Can),GA-SCP Perfect-Say (oracle)")
    assert [p.display for p in by_label.planners] == [
        "GA-SC", "GA-SC (oracle Can) (oracle simulator feasibility)",
        "GA-SCP Perfect-Say (oracle) (oracle expert plan)"]
    by_display = keep_planners(cfg, "GA-SC (oracle Can) (oracle simulator feasibility)")
    assert [p.display for p in by_display.planners] == ["GA-SC (oracle Can) (oracle simulator feasibility)"]


def test_eval_flags_set_typed_runtime_fields_and_win_over_set():
    from groundplan.cli import apply_eval_flags, build_parser

    args = build_parser().parse_args(["eval", str(KITCHEN), "--set", "runtime.workers=2", "--workers", "8",
                                      "--scorer-gpus", "0.5", "--scorer-resource", "scorer=1", "--local",
                                      "--no-mlflow", "--full", "--output", "123"])
    cfg = apply_eval_flags(load_config(KITCHEN, args.set), args)
    rt = cfg.runtime
    assert (rt.workers, rt.scorer_gpus, rt.scorer_resources, rt.executor, rt.mlflow) == (8, 0.5, {"scorer": 1.0}, "local", False)
    assert cfg.tasks.per_family is None and cfg.output_dir == "123"  # a str flag stays a str (no YAML re-parse)
    untouched = apply_eval_flags(load_config(KITCHEN), build_parser().parse_args(["eval", str(KITCHEN)]))
    assert untouched.runtime == load_config(KITCHEN).runtime


@pytest.mark.parametrize("argv, match", [
    (["--workers", "0"], "option 'runtime.workers': Input should be greater than or equal to 1"),
    (["--scorer-gpus", "-1"], "option 'runtime.scorer_gpus'"),
    (["--scorer-resource", "gpu=lots"], "resource 'gpu=lots' is not NAME=AMOUNT"),
])
def test_a_bad_eval_flag_is_a_clear_error_with_exit_code_2(argv, match, capsys):
    from groundplan.cli import main

    assert main(["eval", str(KITCHEN), *argv]) == 2
    out = " ".join(capsys.readouterr().out.split())
    assert "error:" in out and match in out and "Traceback" not in out


@pytest.mark.parametrize("path", sorted(Path(__file__).resolve().parents[1].joinpath("configs").glob("train_can*.yaml"))
                         + sorted(Path(__file__).resolve().parents[1].joinpath("configs").glob("train_pay*.yaml")),
                         ids=lambda p: p.name)
def test_shipped_train_configs_validate(path):
    from groundplan.pipelines.train.canpay import load_train_config

    cfg = load_train_config(path)
    assert cfg.model.kind in path.name and cfg.env


@pytest.mark.parametrize("path", sorted(Path(__file__).resolve().parents[1].joinpath("configs").glob("collect_*.yaml")),
                         ids=lambda p: p.name)
def test_shipped_collect_configs_validate(path):
    """Each loads, its runtime: section as the config had it before the section existed: 2 Ray workers of a
    whole CPU each, 2 reruns of a trajectory whose worker died, the dataset logged to MLflow."""
    from groundplan.pipelines.collect.config import load_collect_config

    cfg = load_collect_config(path)
    rt = cfg.runtime
    assert cfg.splits and (rt.executor, rt.workers, rt.worker_cpus, rt.max_episode_retries, rt.mlflow) == (
        "ray", 2, 1.0, 2, True)


def test_a_grid_key_with_the_affordance_prefix_searches_an_affordance_option():
    cfg = EvalConfig.model_validate({"planners": [
        {"name": "saycan", "label": "SayCan", "affordance": "kitchen_value", "affordance_options": {"pick_v_min": 0.1},
         "grid": {"llm_score": ["sum", "mean"], "affordance.pick_v_min": [0.2, 0.3]}}]})
    labels = [p.display for p in cfg.planners]
    assert labels[0] == "SayCan [llm_score=sum affordance.pick_v_min=0.2]" and len(labels) == 4
    last = cfg.planners[3]
    assert last.options == {"llm_score": "mean"} and last.affordance_options == {"pick_v_min": 0.3}
    assert cfg.planners[0].grounding_options.pick_v_min == 0.2
    assert [p.display for p in EvalConfig.model_validate(cfg.model_dump()).planners] == labels
    # each variant's affordance options are checked by the source, and a prefix key needs a source
    with pytest.raises(ValueError, match=r"affordance 'kitchen_value' options.*pick_v_min"):
        EvalConfig.model_validate({"planners": [{"name": "saycan", "affordance": "kitchen_value",
                                                 "grid": {"affordance.pick_v_min": ["banana"]}}]})
    with pytest.raises(ValueError, match="has affordance options but no affordance"):
        EvalConfig.model_validate({"planners": [{"name": "saycan", "grid": {"affordance.pick_v_min": [0.2]}}]})
