"""The affordance server actor: hosts affordance / value / Can / Pay models, batched (docs/architecture.md, "Runtime").

Any source registered in ``groundplan.grounding.AFFORDANCES`` can be hosted. Sources may keep
per-episode state (``reset(task, seed)``), so the server keeps one instance per (episode, source):
``reset`` creates it, ``score`` calls it, ``release`` drops it. Score calls from many episodes are
collected by the same dynamic batcher as the LLM scorer and run together in one thread hop; for the
kitchen the affordance is computed from the observation's simulator state.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from groundplan.actors.scorer import DynamicBatcher
from groundplan.core.truth import DeclaresTruth, OracleDeclaration
from groundplan.core.types import Observation, Task
from groundplan.factory import build_affordance
from groundplan.grounding import AFFORDANCES


class AffordanceServer:
    def __init__(self, sources: dict[str, dict[str, Any]] | None = None, batch_window_ms: float = 2.0,
                 max_batch: int = 64) -> None:
        """``sources``: hosted name -> {"source": registered affordance name, "options": {...}}."""
        self.sources = {k: dict(v) for k, v in (sources or {}).items()}
        for spec in self.sources.values():
            AFFORDANCES.get(spec.get("source", ""))  # unknown names fail at start, naming the valid ones
        self._instances: dict[tuple[str, str], Any] = {}
        self._batcher = DynamicBatcher(self._run, batch_window_ms, max_batch, size_of=lambda r: len(r[3]))
        # SayCanPay's Can/Pay: all k×m candidates of a step, and the steps of concurrent episodes, in one
        # forward pass per model (groundplan.grounding.saycanpay.score_sequences_batch)
        self._seq_batcher = DynamicBatcher(self._run_sequences, batch_window_ms, max_batch, size_of=lambda r: len(r[4]))

    def _instance(self, episode: str, name: str) -> Any:
        key = (episode, name)
        if key not in self._instances:
            spec = self.sources[name] if name in self.sources else {"source": name}
            self._instances[key] = build_affordance(spec["source"], spec.get("options", {}))
        return self._instances[key]

    async def reset(self, episode: str, name: str, task: Task, seed: int) -> None:
        self._instances.pop((episode, name), None)
        self._instance(episode, name).reset(task, seed)  # AffordanceSource.reset

    async def score(self, episode: str, name: str, observation: Observation, skills: Sequence[str],
                    history: Sequence[str]) -> np.ndarray:
        return await self._batcher.submit((episode, name, observation, list(skills), list(history)))

    def _run(self, batch: list[tuple]) -> list[np.ndarray]:
        return [np.asarray(self._instance(e, n)(obs, skills, hist), dtype=float) for e, n, obs, skills, hist in batch]

    async def score_sequences(self, episode: str, name: str, goal: str, init_obs: str,
                              items: Sequence[tuple[Sequence[str], str]]) -> Any:
        """Can/Pay scores of (history, candidate) pairs for sources with ``score_sequences``."""
        return await self._seq_batcher.submit((episode, name, goal, init_obs, [(list(h), a) for h, a in items]))

    def _run_sequences(self, batch: list[tuple]) -> list[Any]:
        from groundplan.grounding.saycanpay import score_sequences_batch

        return score_sequences_batch([(self._instance(e, n), g, o, items) for e, n, g, o, items in batch])

    async def release(self, episode: str) -> None:
        for key in [k for k in self._instances if k[0] == episode]:
            del self._instances[key]

    async def stats(self) -> dict[str, Any]:
        out = self._batcher.stats.to_dict()
        out["sequences"] = self._seq_batcher.stats.to_dict()
        out["live_instances"] = len(self._instances)
        return out


class RemoteAffordance(DeclaresTruth):
    """An :class:`~groundplan.grounding.base.AffordanceSource` over an AffordanceServer handle, for one
    episode at a time (planners call ``reset`` at episode start). ``declaration`` is the hosted source's
    (its registered class's), so the planner reports what the source reads wherever the source runs; the
    hosted source itself reads through the gate in the server."""

    def __init__(self, handle: Any, name: str, episode: str, declaration: OracleDeclaration | None = None) -> None:
        self.handle, self.name, self.episode = handle, name, episode
        self.declaration = declaration

    def reset(self, task: Task, seed: int) -> None:
        import ray

        ray.get(self.handle.reset.remote(self.episode, self.name, task, seed))

    def __call__(self, observation: Observation, skills: Sequence[str], history: Sequence[str]) -> np.ndarray:
        import ray

        return ray.get(self.handle.score.remote(self.episode, self.name, observation, list(skills), list(history)))


class RemoteCanPay(RemoteAffordance):
    """A SayCanPay Can/Pay source over an AffordanceServer handle: the planner's batched
    ``score_sequences`` goes to the server, which batches it with other episodes' requests."""

    def score_sequences(self, goal: str, init_obs: str, items: Sequence[tuple[Sequence[str], str]],
                        one_by_one: bool = False) -> Any:
        import ray

        return ray.get(self.handle.score_sequences.remote(self.episode, self.name, goal, init_obs,
                                                          [(list(h), a) for h, a in items]))


def make_affordance_server(*, num_gpus: float = 0, num_cpus: float = 0.5, resources: dict[str, float] | None = None,
                           max_restarts: int = -1, **kwargs: Any):
    import ray

    opts: dict[str, Any] = dict(num_gpus=num_gpus, num_cpus=num_cpus, max_restarts=max_restarts,
                                max_task_retries=-1, max_concurrency=1000)
    if resources:
        opts["resources"] = resources
    return ray.remote(AffordanceServer).options(**opts).remote(**kwargs)
