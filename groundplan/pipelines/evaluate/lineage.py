"""Refuse, before any episode runs, a test set that its planners' models or prompts have read.

Each planner of an eval config may read tasks before the test: the few-shot examples of its prompt
(:class:`~groundplan.grounding.canpay.lineage.PromptExamples`), the train and validation tasks of
the Can/Pay models its grounding source loads
(:class:`~groundplan.grounding.canpay.lineage.TrainedModels`, whose folders carry ``lineage.json``), and
those of a fine-tuned Say model that ``llm.model`` names (its folder's ``lineage.json``).
A test task that shares what the model reads before it acts with any of them (its visible signature,
or, in an env split by task name, its instruction: ``env.capabilities.disjoint_by``) makes the row
measure recall, so :func:`check_lineage` refuses the config and names the tasks. A trained model
without a lineage is refused too: nothing could show its test set is unseen.
"""
from __future__ import annotations

import logging
from typing import Any, Collection, Iterable, Sequence

from groundplan.config import EvalConfig
from groundplan.core.errors import InvalidInputError
from groundplan.core.types import Task
from groundplan.envs import ENVS
from groundplan.envs.base import Env
from groundplan.envs.splits import instruction_key, visible_signature
from groundplan.grounding.canpay.lineage import Lineage, PromptExamples, TrainedModels, overlap, required_lineage
from groundplan.grounding.canpay.views import DEFAULT_VIEW, goal_view

log = logging.getLogger(__name__)

#: why an evaluation refuses a trained model without a lineage
UNSEEN = "nothing shows that the test set is unseen; retrain it with `groundplan train`"

#: test tasks named in a refusal before the rest are counted
_SHOWN = 8


class LineageError(InvalidInputError):
    """A test task was read by a model or prompt before the test (or a model carries no lineage)."""


def planner_lineages(cfg: EvalConfig) -> dict[str, list[Lineage]]:
    """Planner label → the lineages of what it reads before the test (prompt examples and trained
    models), each loaded once."""
    from groundplan.grounding.canpay.model import resolve_model_folder

    models: dict[tuple[str, str | None], Lineage] = {}

    def model_lineage(uri: str, tracking_uri: str | None) -> Lineage:
        if (uri, tracking_uri) not in models:
            models[uri, tracking_uri] = required_lineage(resolve_model_folder(uri, tracking_uri), f"model {uri}",
                                                         UNSEEN, LineageError)
        return models[uri, tracking_uri]

    from groundplan.config import say_model_card

    card = say_model_card(cfg.llm)  # a fine-tuned Say model: every planner reads through it
    say: list[Lineage] = []
    if card is not None:
        say.append(required_lineage(card["folder"], f"the Say model {cfg.llm.model}", UNSEEN, LineageError))
    out: dict[str, list[Lineage]] = {}
    for spec in cfg.planners:
        for variant in spec.variants():
            found: list[Lineage] = []
            options, grounding = variant.planner_options, variant.grounding_options
            if isinstance(options, PromptExamples):
                found.append(options.prompt_lineage())
            if isinstance(grounding, TrainedModels):
                found += [model_lineage(uri, grounding.models_tracking_uri())
                          for uri in grounding.trained_models().values()]
            found += say
            if found:
                out[variant.display] = found
    return out


def task_keys(cfg: EvalConfig, tasks: Iterable[Task], by: str, env: Env | None = None,
              view: str = DEFAULT_VIEW) -> list[tuple[str, str, str]]:
    """(task id, visible signature, normalised instruction) of each test task, from what the model reads:
    the env's own first observation (``metadata["signature"]`` where the env computed it when drawing
    the task from that observation; else a reset per seed, in ``env`` or, built only then, the config's).
    ``by`` is the env class's ``capabilities.disjoint_by``: an env split by task name (``"instruction"``)
    needs only the instruction. ``view`` is the lineage's goal view: a model that reads a view of the
    instruction (:mod:`~groundplan.grounding.canpay.views`) is checked on that view."""
    read = goal_view(view)
    out = []
    for t in tasks:
        goal = read(t.instruction)
        instr = instruction_key(goal)
        if by == "instruction":
            out.append((t.task_id, "", instr))
        elif "signature" in t.metadata and view == DEFAULT_VIEW:
            out.append((t.task_id, t.metadata["signature"], instr))
        else:
            if env is None:
                from groundplan.factory import make_env

                env = make_env(cfg.env)
            out += [(t.task_id, visible_signature(goal, env.reset(t, s).text), instr) for s in cfg.seeds]
    return out


def check_sweep_lineage(cfg: EvalConfig, specs: Sequence[Any], allow_roles: Collection[str] = ()) -> int:
    """:func:`check_lineage` on the tasks of a sweep's episodes (``EpisodeSpec``)."""
    return check_lineage(cfg, list({s.task.task_id: s.task for s in specs}.values()), allow_roles=allow_roles)


def check_lineage(cfg: EvalConfig, tasks: list[Task], env: Env | None = None,
                  allow_roles: Collection[str] = ()) -> int:
    """Raise :class:`LineageError` naming the test tasks that a planner's prompt or trained models read
    before the test; returns how many (planner, lineage) pairs were checked. No env is built unless a
    planner has a lineage and a task's first observation must be read by a reset (``env``, if given).
    ``allow_roles``: lineage roles a task may have. A selection sweep (``select_on``) chooses settings on a
    model's own validation tasks, which is what they were held out for, so it allows ``validation``; a train
    task or a prompt example is refused there too."""
    lineages = planner_lineages(cfg)
    if not lineages:
        return 0
    by = ENVS.get(cfg.env.name).capabilities.disjoint_by
    keys: dict[str, list[tuple[str, str, str]]] = {}  # goal view -> the test tasks' keys through it
    checked = 0
    problems: list[str] = []
    for label, found in lineages.items():
        for lineage in found:
            checked += 1
            if lineage.goal_view not in keys:
                keys[lineage.goal_view] = task_keys(cfg, tasks, by, env, lineage.goal_view)
            hits = [(tid, e) for tid, e in overlap(lineage, keys[lineage.goal_view], by) if e.role not in allow_roles]
            if hits:
                ids = list(dict.fromkeys(tid for tid, _ in hits))
                shown = ", ".join(f"{tid} (= {e.role} {e.task_id})" for tid, e in hits[:_SHOWN])
                more = f" and {len(ids) - _SHOWN} more" if len(ids) > _SHOWN else ""
                problems.append(f"planner '{label}': {len(ids)} test task(s) share their "
                                f"{'instruction' if by == 'instruction' else 'instruction and first observation'} "
                                f"with {lineage.source}: {shown}{more}")
    if problems:
        raise LineageError("the test set overlaps what the models read before the test; use the split the "
                           "models were trained on (the collection's env options) or retrain:\n  "
                           + "\n  ".join(problems))
    log.info("lineage check: %d test tasks disjoint from %d prompt/model lineages", len(tasks), checked)
    return checked
