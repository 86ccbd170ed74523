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
