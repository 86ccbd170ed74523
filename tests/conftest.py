"""Shared fixtures. The real embedded model loads once per test session (fp32 on CPU)."""
from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: a small BabyAI split (3 train tasks per level): the Say training and self-improvement tests' data
BABYAI_SMALL = {"train_per_family": 3, "test_per_family": 1, "generalize_per_family": 1}


def in_ci() -> bool:
    """True where the environment says this is CI (``CI`` set to anything but empty, 0 or false, as CI services
    set it: ``CI=true``)."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def require_in_ci(reason: str) -> None:
    """Skip the calling test here, but fail it in CI: for a test whose dependency (a browser, an optional
    model package) a developer's machine may lack, while the README's test command, which CI runs, installs
    it. A skip there would let the test silently never run. ``reason`` says what is missing and how to
    install it."""
    if in_ci():
        pytest.fail(f"{reason}; CI={os.environ['CI']!r}, where the README's test command installs what it needs, "
                    "so this test must run here and not skip", pytrace=False)
    pytest.skip(reason)


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist, each worker's share of the cores, set before torch loads: torch (and every process
    a test starts: Ray workers, servers, CLIs, which inherit the variable) would otherwise run one thread per
    core in every worker, and on a 2-core machine two workers' OpenMP teams of 2 oversubscribe the cores
    (measured alone on the machine: the suite took 1,042 s with 2 workers against 1,092 s in one process; a
    golden-trace sweep pinned to 2 threads beside the other worker took 184 s against 58 s with 1). A variable
    the user set is kept."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1 and "OMP_NUM_THREADS" not in os.environ:
        os.environ["OMP_NUM_THREADS"] = str(max(1, len(os.sched_getaffinity(0)) // workers))
    if hasattr(config.option, "loadscopereorder"):
        # xdist's --dist loadfile hands out files by falling test count unless told not to, which sends the
        # few-test, minute-long files last and leaves one worker running them alone; FIRST below orders them
        config.option.loadscopereorder = False


#: the modules that take 25 s or more, heaviest first (``--durations=0`` in one process on the 2-core machine,
#: 2026-12-03: 146 s down to 25 s). Under xdist they are handed out first, so the many short files fill in
#: around them and the workers finish together (longest-first scheduling), instead of one running the
#: minute-long files alone at the end.
FIRST = ("test_golden_traces.py", "test_say_training.py", "test_ray_job.py", "test_chaos.py", "test_serve_schema.py",
         "test_improve.py", "test_llm_scoring.py", "test_pointnav.py", "test_serve_ray.py", "test_distributed_eval.py",
         "test_serve_edges.py", "test_memo_prune_decisions.py", "test_openai_api.py", "test_actor_pool.py",
         "test_fault_tolerance.py", "test_mlflow_server.py", "test_multinode.py", "test_end_to_end.py",
         "test_hf_scoring.py", "test_runtime_golden.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The heavy modules (:data:`FIRST`) first, in that order; every other test after them as collected. A
    stable sort: tests within a module keep their order, so module fixtures are still built once."""
    rank = {name: i for i, name in enumerate(FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(FIRST)))


@pytest.fixture(scope="session")
def lm():
    from groundplan.llm.hf import HFLanguageModel

    return HFLanguageModel()


def _local_ray(**runtime_env):
    """Start a local Ray with 4 logical CPUs whose workers import groundplan and the tests from this
    checkout (``runtime_env`` adds to that); returns the ``ray`` module, for the caller to shut down."""
    ray = pytest.importorskip("ray")
    # at normal priority, as a sweep's own local Ray runs (Ray's default nice 15 starves the workers beside
    # any other job); only ray.init sees the variable
    before = os.environ.get("RAY_worker_niceness")
    os.environ.setdefault("RAY_worker_niceness", "0")
    try:
        # "local": a Ray of this test's own, even while another xdist worker's test runs a `ray start` head
        # on this machine, which ray.init() without an address would join (and refuse num_cpus)
        ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": {"PYTHONPATH": ROOT}, **runtime_env})
    finally:
        if before is None:
            os.environ.pop("RAY_worker_niceness", None)
    return ray


@pytest.fixture(scope="module")
def ray_local():
    """A local Ray with 4 logical CPUs per test module; workers import groundplan and tests.fakes
    from this checkout."""
    ray = _local_ray()
    yield
    ray.shutdown()


@pytest.fixture
def ray_crash_once():
    """A local Ray for one test whose every worker process registers the env ``babyai_crash_once``
    (``tests/faults.py``: the process that resets a chosen task exits, once) at start, as this process
    does for the test's length; not for a module that also uses ``ray_local``."""
    pytest.importorskip("minigrid")
    from groundplan.envs import ENVS
    from tests import faults

    ray = _local_ray(worker_process_setup_hook="tests.faults.register")
    faults.register()
    yield faults.NAME
    ray.shutdown()
    for table in (ENVS._items, ENVS._configs):  # leave the registry as the other tests know it
        table.pop(faults.NAME, None)


@pytest.fixture
def load_benchmark(monkeypatch):
    """``load_benchmark("bench_x")`` imports ``benchmarks/bench_x.py`` as the module ``bench_x``, importable
    by that name for the test's duration (spawned workers unpickle its functions by module name)."""
    import importlib.util
    import sys

    def load(name: str):
        monkeypatch.syspath_prepend(os.path.join(ROOT, "benchmarks"))
        spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "benchmarks", f"{name}.py"))
        module = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, name, module)
        spec.loader.exec_module(module)
        return module

    return load


@pytest.fixture(scope="module")
def tiny_encoder(tmp_path_factory):
    """A 1-layer random BERT with all-MiniLM-L6-v2's tokenizer: a Can/Pay encoder that trains in seconds."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    from groundplan.llm.loading import embedded_encoder_path

    folder = tmp_path_factory.mktemp("tiny-bert")
    tok = AutoTokenizer.from_pretrained(embedded_encoder_path("all-minilm-l6-v2"))
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=64, max_position_embeddings=512)).save_pretrained(folder)
    tok.save_pretrained(folder)
    return str(folder)


def tiny_llama_lm(folder: Path, seed: int, **options: Any):
    """An HFLanguageModel over a 2-layer random Llama with SmolLM2's tokenizer, saved in ``folder``; its
    logits sharpened (x40) so greedy choices and beams differ clearly. Fast and deterministic per seed.
    ``options``: the engine's other options (``sample_memo_size=0``)."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from groundplan.llm.hf import HFLanguageModel
    from groundplan.llm.loading import resolve_model_path

    tok = AutoTokenizer.from_pretrained(resolve_model_path("smollm2-135m-instruct"))
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      eos_token_id=tok.eos_token_id, bos_token_id=tok.bos_token_id)
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():
        model.lm_head.weight.mul_(40.0)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return HFLanguageModel(model=str(folder), dtype="float32", device_map=None, **options)


@pytest.fixture(scope="module")
def chaos():
    """``benchmarks/chaos.py`` as the module ``chaos``: the fault injector, its reading of Ray's actor table
    and its trace comparison (it runs in the test's process; workers unpickle nothing of it)."""
    spec = importlib.util.spec_from_file_location("chaos", Path(ROOT) / "benchmarks" / "chaos.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["chaos"] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("chaos", None)


@pytest.fixture(scope="module")
def babyai_data(tmp_path_factory):
    """Expert trajectories of a small BabyAI train split (3 tasks per level), collected in this process;
    the collected dataset folder. Say training and self-improvement train on it."""
    pytest.importorskip("minigrid")
    from groundplan.pipelines.collect.collect import run_collect
    from groundplan.pipelines.collect.config import CollectConfig

    out = tmp_path_factory.mktemp("collect")
    cfg = CollectConfig.model_validate({"name": "t", "env": {"name": "babyai", "options": BABYAI_SMALL},
                                        "splits": ["train"], "runtime": {"executor": "local", "mlflow": False},
                                        "output_dir": str(out)})
    run_collect(cfg, progress=False)
    return str(cfg.data_dir)
