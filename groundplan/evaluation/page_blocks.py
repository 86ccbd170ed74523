"""Rewriting the marked blocks of a Markdown page from the committed data files they name.

A results page holds no figure typed by hand: each table sits between an opening marker that names its data
file (relative to the page's folder) and a closing one, and a renderer rewrites what lies between them. The
episode outcomes (:mod:`groundplan.evaluation.outcomes`) and EAI's published figures
(:mod:`groundplan.evaluation.eai.published`) have markers of their own; this is the one loop both use, and a
test re-renders every page and fails on any difference.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Callable

from groundplan.core.errors import InvalidInputError


def render_blocks(page: str | Path, mark: re.Pattern[str], render: Callable[[Path, re.Match[str]], str],
                  write: bool = True, required: bool = False) -> str:
    """``page`` with every block ``mark`` matches (named groups ``open``, ``path``, ``close``) rewritten to
    ``render(data file, match)`` between its markers; written back when ``write`` and changed. A missing data
    file is an error, and so is a page with no block when ``required`` (a check of it would check nothing).
    Returns the new text."""
    page = Path(page)
    text = page.read_text(encoding="utf-8")

    def block(m: re.Match[str]) -> str:
        data = page.parent / m.group("path")
        if not data.exists():
            raise InvalidInputError(f"{page}: the data file {m.group('path')} does not exist")
        return m.group("open") + render(data, m) + m.group("close")

    new, blocks = mark.subn(block, text)
    if required and not blocks:
        raise InvalidInputError(f"{page}: no block marked as {mark.pattern[:40]!r}...")
    if write and new != text:
        page.write_text(new, encoding="utf-8")
    return new
