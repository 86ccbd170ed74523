"""bench_serve: a real kitchen step's requests (51 options, no crash), and the smallest run's result
line on loopback with a fake model (run under ``flock /tmp/gp-heavy.lock``: it starts Ray Serve)."""
from __future__ import annotations

import pytest


@pytest.fixture
def bench(load_benchmark):
    return load_benchmark("bench_serve")


def test_requests_are_whole_kitchen_steps(bench):
    from groundplan.envs.kitchen.skills import SKILLS
    from groundplan.planners.saycan import build_prompt, load_prompt

    skills, instructions = bench.kitchen_step()
    assert skills == list(SKILLS) and len(skills) == 51
    reqs = bench.make_requests(10, 51, skills, instructions)
    assert all(r["options"] == [" " + s for s in SKILLS] for r in reqs)
    assert reqs[0]["prompt"] == build_prompt(load_prompt("saycan_kitchen"), instructions[0])
    assert reqs[0]["prompt"].endswith("\nRobot: 1.")
    assert len({r["prompt"] for r in reqs}) == 10  # distinct instructions
    window = bench.make_requests(20, 50, skills, instructions)  # a window of k < 51 wraps around the list
    assert all(len(r["options"]) == len(set(r["options"])) == 50 for r in window)
    with pytest.raises(ValueError, match="between 1 and 51"):
        bench.make_requests(1, 52, skills, instructions)


@pytest.mark.slow  # starts Ray Serve (about a minute); the request shapes above are checked in every run
def test_smallest_run_prints_the_result_line(bench, capsys):
    pytest.importorskip("ray.serve")
    from tests.fakes import slow_lm

    bench.main(["--requests", "4", "--concurrency", "2", "--rounds", "2"], lm_factory=slow_lm)
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("result: ")
    fields = dict(kv.split("=", 1) for kv in last[len("result: "):].split())
    assert list(fields) == ["batched_ratio", "rps", "p99_ms", "options"] and fields["options"] == "51"
    assert float(fields["batched_ratio"]) > 0 and float(fields["rps"]) > 0 and float(fields["p99_ms"]) > 0
