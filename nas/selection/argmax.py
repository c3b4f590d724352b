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
from typing import Any

import torch
from torch import Tensor

from nas.search.base import Batch, SearchStrategy
from nas.selection.base import SELECTORS, Selector
from search_spaces.genotype import AnyGenotype, DartsGenotype, NB201Genotype
from search_spaces.space import CellSpace, Space


def _darts_cell(cell: CellSpace, w_EO: Tensor, mask_EO: Tensor) -> list[tuple[str, int]]:
    w = w_EO.detach().float().cpu().masked_fill(~mask_EO.cpu(), float("-inf")).tolist()
    pairs: list[tuple[str, int]] = []
    for node in cell.intermediate_nodes:
        edges = cell.edges_into(node)

        def best(e_index: int, edge_ops: tuple[str, ...]) -> int:
            k_best = -1
            for k, op in enumerate(edge_ops):
                if op != "none" and (k_best < 0 or w[e_index][k] > w[e_index][k_best]):
                    k_best = k
            return k_best

        strength = {e.index: w[e.index][best(e.index, e.ops)] for e in edges}
        assert cell.inputs_per_node is not None
        kept = sorted(edges, key=lambda e: -strength[e.index])[: cell.inputs_per_node]
        pairs.extend((e.ops[best(e.index, e.ops)], e.src) for e in kept)
    return pairs


def argmax_genotype(
    space: Space, weights: dict[str, Tensor], masks: dict[str, Tensor]
) -> AnyGenotype:
    """The argmax genotype of ``weights`` (cell type -> [edges, ops]) in ``space``."""
    if space.family == "nb201":
        cell = space.cells["cell"]
        w = weights["cell"].detach().float().cpu().masked_fill(~masks["cell"].cpu(), float("-inf"))
        ops = [cell.edges[e].ops[int(k)] for e, k in enumerate(w.argmax(-1).tolist())]
        return NB201Genotype.from_ops(ops)
    normal = _darts_cell(space.cells["normal"], weights["normal"], masks["normal"])
    reduce = _darts_cell(space.cells["reduce"], weights["reduce"], masks["reduce"])
    steps = len(space.cells["normal"].intermediate_nodes)
    concat = tuple(range(2, 2 + steps))
    return DartsGenotype(tuple(normal), concat, tuple(reduce), concat, concat_as_range=True)


@SELECTORS.register("argmax")
class Argmax(Selector):
    """Argmax of the strategy's deterministic architecture weights (a DrNAS mean, a softmax)."""

    name = "argmax"

    def select(
        self,
        strategy: SearchStrategy,
        val_data: Iterable[Batch] | None = None,
        *,
        context: Any = None,
    ) -> AnyGenotype:
        with torch.no_grad():
            weights = strategy.derivation_weights()
        supernet = strategy.supernet
        masks = {ct: supernet.op_mask(ct) for ct in weights}
        return argmax_genotype(supernet.space, weights, masks)
