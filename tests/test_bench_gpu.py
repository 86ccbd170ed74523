"""bench_gpu: the CPU dry path runs every code path and agrees with the naive scores (every run); the same
agreements on CUDA (``gpu`` marker, skipped without a CUDA device); the Serve path through Ray Serve on
the CPU (``slow``)."""
from __future__ import annotations

import pytest

NEEDS_CUDA = "needs a CUDA GPU (torch.cuda.is_available() is False here): run on a GPU machine with -m gpu"


@pytest.fixture
def bench(load_benchmark):
    return load_benchmark("bench_gpu")


def _last_result(capsys) -> dict[str, str]:
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("result: ")
    return dict(kv.split("=", 1) for kv in last[len("result: "):].split())


def test_cpu_dry_path_prints_the_result_line(bench, capsys):
    fields = bench.main(["--device", "cpu", "--options", "4"])
    assert _last_result(capsys) == fields
    assert list(fields)[:2] == ["gpu", "archs"] and fields["gpu"] == "none" and fields["archs"] == "tiny"
    assert fields["dtype"] == "float32" and fields["mfu"] == "na" and fields["batched_ratio"] == "na"
    for key in ("packed_options_s", "naive_options_s", "speedup", "warm_step_ms", "padded_ratio_b2", "padded_ratio_b4"):
        assert float(fields[key]) > 0, key
    assert float(fields["max_abs_diff"]) < 1e-3 and float(fields["padded_max_abs_diff"]) < 1e-3
    assert fields["decisions_identical"] == "yes"


@pytest.mark.parametrize("name, label, tflops", [
    ("NVIDIA H100 80GB HBM3", "H100-SXM", 989.4), ("NVIDIA H100 PCIe", "H100-PCIe", 756.0),
    ("NVIDIA H100 NVL", "H100-NVL", 835.0), ("NVIDIA H200", "H200", 989.4),
    ("NVIDIA A100-SXM4-80GB", "A100", 312.0), ("NVIDIA A100-PCIE-40GB", "A100", 312.0), ("NVIDIA L4", "L4", 121.0),
    ("NVIDIA L40S", "L40S", None), ("Tesla T4", "Tesla-T4", None),
])
def test_peak_table(bench, name, label, tflops):
    got_label, peak = bench.gpu_peak(name)
    assert got_label == label
    assert peak == (tflops * 1e12 if tflops else None)


def test_agreement_calls_a_flip_within_the_tolerance_a_tie(bench):
    from groundplan.llm.base import OptionScore

    def scores(*xs):
        return [OptionScore(option=f"o{i}", logprob_sum=x, logprob_mean=x, num_tokens=1) for i, x in enumerate(xs)]

    assert bench.agreement(scores(-1.0, -2.0), scores(-1.01, -2.0), 0.1)["decisions"] == "yes"
    assert bench.agreement(scores(-1.0, -1.02), scores(-1.03, -1.01), 0.1)["decisions"] == "tie"
    assert bench.agreement(scores(-1.0, -3.0), scores(-3.0, -1.0), 0.1)["decisions"] == "no"
    ag = bench.agreement(scores(-1.0, -3.0), scores(-1.5, -3.0), 0.1)
    assert ag["max_abs_diff"] == pytest.approx(0.5) and not ag["within_tol"]


def _cuda():
    import torch

    if not torch.cuda.is_available():
        pytest.skip(NEEDS_CUDA)


def _packed_naive_padded(bench, arch: str, dtype_name: str, options: int = 51):
    import torch

    lm = bench.make_engine(arch, getattr(torch, dtype_name), "cuda", max_batch_rows=8, prefix_cache_mb=8192)
    try:
        requests = bench.kitchen_requests(8, options)
        prompt, opts = requests[0]
        packed, naive = lm.score(prompt, opts), lm.score_reference(prompt, opts)
        loop, padded = lm.score_batch(requests, layout="loop"), lm.score_batch(requests, layout="padded")
        padded_diff = max(abs(x.logprob_sum - y.logprob_sum) for a, b in zip(loop, padded) for x, y in zip(a, b))
        return bench.agreement(packed, naive, bench.TOLERANCE[dtype_name]), padded_diff
    finally:
        bench.release_engine(lm)
        del lm
        bench.free_memory()


@pytest.mark.gpu
def test_cuda_float32_paths_agree_as_on_cpu(bench):
    _cuda()
    ag, padded_diff = _packed_naive_padded(bench, "tiny", "float32")
    assert ag["max_abs_diff"] < 1e-3 and padded_diff < 1e-3
    assert ag["decisions"] == "yes"


@pytest.mark.gpu
@pytest.mark.parametrize("arch", ["llama-3.2-1b", "llama-3.1-8b"])
def test_cuda_bf16_packed_agrees_with_naive(bench, arch):
    """bf16 keeps 8 significant bits: summed log-probs agree within the benchmark's bf16 tolerance, and
    the decision is the naive one unless the naive top two are within it."""
    _cuda()
    ag, padded_diff = _packed_naive_padded(bench, arch, "bfloat16")
    assert ag["within_tol"] and padded_diff <= bench.TOLERANCE["bfloat16"]
    assert ag["decisions"] in ("yes", "tie")


@pytest.mark.gpu
def test_cuda_quick_run_prints_the_result_line(bench, capsys):
    _cuda()
    fields = bench.main(["--archs", "llama-3.2-1b", "--no-serve", "--repeats", "1", "--batches", "1", "8"])
    assert _last_result(capsys) == fields
    assert fields["gpu"] != "none" and fields["dtype"] == "bfloat16"
    assert float(fields["speedup"]) > 1 and float(fields["padded_ratio_b8"]) > 0
    if fields["mfu"] != "na":
        assert 0 < float(fields["mfu"]) < 1


@pytest.mark.slow  # starts Ray Serve (about a minute on this machine)
def test_cpu_dry_path_through_ray_serve(bench, capsys):
    pytest.importorskip("ray.serve")
    fields = bench.main(["--device", "cpu", "--options", "4", "--serve"])
    assert _last_result(capsys) == fields
    assert float(fields["batched_ratio"]) > 0


def test_step_profile_times_each_phase_on_cpu(load_benchmark, tmp_path):
    phases = load_benchmark("profile_gpu_step").main(["--device", "cpu", "--arch", "tiny", "--options", "4",
                                                      "--out", str(tmp_path)])
    assert set(phases) == {"step_ms", "split_ms", "prepare_ms", "pack_forward_ms"} and all(v > 0 for v in phases.values())
    assert "function calls" in (tmp_path / "cprofile.txt").read_text() and "aten::" in (tmp_path / "torch_profile.txt").read_text()
