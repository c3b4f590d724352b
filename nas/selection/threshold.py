"""FairDARTS's threshold genotype: per node the top-2 inputs, each kept only if its best op is
strong enough, so a node keeps 0-2 inputs.

Fourth stage of the pipeline (``nas.selection``). Chu et al., "Fair DARTS", ECCV 2020,
reference xiaomi-automl/FairDARTS ``fairdarts/utils.py:161-184`` (``parse``, method
``threshold_sparse``, threshold 0.85 from ``train_search.py:40-41``): for each intermediate node
of a DARTS-style cell, rank its incoming edges by their strongest op weight and take the top 2
(ties to the earlier input, as the reference's stable sort); on each, the strongest op is kept
only if its weight is at least ``threshold``. With FairDARTS's independent sigmoid weights this
reads "the op is on", not "the op wins a softmax". ``none`` and masked-out ops never count (the
reference's op set has no ``none``).

What the reference leaves broken, decided here: an edge whose input is a node that kept no
input is dropped (the reference's ``DCOCell`` skips it when running, and fails when it was the
node's only input), and so on down the cell; a cell left without any op is a one-line error
(lower ``selection.threshold``). Spaces that keep every edge (NB201) have no topology to thin:
the rule is the argmax there.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor

from nas.selection.base import SelectionContext, Selector, derive_genotype
from nas.strategies.base import Batch, SearchStrategy
from search_spaces.families import family_of
from search_spaces.genotype import AnyGenotype
from search_spaces.space import CellSpace


def threshold_cell(
    cell: CellSpace, w_EO: Tensor, mask_EO: Tensor, threshold: float, top: int = 2
) -> list[tuple[str, int, int]]:
    """The kept ``(op, node, input)`` triples of one cell, nodes in order (``parse``'s
    ``threshold_sparse``), with the edges from input-less nodes dropped."""
    w = w_EO.detach().double().cpu().masked_fill(~mask_EO.cpu(), float("-inf")).tolist()
    triples: list[tuple[str, int, int]] = []
    live = set(range(cell.num_input_nodes))
    for node in cell.intermediate_nodes:
        candidates = []
        for e in sorted(cell.edges_into(node), key=lambda e: e.src):
            row = w[e.index]
            ops = [k for k, op in enumerate(e.ops) if op != "none" and row[k] != float("-inf")]
            if ops:
                best = max(ops, key=lambda k: (w[e.index][k], -k))  # first of equal weights
                candidates.append((e, best))
        candidates.sort(key=lambda c: -w[c[0].index][c[1]])  # stable: ties to the earlier input
        for e, best in candidates[:top]:
            if w[e.index][best] >= threshold and e.src in live:
                triples.append((e.ops[best], node, e.src))
        if any(t[1] == node for t in triples):
            live.add(node)
    return triples


class Threshold(Selector):
    """FairDARTS's ``threshold_sparse`` derivation of any strategy's weights."""

    name = "threshold"
    selects_from_weights = True

    def __init__(self, threshold: float = 0.85, top: int = 2) -> None:
        if not 0.0 <= threshold <= 1.0:
            raise ValueError(f"selection.threshold must be in [0, 1], got {threshold}")
        if top not in (1, 2):
            raise ValueError(f"selection.top must be 1 or 2 (inputs per node), got {top}")
        self.threshold = float(threshold)
        self.top = int(top)

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
        cells: dict[str, list[tuple[str, int, int]]] = {}
        for ct, cell in space.cells.items():
            cells[ct] = threshold_cell(cell, weights[ct], masks[ct], self.threshold, self.top)
            if not cells[ct]:
                strongest = float(weights[ct].masked_fill(~masks[ct], float("-inf")).max())
                raise ValueError(
                    f"threshold selection: no op of the {ct} cell reaches the threshold "
                    f"{self.threshold} (strongest weight {strongest:.3f}); lower "
                    "selection.threshold or search longer"
                )
        # the kept (op, src, dst) of each cell: nodes keep 0-2 inputs (a sparse genotype)
        edges = {ct: [(op, src, node) for op, node, src in t] for ct, t in cells.items()}
        return family_of(space).genotype(space, edges, sparse=True)
