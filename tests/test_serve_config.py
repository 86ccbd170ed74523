"""The serve config schema and the CLI entry points' early errors (nothing starts on bad input)."""
from __future__ import annotations

import pytest

from groundplan.cli import main
from groundplan.core.errors import InvalidInputError
from groundplan.serve.config import load_serve_config


def test_shipped_config_loads():
    cfg = load_serve_config("configs/serve_kitchen.yaml")
    assert cfg.host == "127.0.0.1" and cfg.port == 8000
    assert cfg.scorer.max_ongoing_requests >= cfg.scorer.max_batch_size
    assert cfg.scorer.autoscaling.to_serve()["max_replicas"] >= 1
    assert [p.display for p in cfg.planners] == ["SayCan", "No-VF"]


@pytest.mark.parametrize("yaml_text,words", [
    ("token: abc\n", "unknown option 'token'"),  # the token never lives in the config file
    ("scorer: {max_batch_size: 16, max_ongoing_requests: 8}\n", "at least max_batch_size"),
    ("planner: {autoscaling: {min_replicas: 3, max_replicas: 2}}\n", "min_replicas (3) > max_replicas (2)"),
    ("planners: []\n", "at least one is needed"),
    ("planners: [{name: saycan, grid: {llm_score: [sum, mean]}}]\n", "grids are for sweeps"),
    ("port: 0\n", "option 'port'"),
])
def test_bad_configs_name_the_field(tmp_path, yaml_text, words):
    path = tmp_path / "s.yaml"
    path.write_text(yaml_text)
    with pytest.raises(InvalidInputError) as err:
        load_serve_config(path)
    assert words in str(err.value)


def test_cli_errors_before_starting_anything(tmp_path, capsys):
    assert main(["serve", str(tmp_path / "missing.yaml")]) == 2
    assert "config file not found" in " ".join(capsys.readouterr().out.split())
    assert main(["view", str(tmp_path / "nope")]) == 2
    out = " ".join(capsys.readouterr().out.split())
    assert "is not a folder" in out and "http://" not in out
