"""Shared fixtures. The real embedded model loads once per test session (fp32 on CPU)."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def lm():
    from groundplan.llm.hf import HFLanguageModel

    return HFLanguageModel()
