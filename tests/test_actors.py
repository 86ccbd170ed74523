"""Actors: the scorer batches concurrent requests and gives each caller its own scores; the remote
wrappers behave like the in-process model and env."""
from __future__ import annotations

import asyncio
import functools

import numpy as np
import pytest

from groundplan.actors.affordance_server import AffordanceServer
from groundplan.actors.scorer import DynamicBatcher, LLMScorer
from groundplan.config import PlannerSpec
from groundplan.envs import ENVS
from groundplan.llm.base import GenerationParams
from tests.fakes import FakeLM, comparable_trace

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
    assert len(out) == 3 and all(isinstance(e, RuntimeError) and str(e) == "model fell over" for e in out)


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


def _worker_spec(scorers, envs: int = 1):
    from groundplan.actors.remote import RemoteLM
    from groundplan.actors.worker import WorkerSpec
    from groundplan.config import EnvSpec

    return WorkerSpec(EnvSpec(), 8, envs=envs, lm=functools.partial(RemoteLM, scorers, name="fake"),
                      llm_name="fake", config_hash="h")


def test_episode_worker_actor_plays_episodes_like_the_in_process_runner(ray_local):
    """The env lives inside the worker actor; only LLM calls leave it, and the traces are the in-process
    ones. The group leaves the Ray it did not start running."""
    from groundplan.actors.group import RunnerGroup
    from groundplan.config import EnvSpec
    from groundplan.rollout.runner import EpisodeRunner, EpisodeSpec

    local = EpisodeRunner(EnvSpec(), LM_FACTORY(), 8, llm_name="fake", config_hash="h")
    spec = PlannerSpec(name="saycan", affordance="kitchen_value")
    episodes = [EpisodeSpec(spec, task, 3, f"e-{task.task_id}") for task in ENVS.get("kitchen")().tasks()[:3]]
    with RunnerGroup() as group:
        assert group.started is False
        scorers = group.add_scorers(1, lm_factory=LM_FACTORY, num_cpus=0)
        group.add_workers(_worker_spec(scorers), 1, num_cpus=0, what="episode workers")
        outs = list(group.run(episodes))
        assert ray.get(group.workers[0].info.remote())["episodes"] == 3
    assert ray.is_initialized()
    assert [o.item for o in outs] == episodes and all(o.ok for o in outs)
    for out in outs:
        assert comparable_trace(out.value.trace) == comparable_trace(local.run(out.item).trace)


def test_episode_worker_with_several_envs_plays_episodes_at_once(ray_local):
    """envs_per_worker: one actor, three envs, three episodes in flight at once, each the in-process trace."""
    from groundplan.actors.group import RunnerGroup
    from groundplan.config import EnvSpec
    from groundplan.rollout.runner import EpisodeRunner, EpisodeSpec

    local = EpisodeRunner(EnvSpec(), LM_FACTORY(), 8, llm_name="fake", config_hash="h")
    spec = PlannerSpec(name="saycan", affordance="kitchen_value")
    episodes = [EpisodeSpec(spec, task, 1, f"e-{task.task_id}") for task in ENVS.get("kitchen")().tasks()[:6]]
    with RunnerGroup() as group:
        scorers = group.add_scorers(1, lm_factory=LM_FACTORY, num_cpus=0)
        group.add_workers(_worker_spec(scorers, envs=3), 1, num_cpus=0)
        actor = group.workers[0]
        remote = ray.get([actor.run.remote(e) for e in episodes])  # submitted together: up to 3 run concurrently
        info = ray.get(actor.info.remote())
    for episode, result in zip(episodes, remote):
        assert comparable_trace(result.trace) == comparable_trace(local.run(episode).trace)
    assert info["envs"] == 3 and info["episodes"] == 6


def test_one_worker_returns_a_trace_or_a_trajectory_row_as_asked():
    """A local group plays in this process, without Ray: an episode spec gives its trace, a collect item
    the trajectory row of the same episode (the expert acting), from the same worker and env."""
    from groundplan.actors.group import RunnerGroup
    from groundplan.actors.worker import CollectItem, EpisodeWorker, WorkerSpec
    from groundplan.config import EnvSpec
    from groundplan.rollout.runner import EpisodeResult, EpisodeSpec

    task = ENVS.get("kitchen")().tasks()[0]
    episode = EpisodeSpec(PlannerSpec(name="saycan", affordance="kitchen_value"), task, 0, "e-0")
    item = CollectItem("t-0", "train", task, 0)
    with RunnerGroup(local=True) as group:
        group.add_workers(WorkerSpec(EnvSpec(), 8, lm=_lm, llm_name="fake"), 1)
        trace, row = [o.value for o in group.run([episode, item])]
        assert group.started is False and isinstance(group.workers[0], EpisodeWorker)
        assert group.workers[0].metrics()["episodes"] == 2
    assert isinstance(trace, EpisodeResult) and trace.trace.task_id == task.task_id
    assert row["traj_id"] == "t-0" and row["success"] and row["source"] == "reference_plan"
    assert row["actions"][-1] == "done" and len(row["actions"]) == len(row["observations"])


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
