"""A fake LLM backend for tests that go through the CLI on a Ray cluster (no ``lm_factory`` there).

Importing this module registers ``fake_slow`` (``tests.fakes.SlowLM``: follows the coke-can plan, 20 ms
per batch) in ``LLM_BACKENDS``. The scorer actor imports it too when ``GROUNDPLAN_PLUGINS`` names it.
"""
from __future__ import annotations

from typing import Any

from groundplan.llm import LLM_BACKENDS
from tests.fakes import SlowLM

NAME = "fake_slow"


def make_slow_lm(**_: Any) -> SlowLM:
    return SlowLM()


if NAME not in LLM_BACKENDS.names():
    LLM_BACKENDS.register(NAME)(make_slow_lm)
