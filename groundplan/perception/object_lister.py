"""Object recognition feedback (IM App. A.1 "Object Recognition"): the list of objects in the scene.

Built on the simulator's segmentation mask from the top-down camera: an object is *visible* when at
least ``min_pixels`` pixels carry its body id, and *occluded* when it exists but is not visible (a
block under another block). Detector noise is configurable: each visible object is missed with
probability ``miss_rate``, and with probability ``false_positive_rate`` one object that is not in the
scene is hallucinated (a random colour/kind from the vocabulary). Draws come from the caller's
generator, so a seeded episode sees the same detections.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np


@dataclass(frozen=True)
class ObjectList:
    """What the lister reports. ``visible`` includes false positives; ``occluded`` lists objects known to
    exist (from earlier views) that no pixel shows now; ``missed`` and ``false_positives`` are the noise
    draws, kept for traces and tests (a planner must not read them)."""

    visible: tuple[str, ...]
    occluded: tuple[str, ...] = ()
    missed: tuple[str, ...] = ()
    false_positives: tuple[str, ...] = ()
    pixel_counts: dict[str, int] = field(default_factory=dict)


def pixel_counts(segmentation: np.ndarray, names: Mapping[int, str]) -> dict[str, int]:
    """Pixels per named body in a PyBullet segmentation mask (body id, or id + (link+1) << 24)."""
    seg = np.asarray(segmentation).astype(np.int64)
    body = np.where(seg >= 0, seg & ((1 << 24) - 1), -1)
    ids, counts = np.unique(body, return_counts=True)
    return {names[int(i)]: int(n) for i, n in zip(ids, counts) if int(i) in names}


def list_objects(
    segmentation: np.ndarray,
    names: Mapping[int, str],
    rng: np.random.Generator | None = None,
    miss_rate: float = 0.0,
    false_positive_rate: float = 0.0,
    vocabulary: Sequence[str] = (),
    min_pixels: int = 4,
) -> ObjectList:
    """Objects seen in ``segmentation`` (``names``: body id → object name, only objects of interest),
    in the order of ``names``, with miss/false-positive noise drawn from ``rng``."""
    if not (0.0 <= miss_rate <= 1.0 and 0.0 <= false_positive_rate <= 1.0):
        raise ValueError("miss_rate and false_positive_rate must be in [0, 1]")
    rng = rng if rng is not None else np.random.default_rng(0)
    counts = pixel_counts(segmentation, names)
    seen = [n for n in names.values() if counts.get(n, 0) >= min_pixels]
    occluded = [n for n in names.values() if n not in seen]
    visible, missed = [], []
    for n in seen:
        (missed if miss_rate > 0 and rng.random() < miss_rate else visible).append(n)
    fps: list[str] = []
    if false_positive_rate > 0 and rng.random() < false_positive_rate:
        pool = [v for v in vocabulary if v not in names.values()]
        if pool:
            fps.append(str(pool[int(rng.integers(len(pool)))]))
    return ObjectList(tuple(visible + fps), tuple(occluded), tuple(missed), tuple(fps), counts)


def describe_objects(objects: Sequence[str]) -> str:
    """IM's sim object line without the ``Scene:`` prefix: ``"There is a cyan, yellow, brown block."``
    (Listing 1), bowls after blocks: ``"There is a red, blue block and a green bowl."``."""
    blocks = [o.rsplit(" ", 1)[0] for o in objects if o.endswith(" block")]
    bowls = [o.rsplit(" ", 1)[0] for o in objects if o.endswith(" bowl")]
    parts = []
    if blocks:
        parts.append(f"a {', '.join(blocks)} block")
    if bowls:
        parts.append(f"a {', '.join(bowls)} bowl")
    if not parts:
        return "There is nothing."
    return f"There is {' and '.join(parts)}."
