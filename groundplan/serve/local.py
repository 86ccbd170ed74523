"""The in-process backend: the API over the plain services, no Ray (tests, Schemathesis, and a
single-process ``groundplan serve --local``)."""
from __future__ import annotations

import dataclasses
from typing import Any

from starlette.concurrency import run_in_threadpool

from groundplan.llm.base import GenerationParams, LanguageModel, PromptLogprobs
from groundplan.llm.memo import with_memo
from groundplan.serve.config import ServeConfig
from groundplan.serve.service import PlannerService, ScoreService, local_store


class LocalBackend:
    """Runs each request in a worker thread of this process; the prompt log-probs of concurrent
    ``/v1/completions`` requests are batched into one engine call, as the Serve app's scorer batches
    them (``scorer.max_batch_size``, ``scorer.batch_wait_timeout_s``)."""

    def __init__(self, config: ServeConfig, lm: LanguageModel) -> None:
        from groundplan.actors.scorer import DynamicBatcher
        from groundplan.serve.openai_api import prompt_logprobs_batch

        self.lm = lm
        self.scoring = with_memo(lm, config.scorer.memo_size)  # option scores, as the Serve app's scorer keeps
        self.scores = ScoreService(config, lm)
        self.planners = PlannerService(config, lm, local_store(config))
        self._echo = DynamicBatcher(lambda requests: prompt_logprobs_batch(lm, requests),
                                    window_ms=1000 * config.scorer.batch_wait_timeout_s,
                                    max_batch=config.scorer.max_batch_size, size_of=lambda r: len(r[0]))

    async def score(self, prompt: str, options: list[str]) -> dict[str, Any]:
        self.scores.check(prompt, options)
        result = await run_in_threadpool(self.scoring.score, prompt, options)
        return {"model": self.lm.name, "options": [dataclasses.asdict(s) for s in result], "batch_size": 1}

    async def prompt_logprobs(self, prompts: list[str | list[int]], top_k: int) -> list[PromptLogprobs]:
        out = await self._echo.submit((list(prompts), int(top_k)))
        if isinstance(out, BaseException):
            raise out
        return out

    async def count_tokens(self, texts: list[str]) -> list[int]:
        return await run_in_threadpool(self.lm.count_tokens, texts)  # type: ignore[attr-defined]

    async def generate(self, prompt: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        gens = await run_in_threadpool(self.lm.generate, prompt, GenerationParams(**params))
        return [dataclasses.asdict(g) for g in gens]

    async def plan(self, planner: str, request: dict[str, Any]) -> dict[str, Any]:
        return await run_in_threadpool(self.planners.plan, {**request, "planner": planner})

    async def create_session(self, planner: str, request: dict[str, Any]) -> dict[str, Any]:
        return await run_in_threadpool(self.planners.create_session, {**request, "planner": planner})

    async def step_session(self, session_id: str, request: dict[str, Any]) -> dict[str, Any]:
        return await run_in_threadpool(self.planners.step_session, session_id, request)

    async def delete_session(self, session_id: str) -> None:
        await run_in_threadpool(self.planners.delete_session, session_id)


def local_app(config: ServeConfig, lm: LanguageModel, token: str | None = None) -> Any:
    from groundplan.serve.api import build_api

    return build_api(config, LocalBackend(config, lm), llm_name=getattr(lm, "name", None), token=token)


def run_local(config: ServeConfig) -> None:
    """``groundplan serve --local``: the same API in one process under uvicorn (no Ray, no batching,
    sessions in this process's memory) for development and single-robot use."""
    import uvicorn

    from groundplan.factory import make_llm

    uvicorn.run(local_app(config, make_llm(config.llm)), host=config.host, port=config.port, log_level="warning")
