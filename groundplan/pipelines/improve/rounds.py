"""Online self-improvement of the planner's LM (``groundplan improve CONFIG``): the design card's online
data collection, as expert iteration (Anthony et al. 2017) in STaR's form (Zelikman et al. 2022, Sec. 3).

Round 0 evaluates the start model. Each later round r:

1. **rolls out** round r-1's model on the rollout tasks (the selected train tasks minus the validation
   tasks), every seed of ``rollout_seeds``, with ``rollout_planner`` (which may sample), through the
   sweep machinery (runner actors and the batched scorer, or the local executor);
2. **keeps** the episodes the env judged successful, replays each in the env to record its observations
   and admissible lists, ends it with the done step where the env's goal check first held, and appends it
   to the round's Parquet dataset (``round-<r>/data``, the collect schema; source ``improve-r<r>``), with no
   expert and no oracle in the loop;
3. **fine-tunes** the base model on the expert data (if any) and every round's kept episodes so far, on
   Ray Train (:func:`~groundplan.pipelines.train.say.run_train_say`), restricted to the rollout tasks, and
   registers it as the next version of ``models:/<name>``;
4. **evaluates** it with ``planner`` on the validation tasks (the stop rule) and the test tasks.

The loop stops after ``rounds`` rounds, after ``patience`` rounds in a row whose validation success did not
rise above the best so far, or when a round has nothing to learn from. Every stage writes its result to
``improve.json`` when it ends, and every stage resumes by itself (a sweep's traces, the dataset's journal,
Ray Train's checkpoints), so a killed run started again picks up where it stopped and nothing is rolled
out or trained twice.

Success rates are over tasks clustered by instruction (:func:`~groundplan.core.stats.clustered_wilson`).
"""
from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from groundplan.config import EvalConfig, stable_hash
from groundplan.core.errors import InvalidInputError
from groundplan.core.paths import atomic_write_text
from groundplan.core.types import Observation, Task
from groundplan.pipelines.improve.config import ImproveConfig

log = logging.getLogger(__name__)

STATE_FILE = "improve.json"


def load_improve_config(path: str | Path, overrides: list[str] | None = None) -> ImproveConfig:
    from groundplan.config import load_yaml_model

    return load_yaml_model(ImproveConfig, path, overrides, "improve config")


def run_dir(cfg: ImproveConfig) -> Path:
    return (Path(cfg.output_dir) / cfg.name).resolve()


def tracking_uri_of(cfg: ImproveConfig) -> str:
    from groundplan.pipelines.tracking import absolute_tracking_uri

    return absolute_tracking_uri(cfg.tracking_uri or f"sqlite:///{run_dir(cfg) / 'mlruns' / 'mlflow.db'}")


# ------------------------------------------------------------------------------------ tasks
def _signature(task: Task) -> str:
    from groundplan.envs.splits import visible_signature

    return str(task.metadata.get("signature") or visible_signature(task.instruction))


def split_tasks(cfg: ImproveConfig) -> tuple[list[Task], list[Task]]:
    """(rollout tasks, validation tasks) of the selected train tasks: ``validation_fraction`` of the distinct
    visible signatures, ranked by a hash of the signature and the run's name, are validation (so a task and
    its twins fall on one side, and the draw does not follow the task order); a task the planner's prompt
    shows as an example stays on the rollout side."""
    from groundplan.envs.base import opened
    from groundplan.factory import build_env
    from groundplan.pipelines.evaluate.sweep import select_tasks

    probe = _sweep_config(cfg, "tasks", Path("."), cfg.base_model, cfg.planner, "train", None, [0])
    with opened(build_env(cfg.env.name, {**cfg.env.options, "split": "train"})) as env:
        tasks = select_tasks(env, probe)
    from groundplan.envs.splits import instruction_key
    from groundplan.grounding.canpay.lineage import PromptExamples

    shown: set[str] = set()  # a prompt example's task is read before every decision: never validation
    for spec in {id(s): s for s in (cfg.planner, cfg.actor)}.values():
        if isinstance(spec.planner_options, PromptExamples):
            shown |= {k for e in spec.planner_options.prompt_lineage().examples for k in (e.signature, e.instruction)}
    free = [t for t in tasks if _signature(t) not in shown and instruction_key(t.instruction) not in shown]
    sigs = sorted({_signature(t) for t in free}, key=lambda s: hashlib.sha1(f"{cfg.name}|{s}".encode()).hexdigest())
    if len(sigs) < 2:
        raise InvalidInputError(f"the task selection holds {len(sigs)} distinct task(s); rollouts and validation "
                                "need at least 2")
    n_val = min(len(sigs) - 1, max(1, round(len(sigs) * cfg.validation_fraction)))
    val = set(sigs[:n_val])
    return [t for t in tasks if _signature(t) not in val], [t for t in tasks if _signature(t) in val]


def _sweep_config(cfg: ImproveConfig, name: str, out: Path, model: str, planner: Any, split: str,
                  ids: list[str] | None, seeds: list[int], tasks: Any = None) -> EvalConfig:
    from groundplan.llm.loading import is_model_uri

    selection = tasks.model_dump(exclude_unset=True) if tasks is not None else \
        ({"ids": ids} if ids is not None else cfg.tasks.model_dump(exclude_unset=True))
    return EvalConfig.model_validate({
        "name": name, "output_dir": str(out),
        "env": {"name": cfg.env.name, "options": {**cfg.env.options, "split": split}},
        "llm": {"backend": "hf", "model": model,
                "options": {"tracking_uri": tracking_uri_of(cfg)} if is_model_uri(model) else {}},
        "planners": [planner.model_dump(exclude={"group"})], "tasks": selection,
        "runtime": cfg.runtime.model_dump(exclude_unset=True), "seeds": seeds, "max_steps": cfg.max_steps})


# ------------------------------------------------------------------------------------ measures
def rate(traces: Sequence[Any]) -> dict[str, Any]:
    """Success over ``traces``: n episodes, k clusters (tasks sharing an instruction), the rate and its
    cluster-aware 95% interval."""
    from groundplan.core.stats import clustered_wilson
    from groundplan.envs.splits import instruction_key

    by: dict[str, list[int]] = {}
    for t in traces:
        by.setdefault(instruction_key(t.instruction), []).append(int(bool(t.execution_success) and not t.error))
    clusters = [(sum(v), len(v)) for v in by.values()]
    if not clusters:
        return {"n": 0, "clusters": 0, "successes": 0, "rate": None, "lo": 0.0, "hi": 1.0}
    p, lo, hi = clustered_wilson(clusters)
    return {"n": sum(m for _, m in clusters), "clusters": len(clusters), "successes": sum(y for y, _ in clusters),
            "rate": p, "lo": lo, "hi": hi}


def kept_episodes(traces: Sequence[Any]) -> list[Any]:
    """The episodes the env judged successful, without error. One that went on after reaching the goal (a
    model that never says done, cut by the step cap) is kept too: :func:`keep` ends it where the goal
    first held, with the done step."""
    return [t for t in traces if t.execution_success and not t.error and t.steps]


# ------------------------------------------------------------------------------------ keep
@dataclass
class _Scripted:
    """An 'expert' that plays a kept episode's steps again, so the row records what each step showed, and
    gives the done step as soon as the env's goal check holds (the simulator side, as an expert is)."""

    name: str
    steps: list[str]
    env: Any
    _i: int = 0

    def act(self, task: Task, obs: Observation) -> str:
        if self._i >= len(self.steps) or self.env.check_goal().success:
            return self.env.done_skill
        self._i += 1
        return self.steps[self._i - 1]


def keep(cfg: ImproveConfig, round_: int, traces: Sequence[Any], data_dir: Path) -> dict[str, Any]:
    """Append round ``round_``'s kept episodes to its Parquet dataset and describe them. Each is replayed in
    the env for what its steps showed, and ends with the done step where the goal first held (``trimmed``
    counts those cut shorter than played); one whose replay does not reach the goal is dropped."""
    from groundplan.datasets.store import ShardWriter
    from groundplan.envs.base import opened
    from groundplan.factory import build_env
    from groundplan.rollout.trajectory import EpisodeFailed, ExpertPlanner, run_trajectory

    kept = kept_episodes(traces)
    source = f"improve-r{round_}"
    stored = trimmed = 0
    with opened(build_env(cfg.env.name, {**cfg.env.options, "split": "train"})) as env, \
            ShardWriter(data_dir) as writer:
        tasks = {t.task_id: t for t in env.tasks()}
        for tr in kept:
            steps = [s.chosen for s in tr.steps if not s.done]
            traj_id = f"{cfg.env.name}|train|{tr.task_id}|{source}|{tr.seed}"
            if traj_id in writer.stored:
                stored += 1
                continue
            planner = ExpertPlanner(_Scripted(source, steps, env), env.done_skill)
            try:
                row = run_trajectory(env, tasks[tr.task_id], tr.seed, planner, source=source, split="train",
                                     traj_id=traj_id, max_steps=len(steps) + 1)
            except EpisodeFailed as e:
                log.warning("%s: the replay failed (%s); dropped", traj_id, e)
                continue
            if not row["success"] or row["actions"][-1] != env.done_skill:
                log.warning("%s: the replay did not reach the goal; dropped", traj_id)
                continue
            writer.append(row)
            stored += 1
            trimmed += len(row["actions"]) - 1 < len(steps)
    return {"episodes": len(traces), "kept": len(kept), "stored": stored, "trimmed": trimmed,
            "kept_tasks": len({t.task_id for t in kept})}


def expert_reference(cfg: ImproveConfig, kept: Sequence[Any]) -> dict[str, Any]:
    """What the expert data say of the kept trajectories (``Trajectory`` rows, done step included): the share
    whose task the expert solved, and their mean length against the expert's (None without expert data)."""
    if not cfg.expert_data or not kept:
        return {"expert_solved_share": None, "length_vs_expert": None}
    from groundplan.grounding.canpay.data import read_trajectories

    expert: dict[str, int] = {}
    for t in read_trajectories(cfg.expert_data, env=cfg.env.name, split="train"):
        if t.success:
            expert[t.task_id] = min(expert.get(t.task_id, 10**9), len(t.actions))
    solved = [t for t in kept if t.task_id in expert]
    ratios = [len(t.actions) / expert[t.task_id] for t in solved]
    return {"expert_solved_share": len(solved) / len(kept),
            "length_vs_expert": sum(ratios) / len(ratios) if ratios else None}


# ------------------------------------------------------------------------------------ state
def _config_hash(cfg: ImproveConfig) -> str:
    return stable_hash(cfg.model_dump(exclude={"runtime", "rounds", "patience"}), 12)


def load_state(cfg: ImproveConfig) -> dict[str, Any]:
    """The run's ``improve.json`` (a new one when there is none); another config's run is refused."""
    path = run_dir(cfg) / STATE_FILE
    key = _config_hash(cfg)
    if not path.exists():
        return {"name": cfg.name, "config_hash": key, "config": cfg.model_dump(mode="json"), "rounds": []}
    state = json.loads(path.read_text())
    if state.get("config_hash") != key:
        raise InvalidInputError(f"{path} holds the rounds of another config (hash {state.get('config_hash')}, this "
                                f"one {key}): give another name or output_dir, or remove the folder")
    return state


def save_state(cfg: ImproveConfig, state: dict[str, Any]) -> None:
    path = run_dir(cfg) / STATE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(state, indent=1, default=str))


def _stop_reason(cfg: ImproveConfig, rounds: list[dict[str, Any]]) -> str | None:
    """Why the loop stops after the last round in ``rounds``, or None to go on."""
    last = rounds[-1]
    if last.get("stopped"):
        return last["stopped"]
    if last["round"] >= cfg.rounds:
        return f"the configured {cfg.rounds} round(s) ran"
    vals = [r["validation"]["rate"] or 0.0 for r in rounds]
    best_at = max(range(len(vals)), key=lambda i: (vals[i], -i))
    if len(vals) - 1 - best_at >= cfg.patience:
        return (f"validation success has not risen above round {rounds[best_at]['round']}'s "
                f"{vals[best_at]:.0%} for {len(vals) - 1 - best_at} round(s) (patience {cfg.patience})")
    return None


# ------------------------------------------------------------------------------------ loop
def run_improve(cfg: ImproveConfig, progress: bool = True) -> dict[str, Any]:
    """Run (or resume) the rounds; returns the state written to ``improve.json`` (module doc)."""
    from groundplan.pipelines.evaluate.sweep import run_sweep

    root = run_dir(cfg)
    state = load_state(cfg)
    rollout_tasks, val_tasks = split_tasks(cfg)
    state["tasks"] = {"rollout": [t.task_id for t in rollout_tasks], "validation": [t.task_id for t in val_tasks]}
    save_state(cfg, state)
    rounds: list[dict[str, Any]] = state["rounds"]

    def evaluate(rec: dict[str, Any], folder: Path) -> None:
        for role, split, ids, selection in (("validation", "train", [t.task_id for t in val_tasks], None),
                                            ("test", cfg.test_split, None, cfg.test_tasks)):
            if role in rec:
                continue
            sweep = _sweep_config(cfg, role, folder, rec["model"], cfg.planner, split, ids, [0], selection)
            result = run_sweep(sweep, progress=progress)
            rec[role] = rate(result.traces)
            save_state(cfg, state)
            log.info("round %d %s: %s", rec["round"], role, rec[role])

    if not rounds:
        rounds.append({"round": 0, "model": cfg.start_model or cfg.base_model})
    while True:
        rec = rounds[-1]
        folder = root / f"round-{rec['round']}"
        if rec["round"] > 0 and "model" not in rec and not rec.get("stopped"):  # a new or killed round
            rec.update(_round(cfg, rec, folder, rollout_tasks, progress))
            save_state(cfg, state)
        if rec.get("stopped"):
            break
        evaluate(rec, folder)
        if _stop_reason(cfg, rounds) is not None:
            break
        rounds.append({"round": rec["round"] + 1, "rollout_model": rec["model"]})
        save_state(cfg, state)
    state["stopped"] = _stop_reason(cfg, rounds)
    save_state(cfg, state)
    log.info("improve %s stopped: %s", cfg.name, state["stopped"])
    return state


def _round_data(cfg: ImproveConfig, r: int) -> list[str]:
    """The training data of round ``r``: the expert data and the kept episodes of rounds 1..r."""
    folders = [run_dir(cfg) / f"round-{k}" / "data" for k in range(1, r + 1)]
    return [*cfg.expert_data, *[str(f) for f in folders if any(f.glob("*.parquet"))]]


def _earlier_tasks(cfg: ImproveConfig, r: int) -> set[str]:
    """The tasks an earlier round's rollouts already solved."""
    from groundplan.rollout.traces import read_traces

    out: set[str] = set()
    for k in range(1, r):
        path = run_dir(cfg) / f"round-{k}" / "rollouts" / "traces.jsonl"
        if path.exists():
            out |= {t.task_id for t in kept_episodes(read_traces(path))}
    return out


def _round(cfg: ImproveConfig, rec: dict[str, Any], folder: Path, rollout_tasks: list[Task],
           progress: bool) -> dict[str, Any]:
    """Rollouts, kept data and training of one round; the fields it adds to the round's record."""
    from groundplan.pipelines.evaluate.sweep import run_sweep
    from groundplan.pipelines.train.say import run_train_say

    r = rec["round"]
    sweep = _sweep_config(cfg, "rollouts", folder, rec["rollout_model"], cfg.actor, "train",
                          [t.task_id for t in rollout_tasks], cfg.rollout_seeds)
    result = run_sweep(sweep, progress=progress, lineage_check=False)  # train tasks by design: data, not a test
    kept = kept_episodes(result.traces)
    out: dict[str, Any] = {"rollouts": {**rate(result.traces), "episodes_run": result.stats.get("episodes_run"),
                                        "episodes_per_min": result.stats.get("episodes_per_min")}}
    out["kept"] = keep(cfg, r, result.traces, folder / "data")
    if out["kept"]["stored"]:
        from groundplan.grounding.canpay.data import read_trajectories

        out["kept"].update(expert_reference(cfg, read_trajectories([str(folder / "data")], env=cfg.env.name)))
    out["kept"]["new_tasks"] = len({t.task_id for t in kept} - _earlier_tasks(cfg, r))
    data = _round_data(cfg, r)
    if not data:
        return {**out, "stopped": f"round {r} kept no successful episode and there is no expert data: nothing to "
                "learn from"}
    say = cfg.say_config(data, [t.task_id for t in rollout_tasks], str(folder / "train"), tracking_uri_of(cfg))
    trained = run_train_say(say, progress=progress)
    return {**out, "model": trained.model_uri, "train": {"counts": trained.counts, "metrics": trained.metrics,
                                                          "data": data}}
