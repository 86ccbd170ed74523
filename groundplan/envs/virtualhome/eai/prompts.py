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


_BLOCKS = {"objects": "The relevant objects in the scene are:", "state": "The current environment state is",
           "node": "Node goals are:", "edge": "Edge goals are:", "action": "Action goals are:"}
_OBJ = re.compile(r"^(.+), id: \d+, properties: \[(.*)\]$")
_EDGE = re.compile(r"^<(.+?)> \(\d+\) is (\S+) to <(.+?)> \(\d+\)$")
_NODE = re.compile(r"^(.+), states: \[(.*)\], properties:\[.*\]$")


def _lines(block: str) -> list[str]:
    return [ln.strip() for ln in block.splitlines()
            if ln.strip() and not set(ln.strip()) <= {"-"} and ln.strip() not in ("Objects in the scene:", "Nodes:", "Edges:")]


def task_view(prompt: str) -> str:
    """The task's own part of an EAI prompt, compact, for a small encoder that reads ~256 tokens
    (SayCanPay's Can/Pay, App. B.1: ``<Goal> g``). EAI's prompt is a task-independent preamble (the
    action list, the rules, a worked example) around one "Input:" block: the relevant objects with their
    properties, the initial state, the node, edge and action goals. This keeps that block alone, goals
    first (a longer input keeps its head and tail, so the goal must open it), ids and empty states
    dropped. It reads only the prompt, so it is what the planner reads, shortened; a prompt without
    EAI's blocks is returned as it is."""
    start = prompt.rfind("\nInput:\n")
    if start < 0 or any(head not in prompt[start:] for head in _BLOCKS.values()):
        return prompt
    body = prompt[start + len("\nInput:\n"):].split("\n\nPlease output", 1)[0]
    heads = sorted((body.find(h), name, h) for name, h in _BLOCKS.items())
    blocks = {name: body[pos + len(h): heads[k + 1][0] if k + 1 < len(heads) else len(body)]
              for k, (pos, name, h) in enumerate(heads)}
    goals = [f"{kind} goals: " + ("; ".join(_lines(blocks[kind])) or "none") for kind in ("node", "edge")]
    action = [ln for ln in _lines(blocks["action"]) if "|" not in ln and not ln.startswith("The following")]
    goals.append("action goals: " + ("; ".join(action) if action and "no action requirement" not in action[0] else "none"))
    objects = []
    for ln in _lines(blocks["objects"]):
        m = _OBJ.match(ln)
        if m and m.group(1) != "character":
            props = ", ".join(p.strip(" '").lower() for p in m.group(2).split(",") if p.strip(" '"))
            objects.append(f"{m.group(1)} ({props})" if props else m.group(1))
    state = []
    for ln in _lines(blocks["state"]):
        if (m := _NODE.match(ln)) and m.group(2).strip():
            state.append(f"{m.group(1)} is " + ", ".join(s.strip(" '").lower() for s in m.group(2).split(",")))
        elif m := _EDGE.match(ln):
            state.append(f"{m.group(1)} {m.group(2).lower()} {m.group(3)}")
    return ". ".join(["; ".join(goals), "objects: " + "; ".join(objects), "state: " + "; ".join(state)])
