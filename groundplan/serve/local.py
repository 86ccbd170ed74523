"""The in-process backend: the API over the plain services, no Ray (tests, Schemathesis, and a
single-process ``groundplan serve --local``)."""
from __future__ import annotations

import dataclasses
from typing import Any

from starlette.concurrency import run_in_threadpool

from groundplan.llm.base import LanguageModel
from groundplan.serve.config import ServeConfig
from groundplan.serve.service import PlannerService, ScoreService, local_store


class LocalBackend:
    """Runs each request in a worker thread of this process."""

    def __init__(self, config: ServeConfig, lm: LanguageModel) -> None:
        self.lm = lm
        self.scores = ScoreService(config, lm)
        self.planners = PlannerService(config, lm, local_store(config))

    async def score(self, prompt: str, options: list[str]) -> dict[str, Any]:
        self.scores.check(prompt, options)
        result = await run_in_threadpool(self.lm.score, prompt, options)
        return {"model": self.lm.name, "options": [dataclasses.asdict(s) for s in result], "batch_size": 1}

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
