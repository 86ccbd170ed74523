"""No layer imports a higher one (docs/architecture.md, "Layers"): every ``groundplan`` import in every
module, including imports inside functions, points to the same layer or a lower one."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "groundplan"

#: lowest first; a module may import its own layer and the ones before it
LAYERS = ["core", "llm", "perception", "envs", "datasets", "grounding", "planners", "config", "factory", "rollout", "actors",
          "pipelines", "serve", "plots", "cli"]


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "core"  # ``groundplan`` itself (its version) is core


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("groundplan"):
            out.append(node.module)
        elif isinstance(node, ast.Import):
            out += [a.name for a in node.names if a.name.startswith("groundplan")]
    return out


def test_no_module_imports_a_higher_layer():
    rank = {name: i for i, name in enumerate(LAYERS)}
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = "groundplan." + ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
        own = _layer(module.removesuffix(".__init__"))
        assert own in rank, f"{module} is in no layer; add its package to LAYERS"
        for target in _imports(path):
            if rank[_layer(target)] > rank[own]:
                upward.append(f"{module} -> {target}")
    assert upward == []
