"""The in-process backend: the API over the plain services, no Ray (tests, Schemathesis, and a
single-process ``groundplan serve --local``)."""
from __future__ import annotations

import asyncio
from typing import Any, Callable

from starlette.concurrency import run_in_threadpool

from groundplan.llm.base import LanguageModel, PromptLogprobs
from groundplan.llm.client import LoopClient
from groundplan.serve.config import ServeConfig
from groundplan.serve.service import PlanJob, PlannerService, ServeScorer, local_store


class LocalBackend:
    """Runs each request in this process: scoring, prompt log-probs, token counts and sampling through the
    one scorer host (:class:`~groundplan.serve.service.ServeScorer`, batched and memoized as the Serve
    app's scorer deployment is: ``scorer.max_batch_size``, ``scorer.batch_wait_timeout_s``,
    ``scorer.memo_size``), planning in worker threads whose model calls go through that host too (a
    :class:`~groundplan.llm.client.LoopClient` on the event loop serving the request), as a Serve planner
    replica's go through the scorer deployment."""

    def __init__(self, config: ServeConfig, lm: LanguageModel) -> None:
        self.lm = lm
        self.scorer = ServeScorer(config, lm_factory=lambda: lm)
        self.client = LoopClient(self.scorer)
        self.planners = PlannerService(config, self.client, local_store(config))

    async def _planning(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn`` in a worker thread, its model calls scheduled on this request's event loop."""
        self.client.loop = asyncio.get_running_loop()
        return await run_in_threadpool(fn, *args)

    async def score(self, prompt: str, options: list[str]) -> dict[str, Any]:
        return await self.scorer.score_request(prompt, options)

    async def prompt_logprobs(self, prompts: list[str | list[int]], top_k: int,
                              keep_next: bool = False) -> list[PromptLogprobs]:
        return await self.scorer.prompt_logprobs(prompts, top_k, keep_next)

    async def count_tokens(self, texts: list[str]) -> list[int]:
        return await self.scorer.count_tokens(texts)

    async def generate(self, prompt: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        return await self.scorer.generate_request(prompt, params)

    async def plan(self, job: PlanJob) -> dict[str, Any]:
        return await self._planning(self.planners.plan, job)

    async def create_session(self, planner: str, request: dict[str, Any]) -> dict[str, Any]:
        return await self._planning(self.planners.create_session, {**request, "planner": planner})

    async def step_session(self, session_id: str, request: dict[str, Any]) -> dict[str, Any]:
        return await self._planning(self.planners.step_session, session_id, request)

    async def delete_session(self, session_id: str) -> None:
        await self._planning(self.planners.delete_session, session_id)


def local_app(config: ServeConfig, lm: LanguageModel, token: str | None = None) -> Any:
    from groundplan.serve.api import build_api

    return build_api(config, LocalBackend(config, lm), llm_name=getattr(lm, "name", None), token=token)


def run_local(config: ServeConfig) -> None:
    """``groundplan serve --local``: the same API in one process under uvicorn (no Ray; the scorer host
    batches in uvicorn's event loop; sessions in this process's memory) for development and single-robot use."""
    import uvicorn

    from groundplan.factory import make_llm

    uvicorn.run(local_app(config, make_llm(config.llm)), host=config.host, port=config.port, log_level="warning")
