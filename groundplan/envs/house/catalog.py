"""Room types, furniture (large objects) and small objects with room-type priors for the procedural
house generator.

SayNav (Sec. 3.3) splits objects into *large* objects, landmarks visible from far away, and *small*
objects that are found "near" a large one; the LLM's common sense is only useful if the simulated
houses follow the same everyday priors (a pillow on a bed, a spoon on a counter). The tables below
encode those priors: each room type lists its furniture with a probability of appearing, and each
piece of furniture lists the small objects that may be placed near it. Names follow AI2-THOR's
object types so the same planner prompts work on ProcTHOR houses.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Furniture:
    """A large-object category: footprint in 0.25 m cells, chance to appear, small objects near it."""

    name: str
    size: tuple[int, int]
    prob: float
    small: tuple[str, ...]


#: room type -> (furniture, ...); prob 1.0 marks the defining pieces (a bedroom always has a bed)
ROOM_FURNITURE: dict[str, tuple[Furniture, ...]] = {
    "Kitchen": (
        Furniture("CounterTop", (8, 3), 1.0, ("Apple", "Bread", "Knife", "Toaster", "CoffeeMachine", "Kettle")),
        Furniture("Fridge", (3, 3), 1.0, ("Egg", "Lettuce", "Tomato")),
        Furniture("Stove", (3, 3), 0.9, ("Pot", "Pan", "Kettle")),
        Furniture("Sink", (3, 2), 0.8, ("DishSponge", "SoapBottle", "Mug")),
        Furniture("DiningTable", (5, 4), 0.6, ("Bowl", "Spoon", "Fork", "Plate", "SaltShaker", "Cup")),
    ),
    "LivingRoom": (
        Furniture("Sofa", (8, 3), 1.0, ("Pillow", "RemoteControl", "Newspaper")),
        Furniture("TVStand", (6, 2), 0.9, ("Television", "RemoteControl", "Vase")),
        Furniture("CoffeeTable", (4, 3), 0.8, ("RemoteControl", "Newspaper", "Book", "Laptop", "Vase")),
        Furniture("ArmChair", (3, 3), 0.6, ("Pillow", "Book")),
        Furniture("Shelf", (5, 2), 0.5, ("Book", "Statue", "Vase", "HousePlant")),
    ),
    "Bedroom": (
        Furniture("Bed", (7, 8), 1.0, ("Pillow", "TeddyBear", "CellPhone", "Laptop")),
        Furniture("Nightstand", (2, 2), 0.9, ("AlarmClock", "DeskLamp", "CellPhone", "Book")),
        Furniture("Dresser", (5, 2), 0.7, ("AlarmClock", "Watch", "KeyChain", "Perfume")),
        Furniture("Wardrobe", (5, 3), 0.4, ("Hanger", "Hat")),
        Furniture("Desk", (5, 3), 0.4, ("Laptop", "Pen", "Pencil", "CellPhone", "DeskLamp")),
    ),
    "Bathroom": (
        Furniture("Toilet", (2, 3), 1.0, ("ToiletPaper", "SprayBottle", "Plunger")),
        Furniture("BathroomSink", (3, 2), 1.0, ("SoapBar", "Toothbrush", "HandTowel", "SoapBottle")),
        Furniture("Bathtub", (7, 3), 0.6, ("Towel", "SoapBar", "Sponge")),
        Furniture("Cabinet", (3, 2), 0.4, ("Towel", "ToiletPaper", "SprayBottle")),
    ),
    "Office": (
        Furniture("Desk", (6, 3), 1.0, ("Laptop", "Pen", "Pencil", "CellPhone", "DeskLamp", "Stapler")),
        Furniture("Bookshelf", (6, 2), 0.9, ("Book", "Statue", "Vase")),
        Furniture("FilingCabinet", (2, 3), 0.6, ("Stapler", "Paper", "CreditCard")),
        Furniture("ArmChair", (3, 3), 0.4, ("Pillow", "Book")),
    ),
    "DiningRoom": (
        Furniture("DiningTable", (7, 4), 1.0, ("Plate", "Fork", "Spoon", "Cup", "Candle", "Bowl")),
        Furniture("Sideboard", (6, 2), 0.8, ("Vase", "Candle", "WineBottle")),
        Furniture("Shelf", (5, 2), 0.4, ("Book", "Vase", "HousePlant")),
    ),
}

ROOM_TYPES: tuple[str, ...] = tuple(ROOM_FURNITURE)
#: chance of each extra room type once the first ones are fixed (living room, kitchen, bedroom, bathroom)
EXTRA_ROOM_WEIGHTS: dict[str, float] = {"Bedroom": 0.35, "Bathroom": 0.1, "Office": 0.25, "DiningRoom": 0.2,
                                        "LivingRoom": 0.05, "Kitchen": 0.05}
LARGE_OBJECTS: tuple[str, ...] = tuple(sorted({f.name for fs in ROOM_FURNITURE.values() for f in fs}))
SMALL_OBJECTS: tuple[str, ...] = tuple(sorted({s for fs in ROOM_FURNITURE.values() for f in fs for s in f.small}))
