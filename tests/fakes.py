"""Deterministic test doubles: a language model, a tiny environment and affordance sources.

No torch, no transformers: these run in milliseconds and make planner behaviour exactly predictable.
"""
from __future__ import annotations

import dataclasses
import os
import re
import threading
import time
import zlib
from pathlib import Path
from typing import Any, Callable, Collection, Mapping, Sequence

import numpy as np

from groundplan.core.errors import InvalidInputError
from groundplan.core.truth import OracleDeclaration, Truth, read
from groundplan.core.types import GoalResult, Observation, StepResult, Task
from groundplan.envs.base import Env, EnvCapabilities
from groundplan.grounding.base import Affordance
from groundplan.llm.base import Generation, GenerationParams, OptionScore, ScoreRequest

#: (prompt, stripped option) -> summed log-probability of the option
ScoreRule = Callable[[str, str], float]


def steps_so_far(prompt: str) -> int:
    """How many steps the current "Robot: 1. a, 2. b, 3." answer already holds (SayCan's format)."""
    return prompt.rsplit("Robot: 1.", 1)[-1].count(",")


class FakeLM:
    """A deterministic :class:`~groundplan.llm.base.LanguageModel`.

    - ``score``: an option's summed log-prob comes from ``scores`` (a table keyed by the option text
      without its leading space, or a rule ``(prompt, option) -> float``); options not in the table
      get ``default_token_logprob`` per token. Tokens are whitespace-separated words; the mean is the
      sum over the token count.
    - ``generate``: returns the scripted ``generations`` one per call (then ``""``), cut at the first
      stop string.
    - ``embed``: a normalised bag of words hashed into ``dim`` buckets (shared words → high cosine).

    Every call is recorded in ``score_calls``, ``generate_calls`` and ``embed_calls``.
    """

    def __init__(
        self,
        scores: Mapping[str, float] | ScoreRule | None = None,
        *,
        default_token_logprob: float = -5.0,
        generations: Sequence[str] = (),
        dim: int = 512,
        name: str = "fake-lm",
    ) -> None:
        self.name = name
        self._scores = scores
        self._default = default_token_logprob
        self._generations = list(generations)
        self._dim = dim
        self.score_calls: list[tuple[str, list[str]]] = []
        self.generate_calls: list[dict[str, Any]] = []
        self.embed_calls: list[list[str]] = []

    @classmethod
    def following(cls, plan: Sequence[str], **kwargs: Any) -> "FakeLM":
        """An LM that gives step k of ``plan`` log-prob 0 (every other option the default), where k is
        the number of steps already in the prompt's answer; past the end it keeps the last step."""

        def rule(prompt: str, option: str) -> float:
            wanted = plan[min(steps_so_far(prompt), len(plan) - 1)]
            return 0.0 if option == wanted else kwargs.get("default_token_logprob", -5.0) * _num_tokens(option)

        return cls(rule, **kwargs)

    def score(self, prompt: str, options: Sequence[str]) -> list[OptionScore]:
        if not options:
            raise InvalidInputError("score needs at least one option")
        self.score_calls.append((prompt, list(options)))
        out = []
        for option in options:
            n = _num_tokens(option)
            total = self._option_logprob(prompt, option.strip(), n)
            out.append(OptionScore(option=option, logprob_sum=total, logprob_mean=total / n, num_tokens=n))
        return out

    def _option_logprob(self, prompt: str, option: str, n: int) -> float:
        if callable(self._scores):
            return float(self._scores(prompt, option))
        if self._scores is not None and option in self._scores:
            return float(self._scores[option])
        return self._default * n

    def score_batch(self, requests: Sequence[ScoreRequest]) -> list[list[OptionScore]]:
        return [self.score(prompt, options) for prompt, options in requests]

    def generate(self, prompt: str, params: GenerationParams) -> list[Generation]:
        self.generate_calls.append({"prompt": prompt, **dataclasses.asdict(params)})
        text = self._generations.pop(0) if self._generations else ""
        cuts = [text.index(s) for s in params.stop if s in text]
        if cuts:
            text = text[: min(cuts)]
        return [Generation(text=text, logprob_mean=-1.0, num_tokens=_num_tokens(text), finish_reason="stop")] * params.n

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.embed_calls.append(list(texts))
        out = np.zeros((len(texts), self._dim))
        for row, text in enumerate(texts):
            for word in re.findall(r"[a-z0-9']+", text.lower()):
                out[row, zlib.crc32(word.encode()) % self._dim] += 1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return np.divide(out, norms, out=np.zeros_like(out), where=norms > 0)


def hashed_logprob(prompt: str, option: str) -> float:
    """A deterministic pseudo-random summed log-prob in [-12, 0] for (prompt, option): a FakeLM rule
    that gives varied, reproducible decisions (SayCan pruning's exactness test)."""
    return -12.0 * (zlib.crc32(f"{prompt}\x00{option}".encode()) % 10_007) / 10_006


def _num_tokens(text: str) -> int:
    return max(1, len(text.split()))


class ToyEnv(Env):
    """A one-room kitchen with a coke can: bring it to the user.

    State: where the robot is, where the coke is ("table", "hand" or a robot location). Skills are
    always all offered; preconditions decide success. ``fail_skills`` simulates execution noise
    (those skills fail without effect in ``execute`` but not in the noise-free ``check_plan``);
    ``raise_on`` makes ``execute`` raise for that skill. ``executed`` lists every executed label.
    """

    name = "toy"
    capabilities = EnvCapabilities(can_replay=True)
    SKILLS = ["find a coke can", "pick up the coke can", "bring it to you", "put down the coke can", "done"]
    REFERENCE = ("find a coke can", "pick up the coke can", "bring it to you", "put down the coke can")

    def __init__(self, fail_skills: Collection[str] = (), raise_on: str | None = None) -> None:
        self.fail_skills = set(fail_skills)
        self.raise_on = raise_on
        self.executed: list[str] = []
        self.task: Task | None = None
        self.state: dict[str, Any] = {}

    def tasks(self, families: Sequence[str] | None = None) -> list[Task]:
        task = Task("toy-coke", "bring me a coke can", "nl_nouns", goal={"coke": "user"}, reference_plan=self.REFERENCE)
        return [task] if families is None or task.family in families else []

    def reset(self, task: Task, seed: int) -> Observation:
        self.task = task
        self.state = self._start_state(task)
        self.executed = []
        return self._observe()

    def execute(self, skill: str) -> StepResult:
        self.executed.append(skill)
        if skill == self.raise_on:
            raise RuntimeError(f"the toy robot broke while trying to {skill}")
        if skill in self.fail_skills:
            return StepResult(False, f"{skill}: failed (noise)", self._observe(), info={"noise": True})
        ok, feedback = self._apply(self.state, skill)
        return StepResult(ok, feedback, self._observe())

    def check_goal(self) -> GoalResult:
        assert self.task is not None
        return self._goal(self.state, self.task)

    def check_plan(self, task: Task, seed: int, plan: Sequence[str]) -> GoalResult:
        state = self._start_state(task)
        for skill in plan:
            self._apply(state, skill)
        return self._goal(state, task)

    @staticmethod
    def _start_state(task: Task) -> dict[str, Any]:
        return {"robot": "start", "coke": "table", **(task.start_state or {})}

    def _observe(self) -> Observation:
        return Observation(skills=list(self.SKILLS), state=dict(self.state))

    @staticmethod
    def _apply(state: dict[str, Any], skill: str) -> tuple[bool, str]:
        """Run ``skill`` on ``state`` in place; returns (success, feedback)."""
        holding = state["coke"] == "hand"
        if skill == "find a coke can" and not holding:
            state["robot"] = state["coke"]
        elif skill == "pick up the coke can" and not holding and state["robot"] == state["coke"]:
            state["coke"] = "hand"
        elif skill == "bring it to you":
            state["robot"] = "user"
        elif skill == "put down the coke can" and holding:
            state["coke"] = state["robot"]
        elif skill != "done":
            return False, f"{skill}: precondition not met"
        return True, f"{skill}: ok"

    @staticmethod
    def _goal(state: dict[str, Any], task: Task) -> GoalResult:
        predicate = f"coke at {task.goal['coke']}"
        if state["coke"] == task.goal["coke"]:
            return GoalResult(True, satisfied=[predicate])
        return GoalResult(False, unsatisfied=[predicate])


class ToyAffordance(Affordance):
    """Preconditions of :class:`ToyEnv` as probabilities (1 feasible, 0 not; done gets 0.1 as in
    SayCan Appendix C.1). Records every ``reset`` as (task_id, seed) and counts calls. It computes them
    from the toy's state, which it declares (as ``kitchen_value`` does the kitchen's: a stand-in for SayCan's
    value functions), so the episode loop hands it the state and its planner keeps an honest label."""

    declaration = OracleDeclaration("toy preconditions", frozenset({Truth.STATE}), stands_in=True,
                                    wording="the toy kitchen's state, standing in for SayCan's value functions")

    def __init__(self) -> None:
        self.resets: list[tuple[str, int]] = []
        self.calls = 0

    def reset(self, task: Task, seed: int) -> None:
        self.resets.append((task.task_id, seed))

    def __call__(self, observation: Observation, skills: Sequence[str], history: Sequence[str]) -> np.ndarray:
        self.calls += 1
        out = []
        for skill in skills:
            if skill == "done":
                out.append(0.1)
            else:
                ok, _ = ToyEnv._apply(dict(read(observation, Truth.STATE, self)), skill)
                out.append(1.0 if ok else 0.0)
        return np.array(out)


class FixedAffordance(Affordance):
    """Affordance from a table (skills not in it get ``default``); counts calls."""

    def __init__(self, table: Mapping[str, float] | None = None, default: float = 1.0) -> None:
        self.table = dict(table or {})
        self.default = default
        self.calls = 0

    def __call__(self, observation: Observation, skills: Sequence[str], history: Sequence[str]) -> np.ndarray:
        self.calls += 1
        return np.array([self.table.get(s, self.default) for s in skills])


#: the plan the fault-tolerance tests' slow fake model follows
SLOW_LM_PLAN = ["find a coke can", "pick up the coke can", "bring it to you", "put down the coke can", "done"]


class SlowLM(FakeLM):
    """FakeLM.following(SLOW_LM_PLAN) that takes 20 ms per batch, so episodes are in flight when actors die."""

    def __init__(self) -> None:
        super().__init__(FakeLM.following(SLOW_LM_PLAN)._scores)

    def score_batch(self, requests):
        time.sleep(0.02)
        return super().score_batch(requests)


def slow_lm() -> SlowLM:
    return SlowLM()


class GatedLM(SlowLM):
    """SlowLM whose process answers its first ``pass_first`` score calls, then holds every further call
    while ``<gate_dir>/closed`` exists, having written its pid to ``<gate_dir>/waiting``: a test can then
    kill the scorer process with requests pending inside it. Counting calls (rather than closing the
    gate from a test hook) makes a request reach the closed gate whatever the scheduling."""

    def __init__(self, gate_dir: str, pass_first: int = 3) -> None:
        super().__init__()
        self.gate = Path(gate_dir)
        self.pass_first = pass_first
        self.calls = 0
        self.lock = threading.Lock()

    def score_batch(self, requests):
        with self.lock:
            self.calls += 1
            held = self.calls > self.pass_first and (self.gate / "closed").exists()
        if held:
            tmp = self.gate / f"waiting.{os.getpid()}"
            tmp.write_text(str(os.getpid()))
            tmp.replace(self.gate / "waiting")
            while (self.gate / "closed").exists():
                time.sleep(0.01)
        return super().score_batch(requests)


def small_kitchen_config(output_dir: Any, name: str = "t", **overrides: Any) -> Any:
    """A small SayCan / No-VF kitchen sweep (2 families x 2 tasks x 2 seeds x 2 planners = 16 episodes)."""
    from groundplan.config import EvalConfig

    base = {
        "name": name,
        "planners": [
            {"name": "saycan", "label": "SayCan", "affordance": "kitchen_value"},
            {"name": "saycan_novf", "label": "No-VF"},
        ],
        "tasks": {"families": ["nl_single_primitive", "nl_nouns"], "per_family": 2},
        "seeds": [0, 1],
        "max_steps": 6,
        "output_dir": str(output_dir),
        "runtime": {"executor": "local", "mlflow": False},
    }
    base.update(overrides)
    return EvalConfig.model_validate(base)


def with_runtime(cfg: Any, **runtime: Any) -> Any:
    """``cfg`` with some ``runtime`` fields changed, validated again."""
    from groundplan.config import EvalConfig

    return EvalConfig.model_validate({**cfg.model_dump(), "runtime": {**cfg.runtime.model_dump(), **runtime}})


def comparable_trace(trace: Any) -> dict[str, Any]:
    """A trace as a dict without its timings (wall time, per-step timings): what must be equal when the
    same episode is played in another process or on another executor."""
    d = trace.to_dict()
    d["wall_s"] = 0
    for s in d["steps"]:
        s["timings"] = {}
    return d
