"""bench_http_peers end to end on two tiny recorded steps, groundplan's side only: lm-evaluation-harness's own
client against ``groundplan serve --local`` with the embedded model, in every setting, beside the in-process
step and the engine's share of each setting. Skipped where lm-eval is not installed (it is an extra:
``.[peers]``)."""
from __future__ import annotations

import pytest


def test_two_tiny_steps_give_every_setting_its_ratio_floor_and_client_share(load_benchmark, tmp_path, capsys):
    pytest.importorskip("lm_eval")
    pytest.importorskip("aiohttp")
    peers = load_benchmark("bench_peers")
    bench = load_benchmark("bench_http_peers")
    steps = tmp_path / "steps.json"
    options = [" find a coke can", " done", " go to the table"]
    peers.save_steps(steps, [peers.Step("e0", i, f"Human: bring me a coke can\nRobot: {i + 1}.", options)
                             for i in range(2)], {"model": "smollm2-135m-instruct"})
    bench.main(["--steps-file", str(steps), "--steps", "1", "--rounds", "2", "--sides", "groundplan"])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    fields = dict(kv.split("=") for kv in last.removeprefix("result: ").split())
    for setting in ("c1", "c8", "b51"):
        assert float(fields[f"gp_{setting}_rps"]) > 0
        assert float(fields[f"gp_{setting}_vs_inprocess"]) > 0
        assert float(fields[f"gp_{setting}_engine_vs_inprocess"]) > 0
    # the client's own share is defined only where it sends one call at a time
    assert float(fields["gp_c1_client_s"]) >= 0 and float(fields["gp_b51_client_s"]) >= 0
    assert "gp_c8_client_s" not in fields
    assert fields["rounds"] == "2"
