"""No layer imports a higher one (docs/architecture.md, "Layers"): every ``groundplan`` import in every
module, including imports inside functions, points to the same layer or a lower one."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "groundplan"

#: lowest first; a module may import its own layer and the ones before it
LAYERS = ["core", "llm", "perception", "envs", "datasets", "grounding", "planners", "config", "factory", "rollout",
          "evaluation", "viewer", "actors", "pipelines", "serve", "plots", "cli"]


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


def _module_graph() -> dict[str, set[str]]:
    """groundplan module -> the groundplan modules it imports (inside functions too); ``from pkg import
    sub`` points to the submodule when ``sub`` is one, else to the package."""
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        name = "groundplan." + ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
        modules[name.removesuffix(".__init__")] = path
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("groundplan"):
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    graph[module].add(sub if sub in modules else node.module)
            elif isinstance(node, ast.Import):
                graph[module] |= {a.name for a in node.names if a.name in modules}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles_between_modules():
    """Two modules that import each other (even inside a function, to dodge the import-time error) are
    one module split in the wrong place: whoever changes one must know the other."""
    assert _cycles(_module_graph()) == []


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
