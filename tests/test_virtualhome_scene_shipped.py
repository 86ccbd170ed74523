"""The VirtualHome facts shipped with the package (``groundplan/envs/virtualhome/derived/``, read instead of
~25 s of simulator runs on a new machine) equal a fresh derivation from the installed dataset."""
from __future__ import annotations

import json

import pytest


@pytest.mark.slow
def test_shipped_scene_facts_equal_a_fresh_derivation():
    pytest.importorskip("virtualhome_eval")
    from groundplan.envs.virtualhome import scene

    fresh = scene.derive_all()
    assert fresh, "nothing derived"
    for name, value in fresh.items():
        assert json.loads((scene.SHIPPED / name).read_text()) == value, name
