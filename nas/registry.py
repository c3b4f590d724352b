"""Name -> object registries: the datasets (``nas.data.DATASETS``) and the zero-cost proxies
(``nas.proxies.PROXIES``) are found by name here.

Search strategies, selectors and search components are not registered anywhere: their YAML
files (``configs/search``, ``configs/selection``, ``configs/components``) are the one list of
them and of their defaults, and ``nas.plugins`` builds them from a YAML's ``_target_``.
Registering the same name twice is a bug and raises at import time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """A named mapping from lower-case names to plug-ins of one kind."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: ``@PROXIES.register("naswot")``. Raises on a duplicate name."""

        def add(obj: T) -> T:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self._entries[name] = obj
            return obj

        return add

    def get(self, name: str) -> T:
        """The plug-in registered as ``name``; a one-line ValueError listing the known names."""
        try:
            return self._entries[name]
        except KeyError:
            raise ValueError(
                f"unknown {self.kind} {name!r}; expected one of {', '.join(self.names())}"
            ) from None

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._entries)
