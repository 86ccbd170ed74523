"""Registries: unknown names list the valid ones; a plugin with a missing dependency says how to install it."""
from __future__ import annotations

import pytest

from groundplan.core.errors import MissingDependencyError, UnknownNameError
from groundplan.core.registry import Registry


def test_unknown_name_lists_valid_names():
    reg: Registry = Registry("widget")
    reg.register("b")(object)
    reg.register_lazy("a", "json:dumps")
    with pytest.raises(UnknownNameError, match="unknown widget 'c'; valid widget names: a, b"):
        reg.get("c")


def test_lazy_entry_imports_on_first_use():
    import json

    reg: Registry = Registry("widget")
    reg.register_lazy("dumps", "json:dumps")
    assert reg.get("dumps") is json.dumps


def test_missing_optional_dependency_gives_install_hint():
    reg: Registry = Registry("env")
    reg.register_lazy("tabletop", "no_such_module_xyz:Env", install="pip install 'groundplan[tabletop]'")
    assert "tabletop" in reg.names()  # listing imports nothing
    with pytest.raises(MissingDependencyError, match=r"pip install 'groundplan\[tabletop\]'"):
        reg.get("tabletop")


def test_double_registration_is_an_error():
    reg: Registry = Registry("widget")
    reg.register_lazy("a", "json:dumps")
    with pytest.raises(ValueError, match="registered twice"):
        reg.register_lazy("a", "json:loads")


def test_a_plugin_name_records_its_plugin_and_may_not_take_a_taken_name():
    from groundplan.core import plugins

    reg: Registry = Registry("widget", plugins=False)
    reg.register_lazy("own", "json:dumps")
    first, second = plugins.Plugin("first", "a:register", "dist-a", "1.0"), plugins.Plugin("second", "b:register")
    token = plugins._current.set(first)
    try:
        reg.register_lazy("extra", "json:loads")
        with pytest.raises(ValueError, match="widget 'own' is built into groundplan; a plugin cannot replace it"):
            reg.register_lazy("own", "json:loads")
    finally:
        plugins._current.reset(token)
    token = plugins._current.set(second)
    try:
        with pytest.raises(ValueError, match=r"registered twice \(first by plugin 'first' .*dist-a 1.0\)"):
            reg.register_lazy("extra", "json:dumps")
    finally:
        plugins._current.reset(token)
    assert reg.origin("extra") == first and reg.origin("own") is None and reg.get("own").__name__ == "dumps"
