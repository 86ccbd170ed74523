"""The one synchronous client of a scorer host (:class:`~groundplan.actors.scorer.LLMScorer`).

Planners call a :class:`~groundplan.llm.base.LanguageModel` synchronously; the host is asynchronous and
batches every caller's requests. However the host is reached (a Ray actor handle from an episode worker,
a Serve deployment handle from a planner replica, the event loop of ``groundplan serve --local`` from its
worker threads), a call is the host method's name and arguments, submitted and then waited on, so one
class holds the model's methods and subclasses say only how to submit and wait. Every score request
joins the host's batches as its own request (the host's ``score_batch`` gathers them), whichever way it came.
"""
from __future__ import annotations

import asyncio
from typing import Any, Sequence

import numpy as np

from groundplan.llm.base import Generation, GenerationParams, OptionScore, ScoreRequest


class HostClient:
    """A :class:`~groundplan.llm.base.LanguageModel` over a scorer host; subclasses define ``_submit`` (start
    the host's method ``method`` with ``args``, return something pending) and ``_result`` (wait for it)."""

    name: str

    def _submit(self, method: str, *args: Any) -> Any:
        raise NotImplementedError

    def _result(self, pending: Any) -> Any:
        raise NotImplementedError

    def _call(self, method: str, *args: Any) -> Any:
        return self._result(self._submit(method, *args))

    def score(self, prompt: str, options: Sequence[str]) -> list[OptionScore]:
        return self._call("score", prompt, list(options))

    def score_batch(self, requests: Sequence[ScoreRequest]) -> list[list[OptionScore]]:
        return self._call("score_batch", [(p, list(o)) for p, o in requests])

    def generate(self, prompt: str, params: GenerationParams) -> list[Generation]:
        return self._call("generate", prompt, params)

    def beam_candidates(self, prompt: str, params: Any) -> list[Any]:
        return self._call("beam_candidates", prompt, params)

    def chat_prompt(self, text: str) -> str:
        return self._call("chat_prompt", text)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.asarray(self._call("embed", list(texts)))


class LoopClient(HostClient):
    """The host in an event loop of this process, called from other threads (``--local``'s planner threads
    run in a thread pool beside uvicorn's loop): each call is scheduled on ``loop`` and waited on."""

    def __init__(self, host: Any, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.host = host
        self.name = host.name
        self.loop = loop

    def _submit(self, method: str, *args: Any) -> Any:
        if self.loop is None:
            raise RuntimeError("LoopClient has no event loop yet: set .loop from the loop that runs the host")
        return asyncio.run_coroutine_threadsafe(getattr(self.host, method)(*args), self.loop)

    def _result(self, pending: Any) -> Any:
        return pending.result()
