"""The selection seam: a trained supernet and its strategy in, a genotype out.

Fourth stage of the pipeline (``nas.selection``). Selectors never live inside a strategy, so
any selector works with any strategy (DrNAS + perturbation selection included).
"""

from __future__ import annotations

import abc
from collections.abc import Iterable
from typing import Any, ClassVar

from nas.registry import Registry
from nas.search.base import Batch, SearchStrategy
from search_spaces.genotype import AnyGenotype

SELECTORS: Registry[type[Selector]] = Registry("selector")


class Selector(abc.ABC):
    """Derives the discrete architecture from a supernet and its strategy."""

    name: ClassVar[str]

    @abc.abstractmethod
    def select(
        self, strategy: SearchStrategy, val_data: Iterable[Batch] | None = None
    ) -> AnyGenotype:
        """The genotype. ``val_data`` is the architecture split, for selectors that measure."""

    def state_dict(self) -> dict[str, Any]:
        return {}
