"""Top-down map of a house: rooms by type, walls, doors, furniture, small objects, targets, the
agent's path and (optionally) the scene-graph nodes a planner built (SayNav Fig. 7's view)."""
from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np
from PIL import Image, ImageDraw

from groundplan.envs.house.layout import CELL, DOOR, FURNITURE, WALL, House

ROOM_COLOURS = {"Kitchen": (255, 236, 200), "LivingRoom": (214, 236, 255), "Bedroom": (230, 220, 255),
                "Bathroom": (205, 245, 240), "Office": (235, 245, 205), "DiningRoom": (255, 222, 222)}


def render_topdown(house: House, path: Sequence[tuple[float, float]] = (), targets: Iterable[int] = (),
                   found: Iterable[int] = (), graph_nodes: Sequence[tuple[str, float, float]] = (),
                   agent: tuple[float, float, float] | None = None, px: int = 10) -> np.ndarray:
    """An HxWx3 uint8 image; x runs right, z runs down. ``graph_nodes`` are (kind, x, z) with kind
    "large", "small", "door" or "room"; ``targets``/``found`` are object ids."""
    W, H = house.grid.shape
    img = np.full((H * px, W * px, 3), 255, np.uint8)
    for room in house.rooms:
        i0, j0, i1, j1 = room.bounds
        img[j0 * px:j1 * px, i0 * px:i1 * px] = ROOM_COLOURS.get(room.type, (240, 240, 240))
    colour = {WALL: (60, 60, 60), FURNITURE: (160, 140, 120), DOOR: (250, 170, 40)}
    for value, rgb in colour.items():
        ii, jj = np.nonzero(house.grid == value)
        for i, j in zip(ii, jj):
            img[j * px:(j + 1) * px, i * px:(i + 1) * px] = rgb
    im = Image.fromarray(img)
    draw = ImageDraw.Draw(im)

    def to_px(x: float, z: float) -> tuple[float, float]:
        return (x / CELL * px, z / CELL * px)

    for room in house.rooms:
        i0, j0, _, _ = room.bounds
        draw.text((i0 * px + 3, j0 * px + 2), room.name, fill=(40, 40, 40))
    for obj in house.objects:
        if obj.large:
            x, z = to_px(*obj.position)
            draw.text((x - 3 * len(obj.category), z - 5), obj.category[:10], fill=(70, 50, 30))
    targets, found = set(targets), set(found)
    for obj in house.small_objects():
        x, z = to_px(*obj.position)
        r = px * 0.3
        if obj.obj_id in targets:
            fill = (0, 170, 0) if obj.obj_id in found else (220, 0, 0)
            draw.rectangle((x - 2 * r, z - 2 * r, x + 2 * r, z + 2 * r), fill=fill, outline=(0, 0, 0))
            draw.text((x + 2 * r + 1, z - 5), obj.category, fill=fill)
        else:
            draw.ellipse((x - r, z - r, x + r, z + r), fill=(120, 120, 120))
    node_colour = {"large": (30, 90, 200), "small": (200, 30, 160), "door": (250, 120, 0), "room": (0, 0, 0)}
    for kind, x, z in graph_nodes:
        cx, cz = to_px(x, z)
        r = px * (0.55 if kind == "room" else 0.4)
        draw.ellipse((cx - r, cz - r, cx + r, cz + r), outline=node_colour.get(kind, (0, 0, 0)), width=2)
    if len(path) > 1:
        draw.line([to_px(x, z) for x, z in path], fill=(0, 60, 255), width=max(2, px // 4))
    if path:
        sx, sz = to_px(*path[0])
        draw.rectangle((sx - px / 2, sz - px / 2, sx + px / 2, sz + px / 2), outline=(0, 60, 255), width=2)
    if agent is not None:
        ax, az, heading = agent
        cx, cz = to_px(ax, az)
        rad = np.radians(heading)
        draw.ellipse((cx - px / 2, cz - px / 2, cx + px / 2, cz + px / 2), fill=(0, 60, 255))
        draw.line((cx, cz, cx + px * np.cos(rad), cz + px * np.sin(rad)), fill=(255, 255, 255), width=2)
    return np.asarray(im)


def save_png(img: np.ndarray, path: str) -> None:
    Image.fromarray(img).save(path)
