"""bench_option_tree end to end on a small workload with the embedded model: both sides run on the kitchen step
and one EAI step, agree, and the last line names every figure."""
from __future__ import annotations


def test_a_small_run_gives_the_result_line(load_benchmark, capsys):
    bench = load_benchmark("bench_option_tree")
    bench.main(["--eai-tasks", "1", "--max-options", "12", "--rounds", "1", "--repeats", "1"])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    fields = dict(kv.split("=") for kv in last.removeprefix("result: ").split())
    assert set(fields) == {"kitchen_speedup", "kitchen_ci", "kitchen_rows", "eai_speedup", "eai_ci", "eai_rows",
                           "max_abs_dlogp", "top_unchanged"}
    assert fields["top_unchanged"] == "true" and float(fields["max_abs_dlogp"]) < 1e-3
    for name in ("kitchen", "eai"):
        flat, tree = map(int, fields[f"{name}_rows"].split("/"))
        assert 0 < tree < flat  # the first 12 options share prefixes in both workloads
