"""A fake LLM backend for tests that go through the CLI on a Ray cluster (no ``lm_factory`` there).

Importing this module registers ``fake_slow`` (``tests.fakes.SlowLM``: follows the coke-can plan, 20 ms
per batch) in ``LLM_BACKENDS``. The scorer actor imports it too when ``GROUNDPLAN_PLUGINS`` names it.
"""
from __future__ import annotations

from typing import Any

from pydantic import ConfigDict

from groundplan.llm import LLM_BACKENDS, LLMCapabilities
from groundplan.llm.options import BackendOptions
from tests.fakes import SlowLM

NAME = "fake_slow"


class FakeOptions(BackendOptions):
    """A fake backend's typed options: none, and what the fakes do (score and sample; no beam search)."""

    model_config = ConfigDict(extra="forbid")

    @property
    def capabilities(self) -> LLMCapabilities:
        return LLMCapabilities(score=True, generate=True)


def make_slow_lm(**_: Any) -> SlowLM:
    return SlowLM()


if NAME not in LLM_BACKENDS.names():
    LLM_BACKENDS.register(NAME, config=FakeOptions)(make_slow_lm)
