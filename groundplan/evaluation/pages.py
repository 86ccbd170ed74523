"""Every marked block of a results page re-rendered from its data file, whatever its kind.

The kinds are the episode outcomes (:mod:`~groundplan.evaluation.outcomes`), EAI's published figures
(:mod:`~groundplan.evaluation.eai.published`), the precision check (:mod:`~groundplan.evaluation.precision`),
the point-goal navigator (:mod:`~groundplan.evaluation.saynav`), EAI's Can probe
(:mod:`~groundplan.evaluation.eai.can_probe`) and the stored LLMs' EAI scores
(:mod:`~groundplan.evaluation.eai.stored_scores`); each module gives its ``MARK`` and its
``block`` renderer, and :func:`~groundplan.evaluation.page_blocks.rewrite_blocks` is the one loop. Behind
``groundplan tables --render PAGE`` and the test that re-renders every page.
"""
from __future__ import annotations

from pathlib import Path

from groundplan.core.errors import InvalidInputError
from groundplan.evaluation import outcomes, precision, saynav
from groundplan.evaluation.eai import can_probe, published, stored_scores
from groundplan.evaluation.page_blocks import rewrite_blocks

#: the modules whose marked blocks a page may hold
KINDS = (outcomes, published, precision, saynav, can_probe, stored_scores)


def render_page(page: str | Path, write: bool = True, required: bool = True) -> str:
    """``page`` with every block of every kind (:data:`KINDS`) re-rendered; written back when ``write`` and
    changed. A page with no block is refused when ``required`` (rendering it would check nothing). Returns
    the new text."""
    page = Path(page)
    text = old = page.read_text(encoding="utf-8")
    blocks = 0
    for kind in KINDS:
        text, found = rewrite_blocks(text, page, kind.MARK, kind.block)
        blocks += found
    if required and not blocks:
        raise InvalidInputError(f"{page} holds no block to render (<!-- outcomes: FILE -->, <!-- published-table: "
                                "FILE -->, <!-- precision: FILE -->, <!-- pointnav: FILE -->, <!-- can-probe: FILE --> "
                                "or <!-- eai-scores: FILE -->)")
    if write and text != old:
        page.write_text(text, encoding="utf-8")
    return text

