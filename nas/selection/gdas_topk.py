"""GDAS's genotype rule: per node, the top-2 (op, input) pairs, which may share an input.

Fourth stage of the pipeline (``nas.selection``). Dong & Yang, CVPR 2019, reference
``search_model_gdas_nasnet.py:128-161`` (D-X-Y/AutoDL-Projects): for each intermediate node of
a DARTS-style cell, every (op, input) pair of its incoming edges except ``none`` is ranked by
the strategy's derivation weights (GDAS: ``softmax(alpha)``) and the best two are kept, so a
node may take two ops from the same input (DARTS's rule keeps two distinct inputs). Ties go to
the earlier input, then the earlier op, as the reference's stable sort over (input, op). Spaces
that keep every edge (NB201) have no topology to choose: the rule is the argmax per edge
there, as the reference (``search_model_gdas.py:101-112``). Masked-out ops never win.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from nas.selection.base import SelectionContext, Selector, derive_genotype
from nas.strategies.base import Batch, SearchStrategy
from search_spaces.families import family_of
from search_spaces.genotype import AnyGenotype
from search_spaces.space import CellSpace


def top_pairs(cell: CellSpace, w_EO: torch.Tensor, mask_EO: torch.Tensor, k: int) -> list:
    """The best ``k`` (op, input) pairs of each intermediate node, in node order."""
    w = w_EO.detach().float().cpu().masked_fill(~mask_EO.cpu(), float("-inf")).tolist()
    pairs: list[tuple[str, int]] = []
    for node in cell.intermediate_nodes:
        ranked = [
            (op, e.src, w[e.index][j])
            for e in sorted(cell.edges_into(node), key=lambda e: e.src)
            for j, op in enumerate(e.ops)
            if op != "none" and w[e.index][j] != float("-inf")
        ]
        if len(ranked) < k:
            raise ValueError(
                f"node {node} has {len(ranked)} unmasked (op, input) pairs; GDAS's rule keeps {k}"
            )
        ranked.sort(key=lambda t: -t[2])
        pairs.extend((op, src) for op, src, _ in ranked[:k])
    return pairs


class GDASTopK(Selector):
    """GDAS's derivation (the reference's DARTS-space ``genotype()``) of any strategy's
    weights."""

    name = "gdas_topk"
    selects_from_weights = True

    def select(
        self,
        strategy: SearchStrategy,
        val_data: Iterable[Batch] | None = None,
        *,
        context: SelectionContext | None = None,
    ) -> AnyGenotype:
        with torch.no_grad():
            weights = strategy.derivation_weights()
        supernet = strategy.supernet
        space = supernet.space
        masks = {ct: supernet.op_mask(ct) for ct in weights}
        if not space.selects_inputs:
            return derive_genotype(space, weights, masks)
        edges = {}
        for ct, cell in space.cells.items():
            k = cell.inputs_per_node
            assert k is not None
            pairs = top_pairs(cell, weights[ct], masks[ct], k)
            nodes = [node for node in cell.intermediate_nodes for _ in range(k)]
            edges[ct] = [(op, src, dst) for (op, src), dst in zip(pairs, nodes)]
        return family_of(space).genotype(space, edges)
