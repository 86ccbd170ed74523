"""The kitchen's start state (:attr:`KitchenEnv.start_state_schema`): pins on the seeded layout of
:func:`groundplan.envs.kitchen.world.initial_state`, each optional.

Every value is a name from a closed set, so the schema alone decides validity: ``robot`` a location,
``holding`` an object (null: nothing pinned), ``placement`` objects to locations (the gripper is
``holding``'s, not a placement).
"""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from groundplan.envs.kitchen.world import LOCATION_NAMES, OBJECT_NAMES
from groundplan.envs.start_state import StartState, optional

KitchenLocation = Literal[LOCATION_NAMES]  # type: ignore[valid-type]
KitchenObjectName = Literal[OBJECT_NAMES]  # type: ignore[valid-type]


class KitchenStartState(StartState):
    """``{robot: <location>, holding: <object>, placement: {<object>: <location>}}``, each optional."""

    robot: KitchenLocation = optional("where the robot starts (default: the env's robot_start)")
    holding: KitchenObjectName | None = Field(None, description="the object in the gripper at the start")
    placement: dict[KitchenObjectName, KitchenLocation] | None = Field(
        None, description="objects pinned to locations; the others keep the seed's layout")
