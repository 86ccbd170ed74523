"""``groundplan/factory.py`` is the one place that builds envs, LLM backends, affordance sources and planners
(docs/architecture.md, "Layers"): a module that instantiates one straight from its registry
(``ENVS.get(name)(**options)``) or calls ``load_llm`` skips what the factory does on the way (a planner's
``max_steps`` and display name, its affordance source), and a second construction path drifts from the
first. Reading a class's declarations without building it (``ENVS.get(name).capabilities``) is fine."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "groundplan"

#: the registries whose plugins the factory builds
REGISTRIES = {"ENVS", "PLANNERS", "AFFORDANCES", "LLM_BACKENDS"}

#: modules that may build from a registry, each with its reason
ALLOWED = {
    "factory.py": "the factory itself",
    "llm/__init__.py": "load_llm, the LLM registry's own builder, which factory.build_llm calls",
    "grounding/saycanpay.py": "the oracle Can/Pay replays candidates in a private env; grounding is below the "
                              "factory layer, so it cannot import it",
}


def _registry_get(node: ast.AST) -> bool:
    """Whether ``node`` is ``<REGISTRY>.get(...)`` (the registry by bare name or as a module attribute)."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"):
        return False
    owner = node.func.value
    name = owner.id if isinstance(owner, ast.Name) else owner.attr if isinstance(owner, ast.Attribute) else None
    return name in REGISTRIES


def builds(source: str) -> list[tuple[int, str]]:
    """(line, code) of each plugin built outside the factory in ``source``: ``<REGISTRY>.get(...)(...)``, a
    call of a name bound to ``<REGISTRY>.get(...)``, and a call of ``load_llm``."""
    tree = ast.parse(source)
    bound = {t.id for node in ast.walk(tree) if isinstance(node, ast.Assign) and _registry_get(node.value)
             for t in node.targets if isinstance(t, ast.Name)}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if (_registry_get(f) or (isinstance(f, ast.Name) and f.id in bound | {"load_llm"})
                or (isinstance(f, ast.Attribute) and f.attr == "load_llm")):
            found.append((node.lineno, ast.unparse(node)))
    return found


def test_only_the_factory_builds_plugins_from_their_registries():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel not in ALLOWED:
            found += [f"groundplan/{rel}:{line}: {code}" for line, code in builds(path.read_text(encoding="utf-8"))]
    assert found == [], "build these through groundplan.factory (make_*/build_*):\n" + "\n".join(found)


def test_every_allowed_module_still_builds_from_a_registry():
    """An exception that no longer applies is removed, so the list says only what is true."""
    stale = [rel for rel in ALLOWED if not builds((PACKAGE / rel).read_text(encoding="utf-8"))]
    assert stale == []


def test_the_scan_finds_a_build_and_leaves_a_declaration_alone():
    source = ("from groundplan import envs\n"
              "a = ENVS.get('kitchen')(seed=0)\n"
              "b = envs.PLANNERS.get('saycan')(lm=None)\n"
              "cls = AFFORDANCES.get('kitchen_value')\n"
              "c = cls()\n"
              "d = load_llm('hf', model='m')\n"
              "caps = ENVS.get('kitchen').capabilities\n"
              "schema = ENVS.get('house').start_state_schema\n")
    assert [line for line, _ in builds(source)] == [2, 3, 5, 6]
