"""Argmax selection: the genotype that the architecture weights rank highest.

Fourth stage of the pipeline (``nas.selection``). DARTS (Liu et al., ICLR 2019, section 2.4):
for each intermediate node, rank its incoming edges by their strongest non-``none`` weight and
keep the top 2; on each kept edge take the strongest non-``none`` op (reference
``model_search.py: genotype()``; ties go to the earlier edge / op, as Python's stable sort
does there). NAS-Bench-201 keeps every edge and takes the argmax over all ops, ``none``
included (as DrNAS and the benchmark's own DARTS code derive it). Masked-out ops never win.
"""

from __future__ import annotations

from collections.abc import Iterable

from torch import Tensor

from nas.selection.base import SelectionContext, Selector, derive_genotype, derived_genotype
from nas.strategies.base import Batch, SearchStrategy
from search_spaces.genotype import AnyGenotype
from search_spaces.space import Space


def argmax_genotype(
    space: Space, weights: dict[str, Tensor], masks: dict[str, Tensor]
) -> AnyGenotype:
    """The argmax genotype of ``weights`` (cell type -> [edges, ops]) in ``space`` (the
    derivation rule is the space family's: ``nas.selection.base.derive_genotype``)."""
    return derive_genotype(space, weights, masks)


class Argmax(Selector):
    """Argmax of the strategy's deterministic architecture weights (a DrNAS mean, a softmax)."""

    name = "argmax"
    selects_from_weights = True

    def select(
        self,
        strategy: SearchStrategy,
        val_data: Iterable[Batch] | None = None,
        *,
        context: SelectionContext | None = None,
    ) -> AnyGenotype:
        return derived_genotype(strategy)
