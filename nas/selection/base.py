"""The selection seam: a trained supernet and its strategy in, a genotype out.

Fourth stage of the pipeline (``nas.selection``). Selectors never live inside a strategy, so
any selector works with any strategy (DrNAS + perturbation selection included).
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from nas.registry import Registry
from nas.search.base import Batch, SearchStrategy
from search_spaces.genotype import AnyGenotype

SELECTORS: Registry[type[Selector]] = Registry("selector")


class Selector(abc.ABC):
    """Derives the discrete architecture from a supernet and its strategy."""

    name: ClassVar[str]
    #: the event the selector logs once per decision it takes (a record with ``cell_type``,
    #: ``edge`` and per-candidate ``scores``; analysis draws them as a decision trace and the
    #: run also writes them as TensorBoard text), or None for a selector that decides at once
    decision_event: ClassVar[str | None] = None

    @classmethod
    def decision_metric(cls, config: Mapping[str, Any]) -> str:
        """What the scores of the logged decisions measure, ``"acc"`` or ``"loss"``, under the
        selector's config ``config`` (its ``selection`` section)."""
        del config
        return "acc"

    @abc.abstractmethod
    def select(
        self,
        strategy: SearchStrategy,
        val_data: Iterable[Batch] | None = None,
        *,
        context: Any = None,
    ) -> AnyGenotype:
        """The genotype. ``val_data`` is the architecture split, for selectors that measure;
        ``context`` is what the search loop lends selectors that fine-tune
        (``nas.selection.perturbation.SelectionContext``)."""

    def state_dict(self) -> dict[str, Any]:
        """Progress to put in a checkpoint (a selector that takes many steps resumes from it)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the progress of ``state_dict`` (a selector without progress has none)."""
        del state
