"""The episode runner: alternate planner and environment until done or a step cap, producing one trace.

This is SayCan's Algorithm 1 seen from outside the planner, and the loop of every planner here: ``env.reset`` → ``planner.reset`` → (``planner.next_step`` → ``env.execute``)* until the
planner chooses its done skill or ``max_steps`` decisions were made. The done decision is recorded as
a step with ``done=True`` and is not executed. At the end the goal is checked in the final state
(execution success) and, where the env can replay plans noise-free, the chosen skill sequence is
replayed (plan success, SayCan Sec. 5.1's "right skills in a valid order").

The planner sees the episode through its declarations (:class:`~groundplan.core.truth.Withholding`):
a task without the truth it does not declare, observations whose state keeps only the percepts unless it
declares the state, so the gate of :mod:`groundplan.core.truth` holds for a plugin that never calls it
(docs/architecture.md, "Simulator truth"). The env, the judge and the trace get the real task.

Failures are evidence, not crashes: an exception raised by the planner or the env is recorded in
``trace.error`` as ``"<ExceptionType>: <message> (<where>)"`` and the episode counts as failed. An
:class:`~groundplan.core.errors.InfrastructureError` (e.g. an LLM server that still failed after its
retries) is recorded the same way behind ``"infrastructure failed: "``, the mark the Ray executor gives
episodes whose actors died, so it is never read as the planner's failure. The one exception that
propagates is :class:`~groundplan.errors.InvalidInputError` from ``planner.reset`` — a bad instruction
is the caller's mistake and the caller should see it.
"""
from __future__ import annotations

import logging
import time
from typing import Callable

from groundplan.core.errors import InfrastructureError, InvalidInputError
from groundplan.core.truth import Withholding
from groundplan.core.types import Observation, Task
from groundplan.envs.base import Env, planning_model
from groundplan.planners.base import Planner
from groundplan.rollout.traces import INFRASTRUCTURE_FAILURE, EpisodeTrace, StepTrace

#: ``on_step(trace, step, env)``: called after reset (``step=None``) and after each step is recorded (and
#: executed, unless it is the done decision); the episode runner records camera frames with it
StepHook = Callable[[EpisodeTrace, "StepTrace | None", Env], None]

logger = logging.getLogger(__name__)

def run_episode(
    planner: Planner,
    env: Env,
    task: Task,
    seed: int,
    *,
    max_steps: int | None = None,
    llm_name: str = "",
    config_hash: str = "",
    episode_id: str | None = None,
    require_termination: bool = True,
    on_step: StepHook | None = None,
    goal_only: bool = False,
) -> EpisodeTrace:
    """Run one episode of ``task`` from the start state given by ``seed`` and return its trace.

    ``max_steps`` caps the number of decisions (the done decision included); by default the planner's
    own ``max_steps`` (e.g. ``SayCanConfig.max_steps``). ``llm_name`` is recorded in the trace. ``episode_id`` defaults to
    ``"<planner>|<env>|<task_id>|<seed>"``, so a rerun of the same episode has the same id.
    With ``require_termination`` (default, as SayCan's headline numbers in Table 5), a plan counts as a
    plan success only if the planner also chose done; ``plan_success`` is None when the env cannot
    replay plans.

    Raises :class:`InvalidInputError` when ``planner.reset`` refuses the instruction or ``max_steps``
    is below 1; every other exception from the planner or env is recorded in ``trace.error``.

    ``on_step(trace, step, env)``, when given, is called after reset (``step=None``) and after each step;
    an exception it raises is logged and ignored (it observes the episode, it cannot fail it).

    ``goal_only`` judges the episode by the goal check on the final state alone: no noise-free replay
    (``plan_success`` stays None) and no env measures (``trace.metrics`` stays empty). Data collection
    needs no more (SayCanPay Sec. 4: the reward is whether the goal holds at the end) and should not pay
    for a second physics run of every trajectory.
    """
    cap = _step_cap(planner, max_steps)
    trace = EpisodeTrace(
        episode_id=episode_id or f"{planner.name}|{env.name}|{task.task_id}|{seed}",
        planner=planner.name,
        env=env.name,
        task_id=task.task_id,
        family=task.family,
        instruction=task.instruction,
        seed=seed,
        llm=llm_name,
        config_hash=config_hash,
        oracles=[d.to_dict() for d in planner.declarations],  # what the tables mark the row with
    )
    start = time.perf_counter()
    seen = Withholding.of(planner)  # what its declarations let the planner read
    error: str | None = None
    try:
        observation = env.reset(task, seed)
    except Exception as exc:
        error = _describe(exc, "env.reset")
    if error is None:
        try:
            planner.reset(seen.task(task), seen.observation(observation), seed=seed)
        except InvalidInputError:
            raise
        except Exception as exc:
            error = _describe(exc, "planner.reset")
    if error is None:
        try:  # the env's declared rules (never its goal), for planners that plan ahead
            planner.use_action_model(planning_model(env, task, observation))
        except Exception as exc:
            error = _describe(exc, "env.action_model")
    if error is None:
        _call_hook(on_step, trace, None, env)
        error = _run_steps(planner, env, observation, cap, trace, on_step, seen)
    trace.prompt = planner.prompt
    _judge(trace, env, task, seed, error, require_termination, goal_only)
    trace.wall_s = time.perf_counter() - start
    logger.info(
        "episode %s: %d steps, terminated=%s, execution_success=%s, plan_success=%s%s",
        trace.episode_id, len(trace.steps), trace.terminated, trace.execution_success, trace.plan_success,
        f", error={trace.error}" if trace.error else "",
    )
    return trace


def _step_cap(planner: Planner, max_steps: int | None) -> int:
    cap = max_steps if max_steps is not None else planner.max_steps
    if not isinstance(cap, int) or cap < 1:
        raise InvalidInputError(f"max_steps must be a positive integer, got {cap!r}")
    return cap


def _call_hook(hook: StepHook | None, trace: EpisodeTrace, step: StepTrace | None, env: Env) -> None:
    if hook is None:
        return
    try:
        hook(trace, step, env)
    except Exception:
        logger.warning("on_step hook failed (ignored)", exc_info=True)


def _run_steps(planner: Planner, env: Env, observation: Observation, cap: int, trace: EpisodeTrace,
               on_step: StepHook | None, seen: Withholding) -> str | None:
    """The decide/execute loop; appends to ``trace.steps`` and returns an error description or None. The
    planner is handed each observation and step result as ``seen`` lets it read them."""
    last = None
    for index in range(cap):
        t0 = time.perf_counter()
        try:
            decision = planner.next_step(seen.observation(observation), seen.step(last))
        except Exception as exc:
            return _describe(exc, f"planner.next_step, step {index}")
        step = StepTrace(
            index=index,
            chosen=decision.skill,
            done=decision.done,
            candidates=list(decision.candidates),
            prompt_delta=decision.prompt_delta,
            info=dict(decision.info),
            timings={"plan_s": time.perf_counter() - t0},
        )
        trace.steps.append(step)
        if decision.done:
            trace.terminated = True
            _call_hook(on_step, trace, step, env)
            return None
        t0 = time.perf_counter()
        try:
            result = env.execute(decision.skill)
        except Exception as exc:
            step.timings["exec_s"] = time.perf_counter() - t0
            return _describe(exc, f"env.execute('{decision.skill}'), step {index}")
        step.timings["exec_s"] = time.perf_counter() - t0
        step.success = bool(result.success)
        step.feedback = result.feedback
        if result.info:
            step.info["env"] = dict(result.info)
        logger.debug("step %d: %s -> success=%s %s", index, decision.skill, result.success, result.feedback)
        observation, last = result.observation, result
        _call_hook(on_step, trace, step, env)
    logger.debug("episode %s reached max_steps=%d without choosing done", trace.episode_id, cap)
    return None


def _judge(trace: EpisodeTrace, env: Env, task: Task, seed: int, error: str | None, require_termination: bool,
           goal_only: bool = False) -> None:
    """Fill in execution success, plan success and goal details (the goal alone with ``goal_only``); an
    error fails the episode."""
    can_replay = env.capabilities.can_replay and not goal_only
    if error is None and task.goal is None:  # an ad-hoc instruction (``groundplan plan``): nothing to judge
        trace.plan_success = None
        trace.goal_details = {"note": "no goal: the task has no goal predicate"}
        return
    if error is None:
        error = _check_outcome(trace, env, task, seed, require_termination, can_replay)
    if error is None and not goal_only:
        try:
            trace.metrics.update(env.episode_metrics(task, trace))
        except Exception as exc:
            error = _describe(exc, "env.episode_metrics")
    if error is not None:
        trace.error = error
        trace.execution_success = False
        trace.plan_success = False if can_replay else None


def _check_outcome(
    trace: EpisodeTrace, env: Env, task: Task, seed: int, require_termination: bool, can_replay: bool
) -> str | None:
    """Goal check on the final state, then the noise-free replay of the plan; returns an error or None."""
    try:
        goal = env.check_goal()
    except Exception as exc:
        return _describe(exc, "env.check_goal")
    trace.execution_success = bool(goal.success)
    trace.goal_details = {"satisfied": list(goal.satisfied), "unsatisfied": list(goal.unsatisfied)}
    if not can_replay:
        return None
    try:
        replay = env.check_plan(task, seed, trace.plan)
    except NotImplementedError:  # overrides check_plan but cannot replay this task
        return None
    except Exception as exc:
        return _describe(exc, "env.check_plan")
    trace.goal_details["plan"] = {"satisfied": list(replay.satisfied), "unsatisfied": list(replay.unsatisfied)}
    trace.plan_success = bool(replay.success) and (trace.terminated or not require_termination)
    return None


def _describe(exc: BaseException, where: str) -> str:
    """``"<ExceptionType>: <message> (<where>)"``, logged with its traceback; behind
    ``"infrastructure failed: "`` for an :class:`InfrastructureError`."""
    text = f"{type(exc).__name__}: {exc} ({where})"
    if isinstance(exc, InfrastructureError):
        text = f"{INFRASTRUCTURE_FAILURE}: {text}"
    logger.warning("episode error: %s", text, exc_info=True)
    return text
