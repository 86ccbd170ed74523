"""The prompt files a planner reads: shipped under ``groundplan/planners/prompts`` or a ``.txt`` path.

Kept apart from the planners that use them so that the planner base (which fingerprints a prompt file's
text for a fine-tuned Say model) and every planner read prompts through one function.
"""
from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path

from groundplan.core.errors import InvalidInputError


def available_prompts() -> list[str]:
    """Names of the prompt files shipped in ``groundplan/planners/prompts`` (without ``.txt``)."""
    folder = resources.files("groundplan.planners").joinpath("prompts")
    return sorted(p.name[: -len(".txt")] for p in folder.iterdir() if p.name.endswith(".txt"))


@functools.lru_cache(maxsize=None)
def load_prompt(name: str) -> str:
    """The few-shot text of a prompt: a shipped prompt by name (e.g. ``"saycan_kitchen"``, Listing 1),
    or a path to a ``.txt`` file of your own. The text always ends with a newline."""
    if name.endswith(".txt") and Path(name).is_file():
        text = Path(name).read_text(encoding="utf-8")
    else:
        resource = resources.files("groundplan.planners").joinpath("prompts", f"{name}.txt")
        if not resource.is_file():
            raise InvalidInputError(
                f"unknown prompt '{name}'; shipped prompts: {', '.join(available_prompts())} "
                "(or give the path of a .txt file)"
            )
        text = resource.read_text(encoding="utf-8")
    if not text.strip():
        raise InvalidInputError(f"the prompt '{name}' is empty")
    return text if text.endswith("\n") else text + "\n"
