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
from typing import Callable, Iterable, Sequence

from groundplan.core.errors import InvalidInputError


Render = Callable[[Path, re.Match[str]], str]


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """A Markdown table's lines: the header, its rule, one line per row of cells."""
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(r) + " |" for r in rows)]


def rewrite_blocks(text: str, page: Path, mark: re.Pattern[str], render: Render) -> tuple[str, int]:
    """``text`` (of ``page``) with every block ``mark`` matches (named groups ``open``, ``path``, ``close``)
    rewritten to ``render(data file, match)`` between its markers, and how many there were. A missing data
    file is an error."""
    def block(m: re.Match[str]) -> str:
        data = page.parent / m.group("path")
        if not data.exists():
            raise InvalidInputError(f"{page}: the data file {m.group('path')} does not exist")
        return m.group("open") + render(data, m) + m.group("close")

    return mark.subn(block, text)


def render_blocks(page: str | Path, mark: re.Pattern[str], render: Render, write: bool = True,
                  required: bool = False) -> str:
    """``page`` with its blocks of one kind re-rendered (:func:`rewrite_blocks`); written back when ``write``
    and changed. A page with no block is an error when ``required`` (a check of it would check nothing).
    Returns the new text."""
    page = Path(page)
    text = page.read_text(encoding="utf-8")
    new, blocks = rewrite_blocks(text, page, mark, render)
    if required and not blocks:
        raise InvalidInputError(f"{page}: no block marked as {mark.pattern[:40]!r}...")
    if write and new != text:
        page.write_text(new, encoding="utf-8")
    return new

