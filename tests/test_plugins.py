"""Plugins without forking: a package installed beside groundplan adds an env, a planner, an affordance
source and an LLM backend through the ``groundplan.plugins`` entry points, and every front end takes
them as it takes the built-ins: ``groundplan list --options``, a sweep on Ray (each actor finds the plugin
itself) and in-process, and the serve API. A broken plugin stops groundplan with a message naming it.

The example package (``tests/example_plugin``, the worked example of docs/extending.md) is installed into
the running environment with pip, the way a user installs one, not put on ``sys.path`` by hand."""
from __future__ import annotations

import importlib
import importlib.util
import json
import os
import site
import subprocess
import sys
import sysconfig
import textwrap
from importlib import metadata
from pathlib import Path

import pytest

from groundplan.config import EvalConfig
from groundplan.core import plugins
from groundplan.core.errors import PluginError
from groundplan.envs import ENVS
from groundplan.grounding import AFFORDANCES
from groundplan.llm import LLM_BACKENDS
from groundplan.planners import PLANNERS

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "tests" / "example_plugin"
DIST = "groundplan-example-plugin"
#: what the example registers, by registry
NAMES = {ENVS: "pantry", PLANNERS: "example_greedy", AFFORDANCES: "pantry_preconditions",
         LLM_BACKENDS: "example_scripted"}
PLANS = {"pantry/fetch/apple": ["pick up the apple", "go to the user", "put down the apple"],
         "pantry/fetch/cup": ["go to the shelf", "pick up the cup", "go to the user", "put down the cup"],
         "pantry/tidy/apple": ["pick up the apple", "go to the shelf", "put down the apple"],
         "pantry/tidy/cup": ["go to the shelf", "pick up the cup", "go to the counter", "put down the cup"]}
#: the CLI's output unwrapped (rich wraps at the terminal's width, 80 without one)
WIDE = {**os.environ, "COLUMNS": "1000"}


def _installed_here() -> bool:
    """Whether the example is installed, from this checkout (an editable install elsewhere would test
    other code)."""
    try:
        dist = metadata.distribution(DIST)
    except metadata.PackageNotFoundError:
        return False
    url = json.loads(dist.read_text("direct_url.json") or "{}").get("url", "")
    return url.rstrip("/") == EXAMPLE.as_uri()


@pytest.fixture(scope="session")
def example_plugin() -> metadata.Distribution:
    """The example plugin, installed (editable, without dependencies: groundplan is this checkout) when it
    is not yet; then loaded into this process, whose registries may have been looked up before it."""
    if not _installed_here():
        cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "-e", str(EXAMPLE)]
        if importlib.util.find_spec("setuptools") is not None:
            cmd.insert(4, "--no-build-isolation")  # build with the environment's setuptools: offline, faster
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            pytest.fail(f"installing {EXAMPLE} failed:\n{done.stdout}\n{done.stderr}", pytrace=False)
        site.addsitedir(sysconfig.get_paths()["purelib"])  # the new .pth (the editable finder), in this process
        importlib.invalidate_caches()
    plugins.refresh()
    return metadata.distribution(DIST)


def test_the_plugin_registers_each_part_with_its_typed_options(example_plugin):
    for registry, name in NAMES.items():
        origin = registry.origin(name)
        assert origin is not None and origin.distribution == DIST and origin.name == "pantry", (registry.kind, name)
        cls = registry.config_class(name)
        assert cls.model_config.get("extra") == "forbid" and all(f.description for f in cls.model_fields.values())
    assert ENVS.origin("kitchen") is None and PLANNERS.origin("saycan") is None  # the built-ins stay groundplan's
    assert ENVS.get("pantry").capabilities.measures == ("pantry_moves",)
    with pytest.raises(ValueError, match="unknown option 'slipery'"):
        EvalConfig.model_validate({"env": {"name": "pantry", "options": {"slipery": True}},
                                   "llm": {"backend": "example_scripted", "model": "scripted"},
                                   "planners": [{"name": "example_greedy"}]})


def test_groundplan_list_shows_the_plugin_and_its_options(example_plugin):
    out = subprocess.run(["groundplan", "list", "--options"], capture_output=True, text=True, timeout=120, env=WIDE)
    assert out.returncode == 0, out.stderr
    for name in NAMES.values():
        assert f"{name} (from {DIST})" in out.stdout, name
    assert f"pantry = groundplan_example_plugin:register ({DIST} 0.1.0)" in out.stdout
    assert f"env 'pantry' options (PantryConfig, from {DIST} 0.1.0)" in out.stdout
    for option in ("robot_start", "slippery", "min_affordance", "infeasible", "miss_logprob"):
        assert option in out.stdout, option
    assert "measure pantry_moves: moves between the pantry's places" in out.stdout


def _sweep(tmp_path: Path, executor: str) -> EvalConfig:
    return EvalConfig.model_validate({
        "name": "pantry", "env": {"name": "pantry", "options": {"robot_start": "counter"}},
        "llm": {"backend": "example_scripted", "model": "scripted"},
        "planners": [{"name": "example_greedy", "label": "Greedy", "affordance": "pantry_preconditions"},
                     {"name": "example_greedy", "label": "Greedy-LM", "options": {"normalise": True}}],
        "seeds": [0], "max_steps": 8, "output_dir": str(tmp_path / executor),
        "runtime": {"executor": executor, "workers": 2, "mlflow": False}})


def test_a_sweep_of_the_plugin_runs_on_ray_as_in_process(tmp_path, example_plugin, ray_local):
    from groundplan.pipelines.evaluate.sweep import run_sweep

    ray = run_sweep(_sweep(tmp_path, "ray"), progress=False)  # actors build every part from its name
    local = run_sweep(_sweep(tmp_path, "local"), progress=False)
    assert ray.stats["scorer"]["requests"] > 0  # the scripted backend scored in its scorer actor
    assert {(r.planner, r.episodes, r.execution_success) for r in ray.summary if r.family == "all"} == \
        {("Greedy", 4, 1.0), ("Greedy-LM", 4, 1.0)}

    def same(trace) -> dict:
        d = trace.to_dict()
        d["wall_s"] = 0
        for s in d["steps"]:
            s["timings"] = {}
        return d

    assert sorted(map(same, ray.traces), key=lambda d: d["episode_id"]) == \
        sorted(map(same, local.traces), key=lambda d: d["episode_id"])
    for trace in ray.traces:
        assert [s.chosen for s in trace.steps] == [*PLANS[trace.task_id], "done"] and trace.plan_success
        assert trace.metrics["pantry_moves"] == sum(s.startswith("go to") for s in PLANS[trace.task_id])
        grounded = trace.planner == "Greedy"
        assert all((c.affordance is not None) == grounded for s in trace.steps for c in s.candidates)
        # the source's declaration (a stand-in: the label is kept) is in every trace it grounded
        assert [o["name"] for o in trace.oracles] == (["pantry preconditions"] if grounded else [])


def test_the_plugin_is_served(example_plugin):
    from fastapi.testclient import TestClient

    from groundplan.factory import make_llm
    from groundplan.serve.config import ServeConfig
    from groundplan.serve.local import local_app

    cfg = ServeConfig(llm={"backend": "example_scripted", "model": "scripted"}, envs=[{"name": "pantry"}],
                      planners=[{"name": "example_greedy", "label": "Greedy", "affordance": "pantry_preconditions"}],
                      viewer_dir=None)
    client = TestClient(local_app(cfg, make_llm(cfg.llm)))
    r = client.post("/v1/plan", json={"task_id": "pantry/fetch/cup", "env": "pantry", "planner": "Greedy"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["plan"] == PLANS["pantry/fetch/cup"] and body["terminated"] and body["execution_success"]
    assert body["env"] == "pantry" and body["metrics"] == {"pantry_moves": 2.0}
    assert body["steps"][0]["candidates"][0]["affordance"] is not None
    # the plugin env's start-state schema guards the API as a built-in's does
    r = client.post("/v1/plan", json={"instruction": "bring me the apple", "env": "pantry", "start_state": {"apple": "moon"}})
    assert r.status_code == 422 and "start_state.apple" in r.json()["detail"], r.text


# --------------------------------------------------------------------------------- broken plugins


def _distribution(tmp_path: Path, entry_points: str, module: str = "", name: str = "broken-plugin") -> Path:
    """A distribution installed in folder ``tmp_path`` (its metadata and one module, ``<tmp>_mod``), whose
    ``groundplan.plugins`` entry points are ``entry_points``; returns the folder to put on ``sys.path``."""
    (tmp_path / f"{tmp_path.name}_mod.py").write_text(textwrap.dedent(module))
    info = tmp_path / f"{name.replace('-', '_')}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[groundplan.plugins]\n{entry_points.format(mod=f'{tmp_path.name}_mod')}\n")
    return tmp_path


def _loader(monkeypatch, folder: Path) -> plugins.PluginLoader:
    """A fresh loader over the plugins in ``folder`` alone, in place of the process's."""
    monkeypatch.syspath_prepend(str(folder))
    found = [ep for dist in metadata.distributions(path=[str(folder)]) for ep in dist.entry_points
             if ep.group == plugins.GROUP]
    loader = plugins.PluginLoader(lambda: found)
    monkeypatch.setattr(plugins, "LOADER", loader)
    return loader


@pytest.mark.parametrize("entry_point, module, words", [
    ("broken = no_such_module_xyz:register", "", "failed to import: ModuleNotFoundError: No module named "
     "'no_such_module_xyz'"),
    ("broken = {mod}:register", "def register():\n    raise RuntimeError('no config file')\n",
     "failed to register: RuntimeError: no config file"),
    ("broken = {mod}:REGISTER", "REGISTER = 3\n", "names an object of type int, not a function"),
    ("broken = {mod}:register", """
        def register():
            from groundplan.envs import ENVS
            ENVS.register_lazy("kitchen", "elsewhere:Kitchen")
        """, "env 'kitchen' is built into groundplan; a plugin cannot replace it"),
], ids=["import", "register", "not-callable", "built-in-name"])
def test_a_broken_plugin_is_named_at_every_lookup(tmp_path, monkeypatch, entry_point, module, words):
    _loader(monkeypatch, _distribution(tmp_path, entry_point, module))
    for _ in range(2):  # not only the first: nothing runs with it installed
        with pytest.raises(PluginError) as err:
            ENVS.names()
        message = str(err.value)
        assert words in message and "plugin 'broken'" in message and "broken-plugin 0.1" in message
        assert "pip uninstall broken-plugin" in message
    monkeypatch.undo()
    assert ENVS.get("kitchen").__name__ == "KitchenEnv" and ENVS.origin("kitchen") is None  # refused, not replaced


def test_unreadable_plugin_metadata_is_named_too(monkeypatch):
    def discover():
        raise ValueError("bad entry_points.txt")

    monkeypatch.setattr(plugins, "LOADER", plugins.PluginLoader(discover))
    with pytest.raises(PluginError, match="the installed plugins could not be listed .*ValueError: bad entry_points.txt"):
        PLANNERS.get("saycan")


def test_plugins_load_once_at_the_first_lookup(tmp_path, monkeypatch):
    folder = _distribution(tmp_path, "counted = {mod}:register", """
        CALLS = []
        def register():
            CALLS.append(1)
        """, name="counted-plugin")
    loader = _loader(monkeypatch, folder)
    module = importlib.import_module(f"{tmp_path.name}_mod")
    assert module.CALLS == [] and loader.loaded == []  # importing groundplan and its registries runs no plugin
    assert "kitchen" in ENVS and PLANNERS.names()
    assert module.CALLS == [1] and [p.name for p in loader.loaded] == ["counted"]
    assert loader.refresh() == [] and module.CALLS == [1]


def test_the_cli_names_a_broken_plugin_without_a_traceback(tmp_path):
    folder = _distribution(tmp_path, "broken = {mod}:register", "import no_such_dependency_xyz\n")
    out = subprocess.run(["groundplan", "list"], capture_output=True, text=True, timeout=120,
                         env={**WIDE, "PYTHONPATH": str(folder)})
    text = out.stdout + out.stderr
    assert out.returncode == 2, text
    assert "error: plugin 'broken' (entry point 'broken = " in text and "of broken-plugin 0.1)" in text
    assert "failed to import: ModuleNotFoundError: No module named 'no_such_dependency_xyz'" in text
    assert "pip uninstall broken-plugin" in text and "Traceback" not in text
