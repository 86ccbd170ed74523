"""Affordance calibration from SayCan, Appendix C.1 ("Policies and affordance functions").

SayCan's learned value functions are not probabilities as they come, so the paper maps each skill
family's raw signal to p(c_π | s, ℓ_π) with a clamped linear normalisation whose constants were
"determined empirically":

* pick:  p = clamp((v - v_min) / (v_max - v_min), 0, 1) with v_min = 0.2, v_max = 0.5;
* go to: p = clamp((d_max - d) / (d_max - d_min), 0, 1) with d in metres, d_max = 100, d_min = 0;
* place: p = 1.0 ("we assume place is always possible");
* terminate ("done"): p = 0.1, so planning ends when no other skill is feasible.

The paper also caps the affordance of a skill "that has already been completed and the reward
received" (e.g. navigating to the table the robot is already in front of) but gives no value; this
project's default cap is :data:`DEFAULT_COMPLETED_CAP` and every user of it exposes it as an option.
"""
from __future__ import annotations

#: C.1 pick calibration: the value at which a pick is judged impossible / certain
PICK_V_MIN: float = 0.2
PICK_V_MAX: float = 0.5
#: C.1 go-to calibration, metres
GOTO_D_MIN: float = 0.0
GOTO_D_MAX: float = 100.0
#: C.1 place affordance ("we assume place is always possible")
PLACE_AFFORDANCE: float = 1.0
#: C.1 terminate affordance ("a small affordance value")
TERMINATE_AFFORDANCE: float = 0.1
#: cap for skills already completed; the paper (Sec. 5.1, C.1) uses a cap but does not give its value
DEFAULT_COMPLETED_CAP: float = 0.05


def clamp(x: float, lo: float = 0.0, hi: float = 1.0) -> float:
    """``min(max(x, lo), hi)``: the paper's ``clamp(·, 0, 1)``."""
    if lo > hi:
        raise ValueError(f"clamp bounds are reversed: lo={lo} > hi={hi}")
    return float(min(max(x, lo), hi))


def normalize_value(v: float, v_min: float = PICK_V_MIN, v_max: float = PICK_V_MAX) -> float:
    """Pick affordance from a value estimate (C.1): ``clamp((v - v_min) / (v_max - v_min), 0, 1)``.

    With the paper's constants v = 0.35 gives 0.5, v ≤ 0.2 gives 0 and v ≥ 0.5 gives 1.
    """
    if v_max <= v_min:
        raise ValueError(f"v_max ({v_max}) must be greater than v_min ({v_min})")
    return clamp((v - v_min) / (v_max - v_min))


def distance_affordance(d: float, d_max: float = GOTO_D_MAX, d_min: float = GOTO_D_MIN) -> float:
    """Go-to affordance from a distance in metres (C.1): ``clamp((d_max - d) / (d_max - d_min), 0, 1)``.

    With the paper's constants d = 0 gives 1, d = 50 m gives 0.5 and d ≥ 100 m gives 0.
    """
    if d_max <= d_min:
        raise ValueError(f"d_max ({d_max}) must be greater than d_min ({d_min})")
    if d < 0:
        raise ValueError(f"a distance cannot be negative, got {d}")
    return clamp((d_max - d) / (d_max - d_min))


def cap_completed(p: float, cap: float = DEFAULT_COMPLETED_CAP) -> float:
    """Cap the affordance of a skill already completed so it is not repeated (Sec. 5.1, C.1)."""
    return min(float(p), float(cap))
