"""bench_echo_requests end to end on one tiny recorded step with the embedded model: every side runs and the
last line names every figure; by default each echo call keeps the texts' next-token logits and a one-token
generate after each text takes them, as ``/v1/completions`` does for lm-evaluation-harness's requests."""
from __future__ import annotations


def test_one_tiny_step_gives_the_result_line(load_benchmark, tmp_path, capsys, monkeypatch):
    import groundplan.factory as factory

    built = []
    real = factory.build_llm
    monkeypatch.setattr(factory, "build_llm", lambda *a, **k: built.append(real(*a, **k)) or built[-1])
    peers = load_benchmark("bench_peers")
    bench = load_benchmark("bench_echo_requests")
    steps = tmp_path / "steps.json"
    step = peers.Step("e0", 0, "Human: bring me a coke can\nRobot: 1.", [" find a coke can", " done", " go to the table"])
    peers.save_steps(steps, [step], {"model": "smollm2-135m-instruct"})
    bench.main(["--steps-file", str(steps), "--steps", "1", "--rounds", "1"])
    assert built and built[0].stats.kept_next_tokens > 0  # the generates took the kept logits: no forward of their own
    last = capsys.readouterr().out.strip().splitlines()[-1]
    fields = dict(kv.split("=") for kv in last.removeprefix("result: ").split())
    assert last.startswith("result: ") and set(fields) == {"lone_s", "list8_s", "list_all_s", "score_s",
                                                           "lone_per_request_ms", "list8_vs_score",
                                                           "list_all_vs_score", "max_tokens", "steps"}
    assert fields["steps"] == "1" and fields["max_tokens"] == "1" and all(float(v) >= 0 for v in fields.values())
