"""The code and docs give their reasons, not pointers a reader cannot follow: no "issue N" (the tracker
they name is not part of the repository) and no DESIGN.md (a file it does not hold)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ["groundplan", "docs", "configs", "cluster", "README.md"]
TEXT = {".py", ".md", ".yaml", ".yml", ".toml", ".txt", ".json", ".html", ".js", ".sh", ".cfg", ".ini", ""}
CITATION = re.compile(r"\bissues?\s*(?:#|no\.?\s*)?\d+|DESIGN\.md", re.IGNORECASE)


def citations(text: str) -> list[tuple[int, str]]:
    """(line number, line) of each line that cites an issue number or DESIGN.md."""
    return [(n, line.strip()) for n, line in enumerate(text.splitlines(), 1) if CITATION.search(line)]


def scanned_files() -> list[Path]:
    out = []
    for name in SCANNED:
        path = ROOT / name
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        out += [p for p in files if p.suffix in TEXT and "__pycache__" not in p.parts]
    return out


@pytest.mark.parametrize("text, cited", [
    ("the rule before issue 10.", True), ("(Issue 14, item 3)", True), ("see issue #12", True),
    ("issues 9 and 10", True), ("(DESIGN.md, \"Serve\")", True),
    ("a known issue with ties", False), ("design choices", False), ("14 issues remain", False),
])
def test_the_pattern_finds_citations_and_only_them(text, cited):
    assert bool(citations(text)) == cited


def test_no_issue_numbers_or_design_md_in_code_and_docs():
    files = scanned_files()
    assert any(p.name == "README.md" for p in files) and any(p.suffix == ".py" for p in files)
    found = [f"{p.relative_to(ROOT)}:{n}: {line}" for p in files for n, line in citations(p.read_text(errors="replace"))]
    assert not found, "cite the reason itself, not an issue or DESIGN.md:\n" + "\n".join(found)
