"""Inner Monologue's sim success detector (App. A.1, "Environment Feedback: Success Detection").

"A pick-and-place execution is successful if the picked object has a 2D Euclidean distance < 4 cm
from the place object and its height is greater than the place object. If the place object is a
location (e.g., top side of the table) rather than a block or a bowl, the height requirement is not
enforced." Positions are ground-truth object poses (the paper's "ground truth + heuristics").
"""
from __future__ import annotations

import math
from typing import Sequence

#: the paper's 2-D distance threshold (metres)
SUCCESS_RADIUS = 0.04


def placed_on(
    picked: Sequence[float],
    target: Sequence[float],
    target_is_location: bool = False,
    radius: float = SUCCESS_RADIUS,
) -> bool:
    """True when ``picked`` (x, y, z) is within ``radius`` of ``target`` in 2-D and, unless the target
    is a table location, higher than it."""
    if math.dist(picked[:2], target[:2]) >= radius:
        return False
    return target_is_location or float(picked[2]) > float(target[2])


def detect_success(
    positions: dict[str, Sequence[float]],
    picked: str,
    target: str,
    locations: dict[str, Sequence[float]],
    radius: float = SUCCESS_RADIUS,
) -> bool:
    """The detector on named objects: ``target`` is an object in ``positions`` or a location name in
    ``locations`` (x, y). Unknown names are a failure (nothing to have succeeded with)."""
    if picked not in positions:
        return False
    if target in locations:
        x, y = locations[target][:2]
        return placed_on(positions[picked], (x, y, 0.0), True, radius)
    if target not in positions or target == picked:
        return False
    return placed_on(positions[picked], positions[target], False, radius)
