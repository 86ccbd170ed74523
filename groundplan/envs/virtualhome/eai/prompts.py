"""EAI's action-sequencing prompts as the package stores them, and the action vocabulary they present.

The prompt of every task is read from the package's ``helm_prompts.json`` (the exact text the 15 stored
LLMs answered, Li et al. 2024, Sec. 3.3 and App. "Action sequencing"); nothing is re-rendered here. The
vocabulary is the "Supported Actions List" block of that prompt (name, number of objects, the object
properties each slot needs, a gloss). EAI's evaluator checks outputs against a different, larger list
(``eval_utils.valid_actions``: 42 names, including actions the prompt never offers, such as
``LOOKAT_SHORT``); :func:`evaluator_actions` returns that one, since it is what decides a
hallucination.
"""
from __future__ import annotations

import ast
import functools
import json
import re
from dataclasses import dataclass

from groundplan.envs.virtualhome.simulator import package_root

_ACTION_LINE = re.compile(r"^([A-Z_]+): \((\d+), (\[.*\])\) # (.*)$")


@dataclass(frozen=True)
class PromptAction:
    """One line of the prompt's "Supported Actions List": ``SWITCHON: (1, [['HAS_SWITCH']]) # ...``."""

    name: str
    arity: int
    preconditions: tuple[tuple[str, ...], ...]
    gloss: str


def prompts_path() -> str:
    return str(package_root() / "evaluation" / "action_sequence" / "prompts" / "helm_prompts.json")


@functools.lru_cache(maxsize=1)
def stored_prompts() -> dict[str, str]:
    """Program id -> the prompt EAI gave the LLMs for it (342 entries for scene 1)."""
    with open(prompts_path(), encoding="utf-8") as f:
        return {row["identifier"]: row["llm_prompt"] for row in json.load(f)}


@functools.lru_cache(maxsize=1)
def prompt_actions() -> tuple[PromptAction, ...]:
    """The action vocabulary the prompt presents, in its order (the same block in every prompt)."""
    text = next(iter(stored_prompts().values()))
    block = text.split("Supported Actions List:\n", 1)[1].split("\n\n", 1)[0]
    out = []
    for line in block.splitlines():
        m = _ACTION_LINE.match(line.strip())
        if m is None:
            raise ValueError(f"unexpected line in EAI's action list: {line!r}")
        pre = tuple(tuple(slot) for slot in ast.literal_eval(m.group(3)))
        out.append(PromptAction(m.group(1), int(m.group(2)), pre, m.group(4).strip()))
    return tuple(out)


def evaluator_actions() -> dict[str, int]:
    """Action name -> number of objects, as EAI's evaluator checks them (hallucination and arity)."""
    from virtualhome_eval.simulation.evolving_graph.eval_utils import valid_actions

    return {name: arity for name, (_, arity) in valid_actions.items()}
