"""bench_echo_requests end to end on one tiny recorded step with the embedded model: every side runs and the
last line names every figure."""
from __future__ import annotations


def test_one_tiny_step_gives_the_result_line(load_benchmark, tmp_path, capsys):
    peers = load_benchmark("bench_peers")
    bench = load_benchmark("bench_echo_requests")
    steps = tmp_path / "steps.json"
    step = peers.Step("e0", 0, "Human: bring me a coke can\nRobot: 1.", [" find a coke can", " done", " go to the table"])
    peers.save_steps(steps, [step], {"model": "smollm2-135m-instruct"})
    bench.main(["--steps-file", str(steps), "--steps", "1", "--rounds", "1"])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    fields = dict(kv.split("=") for kv in last.removeprefix("result: ").split())
    assert last.startswith("result: ") and set(fields) == {"lone_s", "list8_s", "list_all_s", "score_s",
                                                           "lone_per_request_ms", "steps"}
    assert fields["steps"] == "1" and all(float(v) >= 0 for v in fields.values())
