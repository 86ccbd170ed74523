"""profile_warm_step end to end with the embedded model: both engine settings run, the one-forward step runs one
forward where the other runs two, their scores agree, the operator table is logged, and the last line names every
figure."""
from __future__ import annotations

import logging

import pytest


@pytest.mark.slow  # ~20 s on an idle 2-core CPU: twelve 1,035-token kitchen steps and a matmul peak
def test_two_rounds_give_the_result_line(load_benchmark, capsys, caplog):
    bench = load_benchmark("profile_warm_step")
    with caplog.at_level(logging.INFO, logger="profile_warm_step"):
        bench.main(["--rounds", "2", "--ops", "3"])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    fields = dict(kv.split("=") for kv in last.removeprefix("result: ").split())
    assert last.startswith("result: ") and set(fields) == {
        "warm_ms_two", "warm_ms_one", "speedup", "overhead_two", "overhead_one", "peak_fraction_two",
        "peak_fraction_one", "attention_share", "peak_fraction_all_one", "max_abs_diff"}
    assert float(fields["max_abs_diff"]) < 1e-3  # the same scores, float reduction order aside
    assert 0 <= float(fields["overhead_one"]) < 1 and float(fields["attention_share"]) > 0
    lines = {r.getMessage().split(":")[0]: r.getMessage() for r in caplog.records}
    assert "2 forward(s)" in lines["two_forwards"] and "1 forward(s)" in lines["one_forward"]
    ops = [r.getMessage() for r in caplog.records if r.getMessage().lstrip().startswith("aten::")]
    assert len(ops) == 3 and any("aten::mm" in op or "aten::addmm" in op for op in ops)  # the operator table
