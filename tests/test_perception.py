"""Perception: success detector (IM App. A.1), segmentation object lister with noise, scene description."""
from __future__ import annotations

import numpy as np
import pytest

from groundplan.perception.object_lister import describe_objects, list_objects
from groundplan.perception.scene_description import (
    describe_progress,
    parse_goal_state,
    parse_subgoal,
)
from groundplan.perception.success_detector import detect_success, placed_on

LOC = {"top left corner": (0.65, 0.25)}


def test_success_detector_4cm_and_higher_rule():
    target = (0.5, 0.0, 0.02)
    assert placed_on((0.5 + 0.039, 0.0, 0.06), target)
    assert not placed_on((0.5 + 0.041, 0.0, 0.06), target)  # too far in 2-D
    assert not placed_on((0.5, 0.0, 0.02), target)  # not higher than the target
    assert not placed_on((0.5, 0.0, 0.01), target)
    assert placed_on((0.5, 0.0, 0.0), target, target_is_location=True)  # no height rule for locations
    pos = {"red block": (0.66, 0.26, 0.02), "blue block": (0.3, 0.0, 0.02)}
    assert detect_success(pos, "red block", "top left corner", LOC)
    assert not detect_success(pos, "blue block", "top left corner", LOC)
    assert not detect_success(pos, "red block", "red block", LOC)
    assert not detect_success(pos, "green block", "top left corner", LOC)


def _seg():
    seg = np.zeros((20, 20), dtype=np.int32)
    seg[:5, :5] = 2
    seg[10:15, 10:15] = 3
    seg[0, 19] = 4  # one pixel: below min_pixels, counted as occluded
    return seg, {2: "red block", 3: "blue bowl", 4: "green block"}


def test_object_lister_from_segmentation():
    seg, names = _seg()
    out = list_objects(seg, names)
    assert out.visible == ("red block", "blue bowl") and out.occluded == ("green block",)
    assert out.pixel_counts["red block"] == 25


@pytest.mark.parametrize("miss,fp", [(0.2, 0.0), (0.0, 0.3), (0.1, 0.1)])
def test_object_lister_noise_rates_over_many_seeds(miss, fp):
    seg, names = _seg()
    vocab = ["red block", "blue bowl", "green block", "cyan block", "pink bowl"]
    n, misses, fps = 3000, 0, 0
    for s in range(n):
        out = list_objects(seg, names, np.random.default_rng(s), miss, fp, vocab)
        misses += len(out.missed)
        fps += len(out.false_positives)
        assert all(f not in names.values() for f in out.false_positives)
    assert abs(misses / (2 * n) - miss) < 0.03
    assert abs(fps / n - fp) < 0.03


def test_describe_objects_matches_listing_format():
    assert describe_objects(["cyan block", "yellow block", "brown block"]) == "There is a cyan, yellow, brown block."
    assert describe_objects(["red block", "green bowl", "blue bowl"]) == "There is a red block and a green, blue bowl."


def test_scene_description_of_achieved_subgoals():
    known = ["cyan block", "yellow block", "top left corner"]
    goals = parse_goal_state('Goal state is ["Cyan block is on the top left corner.", "Yellow block is on the top '
                             'left corner.", "Purple block is on the moon."].', known)
    assert [g.text for g in goals] == ["Cyan block is on the top left corner.", "Yellow block is on the top left corner."]
    pos = {"cyan block": (0.65, 0.25, 0.02), "yellow block": (0.3, 0.0, 0.02)}
    assert describe_progress(goals, pos, LOC) == 'You have completed ["Cyan block is on the top left corner."]'
    assert parse_subgoal("Red block is on top of the blue block.").target == "blue block"
