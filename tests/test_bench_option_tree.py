"""bench_option_tree end to end on the kitchen step with the embedded model (the EAI workload left out: building
EAI's env takes a minute): both sides run, agree, and the last line names every figure."""
from __future__ import annotations

import pytest


@pytest.mark.parametrize("backend", ["hf", "llamacpp"])
def test_a_small_run_gives_the_result_line(load_benchmark, capsys, backend):
    if backend == "llamacpp":
        pytest.importorskip("llama_cpp")
    bench = load_benchmark("bench_option_tree")
    bench.main(["--backend", backend, "--threads", "1", "--eai-tasks", "0", "--rounds", "1", "--repeats", "1"])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    fields = dict(kv.split("=") for kv in last.removeprefix("result: ").split())
    assert set(fields) == {"kitchen_speedup", "kitchen_ci", "kitchen_rows", "max_abs_dlogp", "top_unchanged", "backend"}
    # llama.cpp's kernels are not batch-invariant (tests/test_llamacpp_backend.py): its flat and tree batches differ a little
    assert fields["top_unchanged"] == "true" and float(fields["max_abs_dlogp"]) < (1e-3 if backend == "hf" else 0.5)
    flat, tree = map(int, fields["kitchen_rows"].split("/"))
    assert 0 < tree < flat  # the kitchen's skills share prefixes ("pick up the", "go to the")
