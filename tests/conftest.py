"""Shared fixtures. The real embedded model loads once per test session (fp32 on CPU)."""
from __future__ import annotations

import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="session")
def lm():
    from groundplan.llm.hf import HFLanguageModel

    return HFLanguageModel()


@pytest.fixture(scope="module")
def ray_local():
    """A local Ray with 4 logical CPUs per test module; workers import groundplan and tests.fakes
    from this checkout."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False, runtime_env={"env_vars": {"PYTHONPATH": ROOT}})
    yield
    ray.shutdown()
