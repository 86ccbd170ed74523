"""bench_peers: its pure pieces on tiny fake data (no model): steps read back from traces and their file, the
slow sides' option subset, the ratio interval, the agreement check, the CPU flags, the result line and the target's
share of the peak; then one end-to-end run on two tiny steps with the embedded model against the naive side."""
from __future__ import annotations

import math

import pytest

from groundplan.rollout.traces import EpisodeTrace, StepTrace


@pytest.fixture
def bench(load_benchmark):
    return load_benchmark("bench_peers")


def FakeStep(prompt_delta: str) -> StepTrace:
    return StepTrace(index=0, chosen="x", done=False, prompt_delta=prompt_delta)


def FakeTrace(episode_id: str, prompt: str, steps: list | None = None, error: str | None = None) -> EpisodeTrace:
    return EpisodeTrace(episode_id=episode_id, planner="SayCan", env="kitchen", task_id="t", family="f",
                        instruction="i", seed=0, llm="m", prompt=prompt, steps=steps or [], error=error)


def test_steps_are_the_prompt_at_each_decision(bench):
    opening = "Human: bring me a coke\nRobot: 1."
    deltas = [" find a coke can, 2.", " pick up the coke can, 3.", " done."]
    traces = [FakeTrace("e0", opening + "".join(deltas), [FakeStep(d) for d in deltas]),
              FakeTrace("e1", "Robot: 1.", [FakeStep(" done.")], error="boom"),  # an error: skipped
              FakeTrace("e2", "Q\nRobot: 1.", [])]  # no decision: nothing to record
    steps = bench.steps_from_traces(traces, [" done", " find a coke can"])
    assert [(s.episode, s.index) for s in steps] == [("e0", 0), ("e0", 1), ("e0", 2)]
    assert [s.prompt for s in steps] == [opening, opening + deltas[0], opening + deltas[0] + deltas[1]]
    assert all(s.options == [" done", " find a coke can"] for s in steps)


def test_a_trace_whose_prompt_does_not_end_with_its_steps_is_refused(bench):
    with pytest.raises(ValueError, match="does not end"):
        bench.steps_from_traces([FakeTrace("e0", "Robot: 1. other", [FakeStep(" done.")])], [" done"])


def test_steps_file_round_trips_and_checks_its_format(bench, tmp_path):
    steps = [bench.Step("e0", 0, "Robot: 1.", [" a", " b"], [-1.5, -2.0]), bench.Step("e0", 1, "Robot: 1. a, 2.", [" a", " b"])]
    path = tmp_path / "steps.json"
    bench.save_steps(path, steps, {"model": "m"})
    got, meta = bench.load_steps(path)
    assert got == steps and meta == {"format": bench.STEPS_FORMAT, "model": "m"}
    path.write_text('{"format": 0, "steps": []}')
    with pytest.raises(ValueError, match="format"):
        bench.load_steps(path)


def test_slow_subset_is_groundplans_top_options_in_their_order(bench):
    step = bench.Step("e", 0, "p", [" a", " b", " c", " d"], [-3.0, -1.0, -9.0, -2.0])
    assert bench.slow_subset(step, 2) == [1, 3] and bench.slow_subset(step, 9) == [0, 1, 2, 3]
    assert bench.slow_subset(bench.Step("e", 0, "p", [" a", " b", " c"]), 2) == [0, 1]  # no reference: the first


def test_ratio_interval_is_the_geometric_mean_of_round_ratios(bench):
    ratio, lo, hi = bench.ratio_interval([20.0, 40.0], [10.0, 5.0])  # rounds 2x and 8x
    assert ratio == pytest.approx(4.0) and lo < ratio < hi
    one = bench.ratio_interval([30.0], [10.0])
    assert one[0] == pytest.approx(3.0) and math.isnan(one[1])
    with pytest.raises(ValueError):
        bench.ratio_interval([1.0, 2.0], [1.0])


def test_agreement_counts_same_tops_and_the_largest_difference(bench):
    ref = [[-1.0, -2.0, -3.0], [-5.0, -4.0, -6.0]]
    a = bench.agreement(ref, [[-1.1, -2.0, -3.3], [-4.0, -4.5, -6.0]])
    assert (a.same_top, a.steps, a.fraction()) == (1, 2, "1/2") and a.max_abs_diff == pytest.approx(1.0)
    # a side that scored a subset is compared on it: step 0's options 1, 2; step 1's 0, 1
    sub = bench.agreement(ref, [[-2.2, -3.0], [-5.0, -4.1]], [[1, 2], [0, 1]])
    assert sub.fraction() == "2/2" and sub.max_abs_diff == pytest.approx(0.2)
    with pytest.raises(ValueError):
        bench.agreement(ref, [[-1.0], [-1.0]], [[0, 1], [0, 1]])


def test_cpu_flags_are_read_from_cpuinfo(bench):
    text = "processor\t: 0\nmodel name\t: Test CPU\nflags\t\t: fpu sse2 avx avx2 fma avx512f amx_tile sse4_2\n"
    assert bench.cpu_info(text) == ("Test CPU", ["amx_tile", "avx", "avx2", "avx512f", "fma"])
    assert bench.cpu_info("") == ("unknown", [])


def test_result_line_names_every_peer(bench, load_benchmark):
    harness = load_benchmark("harness")
    fields = bench.result_fields({"llamacpp": 1.234, "naive": 45.67}, {
        "llamacpp": bench.Agreement(20, 20, 0.4), "naive": bench.Agreement(19, 20, 1e-5)}, ["avx", "avx2"])
    assert harness.result_line(fields) == ("result: ratio_llamacpp=1.23 ratio_lmeval=na ratio_naive=45.7 "
                                           "same_top=llamacpp:20/20,naive:19/20 cpu_flags=avx,avx2 "
                                           "ratio_llamacpp_backend=na ratio_llamacpp_backend_vs_llamacpp=na")
    # the backend side's keys are appended after the earlier ones, which keep their place
    both = bench.result_fields({"llamacpp": 2.0, "llamacpp_backend": 1.5, "llamacpp_backend_vs_llamacpp": 1.333},
                               {"llamacpp": bench.Agreement(18, 20, 0.4), "llamacpp_backend": bench.Agreement(19, 20, 0.3)},
                               [])
    assert harness.result_line(both) == ("result: ratio_llamacpp=2 ratio_lmeval=na ratio_naive=na "
                                         "same_top=llamacpp:18/20,llamacpp_backend:19/20 cpu_flags=none "
                                         "ratio_llamacpp_backend=1.5 ratio_llamacpp_backend_vs_llamacpp=1.33")
    assert bench.result_fields({}, {}, [])["cpu_flags"] == "none"


def test_timed_pass_resets_then_scores_every_step(bench):
    calls = []
    steps = [bench.Step("e", k, f"p{k}", [" a", " b"]) for k in range(3)]
    w = bench.timed_pass(steps, lambda: calls.append("reset"), lambda s: calls.append(s.prompt) or [-1.0, -2.0])
    assert calls == ["reset", "p0", "p1", "p2"] and w.options == 6 and w.seconds > 0 and w.rate == 6 / w.seconds


def test_target_work_is_the_peak_share_the_target_would_need(bench):
    # 100 GFLOP in 2 s against a 200 GFLOP/s peak: 0.25 of it; the fastest peer takes 3 s, so 3x it means 1 s,
    # which needs 100 GFLOP/s: half the float32 peak, a fifth of a 500 GFLOP/s bfloat16 peak
    got = bench.target_work(100e9, 2.0, 3.0, {"float32": 200e9, "bfloat16": 500e9})
    assert got == {"gp_peak_fraction": "0.25", "floor_s": "0.50", "target_s": "1.00",
                   "target_peak_fraction": "0.50", "target_peak_fraction_bfloat16": "0.20"}
    # a target past the float32 peak reads above 1
    assert bench.target_work(100e9, 2.0, 0.9, {"float32": 200e9})["target_peak_fraction"] == "1.67"


def test_two_tiny_steps_against_the_naive_side_give_the_result_line_and_the_work(bench, tmp_path, capsys):
    steps = tmp_path / "steps.json"
    prompt = "Human: bring me a coke can\nRobot: 1."
    options = [" find a coke can", " done", " go to the table"]
    bench.save_steps(steps, [bench.Step("e0", 0, prompt, options), bench.Step("e0", 1, prompt + " find a coke can, 2.",
                                                                              options)], {"model": "smollm2-135m-instruct"})
    bench.main(["--steps-file", str(steps), "--steps", "2", "--rounds", "1", "--slow-options", "3", "--sides", "naive",
                "--torch-threads", "1", "--trial-options", "2"])
    out = capsys.readouterr().out.strip().splitlines()
    fields = dict(kv.split("=", 1) for kv in out[-1].removeprefix("result: ").split())
    assert fields["ratio_naive"] != "na" and fields["same_top"] == "naive:2/2" and fields["fastest_peer"] == "naive"
    # the work line: the FLOPs were counted and set against both peaks
    assert any(line.startswith("work: groundplan's window ran") for line in out)
    assert 0 < float(fields["gp_peak_fraction"]) and 0 < float(fields["floor_s"])
    assert float(fields["target_peak_fraction"]) > 0 and float(fields["target_peak_fraction_bfloat16"]) > 0
