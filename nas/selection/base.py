"""The selection seam: a trained supernet and its strategy in, a genotype out.

Fourth stage of the pipeline (``nas.selection``). Selectors never live inside a strategy, so
any selector works with any strategy (DrNAS + perturbation selection included).

A selector that measures or fine-tunes the supernet gets the search run's ``SelectionContext``
(implemented by one adapter, ``nas.pipeline.selection_context``); a selector declares what the
run and the analysis need to know of it (``selects_from_weights``, ``decision_event``), so
nothing outside its own files names it.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, ClassVar, Protocol

import torch

from nas.strategies.base import Batch, SearchStrategy
from search_spaces.families import family_of
from search_spaces.genotype import AnyGenotype
from search_spaces.space import Space


class SelectionContext(Protocol):
    """What the search run lends a selector that measures or fine-tunes the supernet.

    Data: ``val_batches`` yields this process's micro-batches (``micro_batches`` per global
    batch) of the architecture split in an order fixed by ``key``. Training: ``train_epoch``
    takes one epoch of the search's own steps at learning rate ``lr`` (``search_lr`` is the
    search's), ``reset_weight_optimizer`` clears its momentum. Progress: ``checkpoint`` writes
    the run's checkpoint (the selector's ``state_dict`` included), ``log`` an event of the
    run's log. Several processes: ``all_reduce_sum`` sums a tensor over them, ``broadcast``
    hands rank 0's object to all. ``epochs`` and ``steps_per_epoch`` are the search's.
    """

    @property
    def search_lr(self) -> float: ...

    @property
    def micro_batches(self) -> int: ...

    @property
    def epochs(self) -> int: ...

    @property
    def steps_per_epoch(self) -> int: ...

    def val_batches(self, *, key: int, limit: int | None) -> Iterator[Batch]: ...

    def train_epoch(
        self, *, key: int, lr: float, update_arch: bool, desc: str
    ) -> dict[str, float]: ...

    def reset_weight_optimizer(self, lr: float) -> None: ...

    def checkpoint(self) -> None: ...

    def progress(self, *, total: int, desc: str) -> Any:
        """A progress display (bar or lines, with an ETA) of ``total`` units of the selector's
        own work: ``update(1)`` after each unit, ``close()`` at the end; shown by one process."""
        ...

    def stop_point(self) -> None:
        """A unit of the selector's work is done (an architecture scored, a projection made):
        if a stop was requested (SIGTERM, Ctrl-C; on any rank), write a checkpoint and stop
        the run (``Preempted``). The selector's state must hold everything up to here, or
        redo deterministically what it does not hold."""
        ...

    def log(self, event: str, **values: Any) -> None: ...

    def all_reduce_sum(self, tensor: torch.Tensor) -> torch.Tensor: ...

    def broadcast(self, obj: Any) -> Any: ...


def derive_genotype(
    space: Space, weights: Mapping[str, torch.Tensor], masks: Mapping[str, torch.Tensor]
) -> AnyGenotype:
    """The genotype that ``weights`` (cell type -> [edges, ops]) rank highest in ``space``,
    masked-out ops excluded, by the derivation rule of the space's family
    (``search_spaces.families``)."""
    return family_of(space).derive(space, weights, masks)


def derived_genotype(strategy: SearchStrategy) -> AnyGenotype:
    """The genotype the strategy's derivation weights rank highest (``derive_genotype``):
    what the run logs every epoch, whatever the selector."""
    with torch.no_grad():
        weights = strategy.derivation_weights()
    supernet = strategy.supernet
    masks = {ct: supernet.op_mask(ct) for ct in weights}
    return derive_genotype(supernet.space, weights, masks)


class Selector(abc.ABC):
    """Derives the discrete architecture from a supernet and its strategy."""

    name: ClassVar[str]
    #: True for a selector whose genotype is a function of the final architecture weights
    #: alone, taken at once without progress of its own (argmax and its variants): a search
    #: whose selection has begun may then still be given more epochs on resume
    selects_from_weights: ClassVar[bool] = False
    #: the event the selector logs once per decision it takes (a record of what was decided,
    #: the candidates and their scores; ``nas.analysis.plots.plot_decisions`` reads DARTS-PT's
    #: form), drawn by the analysis as a decision trace and written as TensorBoard text by
    #: the run; None for a selector that decides at once
    decision_event: ClassVar[str | None] = None

    @classmethod
    def cost_budget(cls, config: Mapping[str, Any]) -> float | None:
        """The hard cost budget the selector's config ``config`` imposes on the genotype (in
        its table's unit), or None: what a Pareto figure marks as a run's target."""
        del config
        return None

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
        context: SelectionContext | None = None,
    ) -> AnyGenotype:
        """The genotype. ``val_data`` is the architecture split, for selectors that measure;
        ``context`` is what the search run lends selectors that measure or fine-tune (None
        outside a run: a notebook, a test)."""

    def state_dict(self) -> dict[str, Any]:
        """Progress to put in a checkpoint (a selector that takes many steps resumes from it)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the progress of ``state_dict`` (a selector without progress has none)."""
        del state
