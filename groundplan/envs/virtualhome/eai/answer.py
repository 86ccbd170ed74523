"""An LLM's answer to EAI's prompt → the action sequence it wrote.

EAI asks for a JSON object whose keys are action names and values the object lists, "the order they
appear in the json dictionary" being the execution order (the prompt's own example, ``{'FIND':['sink'],
'PUTBACK':['cup', 'sink']}``). The text is cleaned as the evaluator cleans it: a leading fence
```` ```json ```` cut, whitespace stripped, newlines removed and every ``'`` turned into ``"``. Then:

- official: ``json.loads``; a repeated key keeps its first position and its last value;
- corrected (``repeated_keys``): every (key, value) pair in order, via ``object_pairs_hook``.

The judge takes the resulting steps, so a planner that writes a sequence some other way (one step at a
time) gives the judge the steps directly, with no text to parse. An open-loop planner that plays an answer
in the closed-loop env reads it with :func:`program_skills`: the steps in EAI's script notation;
:func:`program_text` writes steps back as an answer (one JSON object, a repeated action a repeated key, as
the stored LLMs write them), the target an open-loop model is fine-tuned on.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Sequence

#: parse error kinds: not JSON (the evaluator counts it twice), and JSON but nothing to execute
INVALID_JSON = "invalid_json"
EMPTY = "empty"
#: a step in EAI's script notation (``[PUTBACK] <cup> <sink>``) and one of its arguments
_SKILL = re.compile(r"^\[([A-Z_]+)\]((?:\s*<[^<>]+>)*)\s*$")
_ARG = re.compile(r"<([^<>]+)>")


@dataclass(frozen=True)
class ParsedOutput:
    """The steps (action, arguments as written) in order, or the parse error kind."""

    steps: tuple[tuple[str, tuple[Any, ...]], ...] | None
    error: str | None = None


def clean(text: str) -> str:
    """The evaluator's cleaning, step for step."""
    if text.startswith("```json"):
        text = text[7:]
    return text.strip().replace("\n", "").replace("'", '"')


def _as_args(value: Any) -> tuple[Any, ...]:
    return tuple(value) if isinstance(value, list) else (value,)


def parse_output(text: str, repeated_keys: bool) -> ParsedOutput:
    """Parse one answer; ``repeated_keys`` keeps every key-value pair (see the module)."""
    cleaned = clean(text)
    try:
        data = json.loads(cleaned, object_pairs_hook=list) if repeated_keys else json.loads(cleaned)
    except ValueError:
        return ParsedOutput(None, INVALID_JSON)
    if isinstance(data, dict):
        pairs = list(data.items())
    elif repeated_keys and isinstance(data, list) and all(isinstance(p, tuple) for p in data):
        pairs = data
    else:  # JSON, but not an object (the evaluator would fail on it): nothing it could execute
        return ParsedOutput(None, INVALID_JSON)
    if not pairs:
        return ParsedOutput(None, EMPTY)
    return ParsedOutput(tuple((str(k), _as_args(v)) for k, v in pairs))


def skill_label(action: str, args: Sequence[Any]) -> str:
    """A step in EAI's script notation, the env's skill label: ``[PUTBACK] <cup> <sink>``."""
    return " ".join([f"[{action}]", *(f"<{a}>" for a in args)])


def parse_skill(label: str) -> tuple[str, list[str]]:
    """``"[PUTBACK] <cup> <sink>"`` -> ``("PUTBACK", ["cup", "sink"])``; ValueError when it is not a skill."""
    m = _SKILL.match(label.strip())
    if m is None:
        raise ValueError(f"not an EAI step: {label!r} (expected '[ACTION] <object> ...')")
    return m.group(1), _ARG.findall(m.group(2))


def program_skills(text: str) -> list[str]:
    """The steps of one answer, as skill labels in order (every key-value pair, as the corrected
    semantics reads them); empty when the answer does not parse."""
    parsed = parse_output(text, repeated_keys=True)
    return [skill_label(action, args) for action, args in parsed.steps or ()]


def program_text(skills: Sequence[str]) -> str:
    """The answer that names ``skills`` (labels in EAI's script notation), in the format EAI's prompt asks for:
    one JSON object, one key per step in order (a repeated action is a repeated key, as the stored LLMs write
    it; :func:`program_skills` reads every pair back). ValueError on a label that is not an EAI step."""
    pairs = []
    for label in skills:
        action, args = parse_skill(label)
        pairs.append(f"{json.dumps(action)}: {json.dumps(args)}")
    return "{" + ", ".join(pairs) + "}"


class EAIJsonAnswer:
    """EAI's JSON answer format for the open-loop planner (``answer_format: eai_json``)."""

    read = staticmethod(program_skills)
    write = staticmethod(program_text)
