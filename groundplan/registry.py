"""Named registries, one per plugin kind (env, planner, LLM backend, affordance source).

Configs name plugins by string; a registry turns the string into the factory and, when the name is
unknown, raises an error that lists every valid name (habitat-lab / LeRobot style).
"""
from __future__ import annotations

from typing import Callable, Generic, Iterator, TypeVar

from groundplan.errors import UnknownNameError

T = TypeVar("T")


class Registry(Generic[T]):
    """A string → factory map for one plugin kind."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: ``@ENVS.register("kitchen")`` above a class or factory function."""

        def deco(obj: T) -> T:
            if name in self._items and self._items[name] is not obj:
                raise ValueError(f"{self.kind} '{name}' is registered twice")
            self._items[name] = obj
            return obj

        return deco

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            raise UnknownNameError(
                f"unknown {self.kind} '{name}'; valid {self.kind} names: {', '.join(sorted(self._items))}"
            ) from None

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._items))
