"""The code and docs give their reasons, not pointers a reader cannot follow: no "issue N" (the tracker
they name is not part of the repository), no DESIGN.md, and no path to any other file the repository does
not hold (a notes file outside it, a script never committed)."""
from __future__ import annotations

import os
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


#: a cited file of a kind the repository holds (Markdown, Python, shell, YAML, TOML), not inside a URL or a
#: longer path: ``docs/models.md``, ``../shared/papers/NOTES.md``, ``newcomer.sh``
FILE_PATH = re.compile(r"(?<![\w/.:~$<>{}@-])((?:\.\./)*[A-Za-z0-9_][\w.-]*(?:/[\w.-]+)*\.(?:md|py|sh|ya?ml|toml))(?![\w/-])")


def cited_files(text: str) -> list[tuple[int, str]]:
    """(line number, path) of each file path cited in ``text``: a path with a folder, or a bare Markdown or
    shell file name. A bare ``x.py`` or ``x.yaml`` is left out: it names a third-party module (llama.py) or a
    file the reader writes (my_tasks.yaml) as often as a file of this repository."""
    return [(n, m.group(1)) for n, line in enumerate(text.splitlines(), 1) for m in FILE_PATH.finditer(line)
            if "/" in m.group(1) or m.group(1).endswith((".md", ".sh"))]


def repository_files() -> list[str]:
    """Every file under the checkout (relative, POSIX), without hidden folders, caches and build output."""
    out = []
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in ("__pycache__", "outputs", "node_modules")
                   and not d.endswith(".egg-info")]
        out += [Path(folder, f).relative_to(ROOT).as_posix() for f in files]
    return out


def held(path: str, citing: Path, files: list[str]) -> bool:
    """Whether the repository holds the file ``citing`` cites as ``path``: from the repository's root, from
    the citing file's folder (a relative link), or as the end of a file's path (the docs name modules
    relative to the package: ``envs/house/thor.py``). A path that leaves the repository is not held."""
    for base in (ROOT, citing.parent):
        target = (base / path).resolve()
        if target.is_relative_to(ROOT) and target.is_file():
            return True
    return not path.startswith("../") and any(f == path or f.endswith("/" + path) for f in files)


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


@pytest.mark.parametrize("text, cited", [
    ("the demo in ../shared/papers/NOTES.md): one request", ["../shared/papers/NOTES.md"]),
    ("a fresh-clone run (`newcomer.sh`, idle)", ["newcomer.sh"]), ("see docs/models.md, 'Scores'", ["docs/models.md"]),
    ("(`envs/house/thor.py`, `pip install`)", ["envs/house/thor.py"]),
    ("llama-cpp-python's llama.py zips them", []), ("--set tasks.file=my_tasks.yaml", []),
    ("https://example.org/a/NOTES.md", []), ("outputs/<name>/traces.jsonl", []),
])
def test_the_file_pattern_finds_cited_files_and_only_them(text, cited):
    assert [path for _, path in cited_files(text)] == cited


def test_held_resolves_inside_the_repository_only():
    files = repository_files()
    readme = ROOT / "README.md"
    assert "groundplan/llm/openai_backend.py" in files and not any(f.startswith(".venv/") for f in files)
    assert held("docs/models.md", readme, files) and held("envs/house/thor.py", readme, files)
    assert held("../README.md", ROOT / "docs" / "models.md", files)  # a relative link from docs/
    assert not held("../shared/papers/NOTES.md", ROOT / "groundplan" / "llm" / "openai_backend.py", files)
    assert not held("newcomer.sh", readme, files) and not held("docs/nowhere.md", readme, files)


def test_no_citation_of_a_file_the_repository_does_not_hold():
    files = repository_files()
    missing = [f"{p.relative_to(ROOT)}:{n}: {path}" for p in scanned_files()
               for n, path in cited_files(p.read_text(errors="replace")) if not held(path, p, files)]
    assert not missing, "cite what the repository holds, or say the thing itself:\n" + "\n".join(missing)

