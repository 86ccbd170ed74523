"""A scripted LLM backend: deterministic option scores from a table of instructions and their steps.

It stands in for a real model behind groundplan's :class:`~groundplan.llm.base.LanguageModel` protocol
(``score``, ``score_batch``, ``generate``, ``embed``): a backend of your own (a model server, a quantised
engine) has the same four methods and the same kind of typed options with its declared capabilities.
Because this one reads only the prompt, it runs the same in-process, in eval's scorer actor and behind
``groundplan serve``.
"""
from __future__ import annotations

import re
import zlib
from typing import Any, Sequence

import numpy as np
from pydantic import ConfigDict, Field

from groundplan.core.errors import InvalidInputError
from groundplan.core.validation import validate_options
from groundplan.llm.base import Generation, GenerationParams, LLMCapabilities, OptionScore, ScoreRequest
from groundplan.llm.options import BackendOptions

from groundplan_example_plugin.env import TASKS

#: the pantry's own tasks: what the model "knows" unless ``script`` says otherwise
PANTRY_SCRIPT: dict[str, list[str]] = {instruction: list(plan) for _, _, instruction, _, plan in TASKS}


class ScriptedOptions(BackendOptions):
    """Options of :class:`ScriptedLM` (a config's ``llm.options``). Its capabilities are declared here, so
    a planner that needs what it cannot do (beam search, prompt log-probs) is refused when a config loads."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    script: dict[str, list[str]] = Field(default_factory=lambda: {k: list(v) for k, v in PANTRY_SCRIPT.items()},
                                         description="instruction -> the steps the model proposes in order, done "
                                         "after the last (default: the pantry's four tasks)")
    miss_logprob: float = Field(-4.0, lt=0, description="log-prob per word of an option that is not the scripted "
                                "next step")
    dim: int = Field(64, ge=1, description="size of embed()'s vectors (a hashed bag of words)")

    @property
    def capabilities(self) -> LLMCapabilities:
        """It scores options and generates text; it has no token distribution for beam search or echo."""
        return LLMCapabilities(score=True, generate=True, beam_search=False, prompt_logprobs=False)


class ScriptedLM:
    """The scripted model: after a prompt holding a scripted instruction, the next step the script gives
    (its steps found in order in the text after the instruction; done once all are there) has log-prob 0,
    every other option ``miss_logprob`` per word. Deterministic, as the protocol requires of ``score``."""

    def __init__(self, model: str = "scripted", **options: Any) -> None:
        self.name = model
        self.options = validate_options(ScriptedOptions, options, "example_scripted options")

    def expected(self, prompt: str) -> str | None:
        """The step the script proposes after ``prompt``; None when no scripted instruction is in it."""
        found = [(prompt.rfind(k), len(k), k) for k in self.options.script if k in prompt]
        if not found:
            return None
        at, length, instruction = max(found)  # the last instruction in the prompt, the longest on a tie
        text, pos = prompt[at + length:], 0
        for step in self.options.script[instruction]:
            hit = text.find(step, pos)
            if hit < 0:
                return step
            pos = hit + len(step)
        return "done"

    def score(self, prompt: str, options: Sequence[str]) -> list[OptionScore]:
        if not options:
            raise InvalidInputError("score needs at least one option")
        wanted = self.expected(prompt)
        out = []
        for option in options:
            n = max(1, len(option.split()))
            total = 0.0 if option.strip() == wanted else self.options.miss_logprob * n
            out.append(OptionScore(option=option, logprob_sum=total, logprob_mean=total / n, num_tokens=n))
        return out

    def score_batch(self, requests: Sequence[ScoreRequest]) -> list[list[OptionScore]]:
        return [self.score(prompt, options) for prompt, options in requests]

    def generate(self, prompt: str, params: GenerationParams) -> list[Generation]:
        text = " " + (self.expected(prompt) or "done")
        cuts = [text.index(s) for s in params.stop if s in text]
        text = text[: min(cuts)] if cuts else text
        return [Generation(text=text, logprob_mean=0.0, num_tokens=len(text.split()), finish_reason="stop")] * params.n

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.options.dim))
        for row, text in enumerate(texts):
            for word in re.findall(r"[a-z0-9']+", text.lower()):
                out[row, zlib.crc32(word.encode()) % self.options.dim] += 1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return np.divide(out, norms, out=np.zeros_like(out), where=norms > 0)
