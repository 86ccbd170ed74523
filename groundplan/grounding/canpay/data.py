"""Training examples for SayCanPay's Can and Pay models from expert trajectories (Sec. 6; App. B).

A trajectory τ = (o0, g, a1..aT, r) comes from the collect schema (Parquet: ``traj_id, env, split,
task_id, goal, init_obs, actions, observations, feasible, rewards, success, source, admissible``).
Every model input is the text of App. B.1:

    <Goal> g <Initial State> o0 <Step 1> a1 ... <Step t-1> a_{t-1} <NXT> a_t

(the markers are plain text; the encoder's tokenizer splits them). Examples:

- **Can** (Sec. 6.1, Eq. 8): for each feasible step t of a trajectory, the triple (positive a_t, a
  negative a_t' from the same trajectory at another step t' whose action differs, a negative ã from
  another trajectory with a different goal or initial state), all three after the same history.
  Steps a collector recorded as infeasible (on-policy data) are better negatives than random ones:
  they replace the same-trajectory negative at the step they were tried.
- **Pay** (Sec. 6.2): for each step of a successful trajectory, (history, a_t, δ^(T-t)) — 1 for the
  last action, δ one step before, ... (the discounted return-to-go of the sparse reward, generalised
  to any recorded rewards) — plus, per step, one negative from another trajectory with target 0, and
  two zero-return negatives of the same trajectory: a premature done, and a repeat of an earlier action.
"""
from __future__ import annotations

import glob
import logging
import os
import random
from dataclasses import dataclass, field
from typing import Any, Iterable, Literal, Sequence

from groundplan.core.errors import InvalidInputError
from groundplan.envs.splits import instruction_key, visible_signature

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Trajectory:
    """One recorded episode, as the Can/Pay trainers need it."""

    traj_id: str
    env: str
    split: str
    task_id: str
    goal: str
    init_obs: str
    actions: tuple[str, ...]
    feasible: tuple[bool, ...]
    rewards: tuple[float, ...]
    success: bool
    extra: dict[str, Any] = field(default_factory=dict, compare=False)
    #: the actions the env listed at each step (the collection's ``admissible``; empty where not recorded)
    listed: tuple[tuple[str, ...], ...] = field(default=(), compare=False)
    #: whether each listed action was feasible at each step, by the simulator's check (the collection's
    #: ``listed_feasible``, recorded with ``label_listed``; empty where not recorded)
    listed_feasible: tuple[tuple[bool, ...], ...] = field(default=(), compare=False)


def format_history(goal: str, init_obs: str, history: Sequence[str]) -> str:
    """``<Goal> g <Initial State> o0 <Step 1> a1 ... <Step n> an`` (App. B.1)."""
    parts = [f"<Goal> {goal.strip()}", f"<Initial State> {init_obs.strip()}"]
    parts += [f"<Step {i + 1}> {a.strip()}" for i, a in enumerate(history)]
    return " ".join(parts)


def format_input(goal: str, init_obs: str, history: Sequence[str], action: str) -> str:
    """The Can/Pay model input for candidate ``action`` after ``history`` (App. B.1 and B.2)."""
    return f"{format_history(goal, init_obs, history)} <NXT> {action.strip()}"


def discounted_returns(rewards: Sequence[float], delta: float) -> list[float]:
    """Return-to-go G_t = Σ_k δ^k r_{t+k}, clipped to [0, 1]. With the sparse reward of Sec. 6.2
    (r_T = 1, else 0) this is δ^(T-t): 1 for the last action, δ before it, δ² before that, ..."""
    out, g = [0.0] * len(rewards), 0.0
    for i in range(len(rewards) - 1, -1, -1):
        g = float(rewards[i]) + delta * g
        out[i] = min(1.0, max(0.0, g))
    return out


# ------------------------------------------------------------------------------------ reading
def expand_paths(paths: Iterable[str]) -> list[str]:
    """The datasets ``paths`` name: dataset folders and shard files as given, globs expanded to the files
    they match; a path that names nothing is an error before any reading."""
    out: list[str] = []
    for p in paths:
        if any(c in p for c in "*?["):
            out += sorted(glob.glob(p, recursive=True))
        elif os.path.exists(p):
            out.append(p)
        else:
            raise InvalidInputError(f"trajectory data not found: {p}")
    return list(dict.fromkeys(out))


def read_trajectories(paths: Iterable[str], env: str | None = None, split: str | None = None) -> list[Trajectory]:
    """Trajectories of ``env`` and ``split`` from collected datasets (``groundplan collect``'s folders or
    their shards), read by the one reader of the collect schema
    (:func:`~groundplan.datasets.store.load_trajectories`), in ``traj_id`` order."""
    from groundplan.core.errors import InvalidInputError
    from groundplan.datasets.store import load_trajectories

    paths = list(paths)
    sources = expand_paths(paths)
    if not sources:
        raise InvalidInputError(f"no trajectory data under {paths}")
    out: list[Trajectory] = []
    for source in sources:
        try:
            rows = load_trajectories(source, split=split).to_pylist()
        except FileNotFoundError as exc:
            raise InvalidInputError(f"{exc}; collect trajectories with groundplan collect") from None
        for row in rows:
            if (env is not None and row["env"] != env) or not row["actions"]:
                continue
            out.append(Trajectory(
                traj_id=row["traj_id"], env=row["env"], split=row["split"], task_id=row["task_id"],
                goal=row["goal"], init_obs=row["init_obs"], actions=tuple(row["actions"]),
                feasible=tuple(bool(x) for x in row["feasible"]), rewards=tuple(float(x) for x in row["rewards"]),
                success=bool(row["success"]),
                listed=tuple(tuple(a) for a in (row.get("admissible") or ())),
                listed_feasible=tuple(tuple(bool(x) for x in a) for a in (row.get("listed_feasible") or ())),
            ))
    out.sort(key=lambda t: t.traj_id)
    return out


def trajectory_signature(traj: Trajectory) -> str:
    """What the Can/Pay models read of a trajectory (App. B.1): its goal, initial observation and actions."""
    return visible_signature(traj.goal, traj.init_obs)


def task_groups(trajs: Sequence[Trajectory], by: str = "signature") -> list[list[Trajectory]]:
    """The trajectories grouped by task: two are of one task when they share a task id (the seeds of a
    kitchen task: same instruction and reference plan) or what the models read of them
    (:func:`trajectory_signature`: twins of different task ids; with ``by="instruction"``, the instruction
    alone, for an env split by task name, whose programs of one name are one task whatever their first
    observation). Groups keep the input order, and are ordered by their first trajectory."""
    parent = list(range(len(trajs)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first: dict[tuple[str, str], int] = {}
    for i, tr in enumerate(trajs):
        seen = instruction_key(tr.goal) if by == "instruction" else trajectory_signature(tr)
        for key in (("task", tr.task_id or tr.traj_id), ("seen", seen)):
            j = first.setdefault(key, i)
            if j != i:
                parent[find(i)] = find(j)
    groups: dict[int, list[Trajectory]] = {}
    for i, tr in enumerate(trajs):
        groups.setdefault(find(i), []).append(tr)
    return list(groups.values())


def split_trajectories(trajs: Sequence[Trajectory], val_fraction: float, seed: int,
                       by: str = "signature") -> tuple[list[Trajectory], list[Trajectory]]:
    """Train/validation split by task (Table 8: 80/20), never by trajectory, deterministic in ``seed``:
    ``val_fraction`` of the tasks (:func:`task_groups`) with all their trajectories. Split by trajectory,
    the other seeds of a validation task were training data (every kitchen task has 5 seeds with one
    instruction and plan), so validation measured recall. Empty validation when all are of one task.
    ``by``: what makes two trajectories one task (:func:`task_groups`), the env's ``capabilities.disjoint_by``."""
    groups = task_groups(trajs, by)
    random.Random(seed).shuffle(groups)
    n_val = min(len(groups) - 1, max(1, int(round(len(groups) * val_fraction)))) if len(groups) > 1 else 0
    return [t for g in groups[n_val:] for t in g], [t for g in groups[:n_val] for t in g]


def split_like(trajs: Sequence[Trajectory], validation_ids: set[str], by: str = "signature",
               source: str = "the reference model") -> tuple[list[Trajectory], list[Trajectory]]:
    """Train/validation split that follows another model's: every task group (:func:`task_groups`) holding
    one of ``validation_ids`` (the task ids that model validated on) is validation, every other group
    train. A grounding model trained this way never reads the Say model's validation tasks, so a search
    over both (the SayCan/SayCanPay planner's options) can run on those tasks; split independently, the
    two models' validation sets differ and the lineage check refuses the search. Refused when no
    trajectory is of those tasks or every one is."""
    groups = task_groups(trajs, by)
    is_val = [any((t.task_id or t.traj_id) in validation_ids for t in g) for g in groups]
    if not any(is_val):
        raise InvalidInputError(f"none of the {len(trajs)} trajectories is of a validation task of {source}: "
                                "the two models read different data")
    if all(is_val):
        raise InvalidInputError(f"every trajectory is of a validation task of {source}: nothing is left to train on")
    return ([t for g, v in zip(groups, is_val) if not v for t in g],
            [t for g, v in zip(groups, is_val) if v for t in g])


# ------------------------------------------------------------------------------------ examples
@dataclass(frozen=True)
class CanExample:
    """Eq. 8's triple after one history: texts[0] is the positive, texts[1:] the two negatives."""

    texts: tuple[str, str, str]


@dataclass(frozen=True)
class PayExample:
    text: str
    target: float


def _other(trajs: Sequence[Trajectory], i: int, rng: random.Random) -> Trajectory | None:
    """A trajectory with a different goal or initial observation than ``trajs[i]`` (Sec. 6.1's ã)."""
    me = trajs[i]
    for _ in range(20):
        j = rng.randrange(len(trajs))
        if j != i and (trajs[j].goal != me.goal or trajs[j].init_obs != me.init_obs):
            return trajs[j]
    return None


def can_examples(trajs: Sequence[Trajectory], seed: int = 0,
                 negatives: Literal["trajectories", "listed", "feasibility"] = "trajectories") -> list[CanExample]:
    """Sec. 6.1's triples [h_{t-1}, g, a_t, a_{t'≠t}, ã] for every feasible step of every trajectory.

    The history is the trajectory's own feasible prefix. A step is skipped when no negative differs
    from the positive (a one-action trajectory with nothing else to contrast). ``negatives="listed"``
    draws ã from the actions the env listed at that step, less the trajectory's own, instead of from
    another trajectory: where the env lists every action over the task's objects (EAI's VirtualHome),
    the Sec. 6.1 negatives are all sensible steps of some task, and the model never sees one that no
    object allows (a room switched on); a step with no recorded list falls back to another trajectory.

    ``negatives="feasibility"`` trains the Can on what the simulator allows, not on what the expert chose
    (SayCan's affordance is the probability that a skill succeeds from the state, Sec. 3), from steps whose
    listed actions collection labelled (``label_listed``): both negatives are listed actions that were
    infeasible there (a switch on an object without one, a grab of what cannot be held, an effect that
    already holds), and each step adds a second triple whose positive is another listed action that was
    feasible there, so that feasible but unchosen steps are not taught as infeasible. A step without labels,
    or with no infeasible listed action, falls back to ``"listed"``'s triple."""
    rng = random.Random(seed)
    out: list[CanExample] = []
    for i, tr in enumerate(trajs):
        history: list[str] = []
        infeasible_here: list[str] = []
        taken = set(tr.actions)
        for t, (action, ok) in enumerate(zip(tr.actions, tr.feasible)):
            if not ok:  # an on-policy mistake at this point: a hard negative for the next positive
                infeasible_here.append(action)
                continue
            triples = _feasibility_triples(tr, t, action, rng) if negatives == "feasibility" else []
            if not triples:
                same = [a for k, a in enumerate(tr.actions) if k != t and a != action and tr.feasible[k]]
                listed = [a for a in (tr.listed[t] if negatives != "trajectories" and t < len(tr.listed) else ())
                          if a not in taken]
                other = None if listed else _other(trajs, i, rng)
                neg_other = listed or [a for a in (other.actions if other else ()) if a != action]
                neg_same = infeasible_here[-1] if infeasible_here else (rng.choice(same) if same else None)
                neg_tilde = rng.choice(neg_other) if neg_other else None
                if neg_same is None:
                    neg_same = neg_tilde
                if neg_tilde is None:
                    neg_tilde = neg_same
                if neg_same is not None:
                    triples = [(action, neg_same, neg_tilde)]  # type: ignore[list-item]
            out += [CanExample(tuple(format_input(tr.goal, tr.init_obs, history, a) for a in triple))  # type: ignore[arg-type]
                    for triple in triples]
            history.append(action)
            infeasible_here = []
    return out


def _feasibility_triples(tr: Trajectory, t: int, action: str, rng: random.Random) -> list[tuple[str, str, str]]:
    """``can_examples``' triples of step ``t`` under ``negatives="feasibility"``: (the expert's action, two
    infeasible listed actions) and (another feasible listed action, two infeasible ones); none when the step
    has no labels or no infeasible listed action."""
    if t >= len(tr.listed_feasible) or t >= len(tr.listed) or len(tr.listed[t]) != len(tr.listed_feasible[t]):
        return []
    labelled = list(zip(tr.listed[t], tr.listed_feasible[t]))
    infeasible = [a for a, ok in labelled if not ok]
    if not infeasible:
        return []
    feasible = [a for a, ok in labelled if ok and a != action]

    def two() -> tuple[str, str]:
        pair = rng.sample(infeasible, 2) if len(infeasible) > 1 else infeasible * 2
        return pair[0], pair[1]

    triples = [(action, *two())]
    if feasible:
        triples.append((rng.choice(feasible), *two()))
    return triples


def pay_examples(trajs: Sequence[Trajectory], delta: float, seed: int = 0) -> list[PayExample]:
    """Sec. 6.2's [g, h_{t-1}, a_t, r] with r the discounted return, and one zero-reward negative from
    another trajectory per step. Only successful trajectories give positives (their returns are
    meaningful); infeasible recorded steps get target 0.

    A trajectory's final action (the env's done) taken at an earlier step ends the episode with the goal
    unmet, so its return there is 0: each such premature done is a negative too. Other trajectories'
    actions never supply it (every trajectory ends with it), and without it Pay learns p_pay(done) ≈ 1
    after any history, which made the BabyAI planners stop at the first step.

    Likewise an action the trajectory already took, and never takes again, repeated now makes no progress
    (in blocks in bowls the block is already in its bowl): a zero-return negative from the same scene.
    Without it every negative but done names objects of other scenes, so Pay never had to read the
    history, and it rated ``done`` after the first of two blocks as high as after the second."""
    rng = random.Random(seed)
    out: list[PayExample] = []
    for i, tr in enumerate(trajs):
        if not tr.success:
            continue
        keep = [k for k, ok in enumerate(tr.feasible) if ok]
        actions = [tr.actions[k] for k in keep]
        rewards = [tr.rewards[k] for k in keep]
        if rewards and max(rewards) <= 0:  # a success with no recorded reward: sparse r_T = 1
            rewards[-1] = 1.0
        returns = discounted_returns(rewards, delta)
        for t, (action, target) in enumerate(zip(actions, returns)):
            history = actions[:t]
            out.append(PayExample(format_input(tr.goal, tr.init_obs, history, action), target))
            other = _other(trajs, i, rng)
            neg = [a for a in (other.actions if other else ()) if a != action and a not in actions]
            if neg:
                out.append(PayExample(format_input(tr.goal, tr.init_obs, history, rng.choice(neg)), 0.0))
            if t < len(actions) - 1 and actions[-1] not in actions[:-1]:
                out.append(PayExample(format_input(tr.goal, tr.init_obs, history, actions[-1]), 0.0))
            repeats = [a for a in dict.fromkeys(history) if a not in actions[t:]]
            if repeats:
                out.append(PayExample(format_input(tr.goal, tr.init_obs, history, rng.choice(repeats)), 0.0))
        for k, ok in enumerate(tr.feasible):
            if not ok:
                history = [tr.actions[j] for j in range(k) if tr.feasible[j]]
                out.append(PayExample(format_input(tr.goal, tr.init_obs, history, tr.actions[k]), 0.0))
    return out


# ------------------------------------------------------------------------------------ prompts
def few_shot_prompt(trajs: Sequence[Trajectory], n: int = 3, seed: int = 0) -> str:
    """App. A.1's few-shot prompt from ``n`` successful train trajectories with distinct goals:
    ``[Goal] g`` / ``[Initial State] o0`` / ``[Step i] a_i`` blocks separated by blank lines."""
    pool = [t for t in trajs if t.success and all(t.feasible)]
    rng = random.Random(seed)
    rng.shuffle(pool)
    chosen, goals = [], set()
    for t in pool:
        if t.goal not in goals:
            chosen.append(t)
            goals.add(t.goal)
        if len(chosen) == n:
            break
    blocks = ["\n".join([f"[Goal] {t.goal}", f"[Initial State] {t.init_obs}"] +
                        [f"[Step {i + 1}] {a}" for i, a in enumerate(t.actions)]) for t in chosen]
    return "\n\n".join(blocks) + "\n"
