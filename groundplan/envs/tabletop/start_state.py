"""Start states of the PyBullet tabletop envs: Inner Monologue's tabletop, SayCanPay's Tower of Hanoi and
its blocks in bowls (each env's ``start_state_schema``).

- :class:`TabletopStartState` is what a task file gives (``blocks``, ``bowls``, ``xy`` or
  ``layout_seed``); names are colours in any case, with or without " block"/" bowl", so the colours,
  ranges and overlaps are then checked by the goal language (:mod:`.goal_language`), with the
  messages task files have always had.
- :class:`HanoiStartState` and :class:`BlocksBowlsStartState` are the states those envs' own tasks carry
  (they have no goal language); their validators check what ``reset`` and the symbolic rules assume, so
  any state the schema accepts is one the env can build.
"""
from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, StrictFloat, StrictStr, ValidationInfo, field_validator

from groundplan.core.validation import json_int
from groundplan.envs.splits import SayCanPaySplit
from groundplan.envs.start_state import StartState, optional
from groundplan.envs.tabletop.world import COLOUR_NAMES, MAX_BLOCKS, MAX_BOWLS, X_RANGE, Y_RANGE

Colour = Literal[COLOUR_NAMES]  # type: ignore[valid-type]
Point = Annotated[list[StrictFloat], Field(min_length=2, max_length=2, description="[x, y] in metres")]
#: the seed range every layout sampler here takes
Seed = json_int(ge=0, le=2**63 - 1)


class TabletopStartState(StartState):
    """The scene: ``blocks`` and ``bowls`` by colour or name, placed by ``xy`` or by ``layout_seed``."""

    blocks: list[StrictStr] = Field(min_length=1, max_length=MAX_BLOCKS,
                                    description="blocks by colour or name (e.g. red, 'red block')")
    bowls: list[StrictStr] = Field(default_factory=list, max_length=MAX_BOWLS, description="bowls by colour or name")
    xy: dict[StrictStr, Point] = optional("each object's [x, y] on the table (metres); default: sampled from "
                                          "layout_seed, objects 15 cm apart")
    layout_seed: Seed = optional("seed of the sampled layout (default 0)")


def _distinct(names: list[str], what: str) -> list[str]:
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"{what} repeat {repeated}")
    return names


# ------------------------------------------------------------------------------------ Tower of Hanoi
#: most disks (one radius each in :data:`groundplan.envs.tabletop.hanoi.DISK_RADII`) and the rods
MAX_DISKS, RODS = 4, 3


def _one_rod_per_colour(schema: dict[str, Any]) -> None:
    """The JSON schema says what the validators check: colours distinct, and as many rods as colours (one
    ``anyOf`` branch per disk count, as JSON Schema cannot equate two arrays' lengths)."""
    schema["properties"]["colours"]["uniqueItems"] = True
    schema["anyOf"] = [{"properties": {"colours": {"minItems": n, "maxItems": n}, "rods": {"minItems": n, "maxItems": n}}}
                       for n in range(1, MAX_DISKS + 1)]


class HanoiStartState(StartState):
    """Disks smallest first: ``colours[i]`` is disk i's colour, ``rods[i]`` the rod (0-2) it starts on."""

    model_config = ConfigDict(json_schema_extra=_one_rod_per_colour)

    colours: list[Colour] = Field(min_length=1, max_length=MAX_DISKS, description="each disk's colour, smallest first")
    rods: list[json_int(ge=0, le=RODS - 1)] = Field(
        min_length=1, max_length=MAX_DISKS, description="each disk's rod (0-based), in the order of colours")
    split: SayCanPaySplit = optional("the split the task was drawn from (informational)")

    @field_validator("colours")
    @classmethod
    def _distinct_colours(cls, colours: list[str]) -> list[str]:
        return _distinct(colours, "colours")

    @field_validator("rods")
    @classmethod
    def _one_rod_per_disk(cls, rods: list[int], info: ValidationInfo) -> list[int]:
        colours = info.data.get("colours")
        if colours is not None and len(rods) != len(colours):
            raise ValueError(f"gives {len(rods)} rods for {len(colours)} disks (one rod per colour)")
        return rods


# ------------------------------------------------------------------------------------ blocks in bowls
_COLOURS = "|".join(COLOUR_NAMES)
BlockName = Annotated[StrictStr, Field(pattern=rf"^({_COLOURS}) block [1-9]$")]
BowlName = Annotated[StrictStr, Field(pattern=rf"^({_COLOURS}) bowl [1-9]$")]
#: the paper's largest scenes (SayCanPay Sec. 6); fewer fit the table with the spacing below
MAX_BB_BLOCKS, MAX_BB_BOWLS = 6, 5
#: centre distances the env's own scenes keep (metres): blocks apart, a block from a bowl, bowls apart
BLOCK_GAP, BLOCK_BOWL_GAP, BOWL_GAP = 0.08, 0.13, 0.19


class BlocksBowlsStartState(StartState):
    """``blocks`` ("<colour> block <i>") and ``bowls`` ("<colour> bowl <j>") on the table at ``xy``; every
    block starts on the table, not in a bowl (what the env's rules assume)."""

    blocks: list[BlockName] = Field(min_length=1, max_length=MAX_BB_BLOCKS, description="e.g. 'yellow block 1'")
    bowls: list[BowlName] = Field(max_length=MAX_BB_BOWLS, description="e.g. 'gray bowl 2'")
    xy: dict[StrictStr, Point] = Field(description="[x, y] (metres) of every block and bowl")
    split: SayCanPaySplit = optional("the split the task was drawn from (informational)")

    @field_validator("blocks", "bowls")
    @classmethod
    def _distinct_names(cls, names: list[str], info: ValidationInfo) -> list[str]:
        return _distinct(names, str(info.field_name))

    @field_validator("xy")
    @classmethod
    def _placed(cls, xy: dict[str, list[float]], info: ValidationInfo) -> dict[str, list[float]]:
        blocks, bowls = info.data.get("blocks"), info.data.get("bowls")
        if blocks is None or bowls is None:
            return xy  # their own errors are reported
        if set(xy) != set(blocks) | set(bowls):
            raise ValueError(f"must give [x, y] for exactly the blocks and bowls {sorted(set(blocks) | set(bowls))}")
        for name, (x, y) in xy.items():
            if not (X_RANGE[0] <= x <= X_RANGE[1] and Y_RANGE[0] <= y <= Y_RANGE[1]):
                raise ValueError(f"{name} at [{x}, {y}] is off the table (x in {X_RANGE}, y in {Y_RANGE})")
        names = list(xy)
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                bowls_in = (a in bowls) + (b in bowls)
                gap = (BLOCK_GAP, BLOCK_BOWL_GAP, BOWL_GAP)[bowls_in]
                if math.dist(xy[a], xy[b]) < gap:
                    raise ValueError(f"{a} and {b} are closer than {gap * 100:.0f} cm")
        return xy

