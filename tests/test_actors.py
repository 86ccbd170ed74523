"""Actors: the scorer batches concurrent requests and gives each caller its own scores; the remote
wrappers behave like the in-process model and env."""
from __future__ import annotations

import asyncio
import functools

import numpy as np
import pytest

from groundplan.actors.affordance_server import AffordanceServer
from groundplan.actors.perception import Perception
from groundplan.actors.scorer import DynamicBatcher, LLMScorer
from groundplan.config import PlannerSpec
from groundplan.core.types import Observation, StepResult
from groundplan.envs import ENVS
from groundplan.factory import make_planner
from groundplan.llm.base import GenerationParams
from groundplan.rollout.episode import run_episode
from tests.fakes import FakeLM

ray = pytest.importorskip("ray")
PLAN = ["find a coke can", "pick up the coke can", "bring it to you", "put down the coke can", "done"]


def _lm() -> FakeLM:
    return FakeLM.following(PLAN)


#: picklable by reference (tests.fakes is importable in Ray workers; this test module is not)
LM_FACTORY = functools.partial(FakeLM.following, PLAN)


def _requests(n: int) -> list[tuple[str, list[str]]]:
    return [(f"Human: task {i}\nRobot: 1." + " x," * (i % 4), [" find a coke can", " done", f" option {i}"]) for i in range(n)]



def test_scorer_batches_without_ray():
    scorer = LLMScorer(lm_factory=_lm, batch_window_ms=20, max_batch=8)
    reqs = _requests(12)

    async def main():
        return await asyncio.gather(*(scorer.score(p, o) for p, o in reqs)), await scorer.stats()

    results, stats = asyncio.run(main())
    assert results == [_lm().score(p, o) for p, o in reqs]
    assert stats["requests"] == 12 and stats["mean_batch_size"] > 1 and stats["max_batch_size"] <= 8
    assert stats["options"] == 36


def test_batcher_error_reaches_every_caller_of_the_batch():
    def boom(items):
        raise RuntimeError("model fell over")

    b = DynamicBatcher(boom, window_ms=20, max_batch=4)

    async def main():
        return await asyncio.gather(*(b.submit(i) for i in range(3)), return_exceptions=True)

    out = asyncio.run(main())
    assert all(isinstance(e, RuntimeError) for e in out)


def test_scorer_actor_batches_concurrent_requests(ray_local):
    from groundplan.actors.scorer import make_scorer_actor

    scorer = make_scorer_actor(lm_factory=LM_FACTORY, batch_window_ms=50, max_batch=16, num_cpus=0)
    reqs = _requests(16)
    results = ray.get([scorer.score.remote(p, o) for p, o in reqs])
    assert results == [_lm().score(p, o) for p, o in reqs]  # each caller gets only its own scores
    stats = ray.get(scorer.stats.remote())
    assert stats["requests"] == 16 and stats["mean_batch_size"] > 1
    assert ray.get(scorer.score_batch.remote(reqs[:3])) == _lm().score_batch(reqs[:3])
    ray.kill(scorer)


def test_remote_lm_round_robins_replicas(ray_local):
    from groundplan.actors.remote import RemoteLM
    from groundplan.actors.scorer import make_scorer_actor

    scorers = [make_scorer_actor(lm_factory=LM_FACTORY, num_cpus=0) for _ in range(2)]
    lm = RemoteLM(scorers)
    assert lm.name == "fake-lm"
    reqs = _requests(4)
    assert [lm.score(p, o) for p, o in reqs] == [_lm().score(p, o) for p, o in reqs]
    assert lm.score_batch(reqs) == _lm().score_batch(reqs)
    assert np.allclose(lm.embed(["a coke can"]), _lm().embed(["a coke can"]))
    params = GenerationParams(n=2, temperature=0.5, top_p=0.9, max_new_tokens=8, stop=("\n",), seed=1, repetition_penalty=1.3)
    assert lm.generate("Task: Drink\nStep 1:", params) == _lm().generate("Task: Drink\nStep 1:", params)
    counts = [ray.get(s.stats.remote())["requests"] for s in scorers]
    assert sum(counts) == 8 and min(counts) >= 2  # 4 single calls alternate, then one batch of 4
    for s in scorers:
        ray.kill(s)


def test_remote_env_behaves_like_the_env(ray_local):
    from groundplan.actors.remote import RemoteEnv
    from groundplan.actors.sim_worker import make_sim_worker

    worker = make_sim_worker("kitchen", {}, num_cpus=0)
    remote, local = RemoteEnv(worker), ENVS.get("kitchen")()
    assert remote.name == local.name and remote.done_skill == local.done_skill
    task = local.tasks()[0]
    assert [t.task_id for t in remote.tasks()] == [t.task_id for t in local.tasks()]
    traces = []
    for env in (remote, local):
        planner = make_planner(PlannerSpec(name="saycan", affordance="kitchen_value"), _lm(), 8)
        t = run_episode(planner, env, task, seed=3, episode_id="e")
        traces.append({**t.to_dict(), "wall_s": 0, "steps": [{**s, "timings": {}} for s in t.to_dict()["steps"]]})
    assert traces[0] == traces[1]
    assert remote.reset(task, 1).skills == local.reset(task, 1).skills
    ray.kill(worker)


def test_affordance_server_matches_local_source(ray_local):
    from groundplan.actors.affordance_server import (
        RemoteAffordance,
        make_affordance_server,
    )
    from groundplan.grounding import AFFORDANCES

    env = ENVS.get("kitchen")()
    task = env.tasks()[0]
    obs = env.reset(task, 0)
    local = AFFORDANCES.get("kitchen_value")()
    local.reset(task, 0)
    server = make_affordance_server(sources={"SayCan": {"source": "kitchen_value"}}, num_cpus=0)
    remote = RemoteAffordance(server, "SayCan", "ep-1")
    remote.reset(task, 0)
    assert np.allclose(remote(obs, obs.skills, []), local(obs, obs.skills, []))
    assert ray.get(server.stats.remote())["requests"] == 1
    ray.kill(server)


def test_affordance_server_rejects_unknown_source():
    with pytest.raises(KeyError, match="kitchen_value"):
        AffordanceServer(sources={"x": {"source": "no_such_source"}})


def test_perception_is_a_pass_through_for_the_kitchen():
    env = ENVS.get("kitchen")()
    obs = env.reset(env.tasks()[0], 0)
    p = Perception()
    assert p.detect(obs) is obs.state
    assert p.success(obs, "done", StepResult(True, "ok", Observation(skills=[]))) is True
