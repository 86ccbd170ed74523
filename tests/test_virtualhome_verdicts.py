"""VirtualHome judged like its simulator (its preconditions, not a label list, decide a step): lines from
the dataset's own programs, followed by steps that the old label-set check refused or that repeat an
effect that already holds."""
from __future__ import annotations

import pytest

pytest.importorskip("virtualhome_eval")

from groundplan.envs.virtualhome import dataset
from groundplan.envs.virtualhome.actions import ParseError
from groundplan.envs.virtualhome.env import VirtualHomeEnv
from groundplan.envs.virtualhome.scene import scene_action_space


@pytest.fixture(scope="module")
def programs():
    return {p.program_id: p for p in dataset.load_programs()}


@pytest.fixture(scope="module")
def env():
    return VirtualHomeEnv()


def _replay(env, program, extra, upto=None):
    """Run the program's own lines (the first ``upto``; all must execute), then ``extra``; the
    StepResults of ``extra``."""
    env.reset(env._task(program), 0)
    own = env.run_script(program.lines[:upto])
    assert all(r.success for r in own), [r.feedback for r in own if not r.success]
    return env.run_script(extra)


def test_steps_the_simulator_runs_are_not_refused_before_it_sees_them(env, programs):
    space = scene_action_space()
    # 71_2 "Browse internet" grabs the keyboard and works at the computer
    browse = programs["71_2"]
    assert "[GRAB] <keyboard> (1.415)" in browse.lines
    [put] = _replay(env, browse, ["[PUTBACK] <keyboard> (1.415) <computer> (1.417)"])
    assert put.success and "redundant" not in put.info, put.feedback
    assert "put keyboard on computer" not in space  # the labels for translation are unchanged
    with pytest.raises(ParseError, match="not admissible"):
        space.parse("[PUTBACK] <keyboard> (1) <computer> (1)")
    # 562_1 "Wash hands", after its 6th line, holds the water: it can be put into the hands
    wash = programs["562_1"]
    assert wash.lines[5] == "[GRAB] <water> (1.1000)"
    [putin] = _replay(env, wash, ["[PUTIN] <water> (1.1000) <hands_both> (1.1001)"], upto=6)
    assert putin.success, putin.feedback
    # the character is an object the simulator can walk to
    light = programs["222_1"]
    [walk] = _replay(env, light, ["walk to character"])
    assert walk.success, walk.feedback
    # a step the simulator refuses is still a failure, with its reason
    [far] = _replay(env, light, ["[GRAB] <keyboard> (1.415)"])
    assert not far.success and "not close" in far.feedback and far.info["error"] == "precondition"
    # an object that is nowhere in the scene never reaches the simulator
    assert not env.execute("walk to kitchen").success


@pytest.mark.parametrize("rule", ["continue", "fail"])
def test_redundant_steps_follow_the_configured_rule(programs, rule):
    env = VirtualHomeEnv(redundant_steps=rule)
    light = programs["222_1"]  # Turn on light: ... [SWITCHON] <light> (1.411)
    extra = [light.lines[-1], "stand up", "walk to light"]  # already on; not sitting; a real step
    switch, stand, walk = _replay(env, light, extra)
    assert walk.success and "redundant" not in walk.info
    for result, why in [(switch, "is not off"), (stand, "is not sitting")]:
        assert why in result.feedback
        if rule == "continue":
            assert result.success and result.info["redundant"] is True
            assert "redundant" in result.feedback
        else:
            assert not result.success and result.info["error"] == "redundant"
    assert env.check_goal().success  # a redundant step changes nothing
    # the already-grabbed case from 71_2 (holding the mouse and the keyboard)
    browse = programs["71_2"]
    [again] = _replay(env, browse, ["[GRAB] <mouse> (1.413)"])
    assert "already grabbed" in again.feedback or "holding" in again.feedback
    assert again.success is (rule == "continue")


def test_default_rule_is_continue():
    assert VirtualHomeEnv().config.redundant_steps == "continue"
