"""FairDARTS: independent sigmoid weights and the zero-one loss.

Third stage of the pipeline (``nas.strategies``), a component. Chu et al., "Fair DARTS: Eliminating
Unfair Advantages in Differentiable Architecture Search", ECCV 2020; reference
xiaomi-automl/FairDARTS (270cfc9, ``fairdarts/``):

* the mixing weights are ``sigmoid(alpha)``, each op on its own, not normalised over the edge
  (``model_search.py:104-111``), so ops do not compete for one unit of weight (H5: the supernet
  uses the weights as given); the op set has no ``none`` (``genotypes.py``): with
  ``drop_none`` the ``none`` ops of the space are masked off (never run, never in the loss);
* the zero-one loss (``separate_loss.py``) ``- w01 * mean((sigmoid(alpha) - 0.5)^2)`` over every
  weight of both cell types (196 on the DARTS space without ``none``), with ``w01 = 10``, added
  to the architecture loss: it pushes each weight towards 0 or 1.

It replaces a logit strategy's softmax (DARTS); a strategy whose weights are not a function of
logits (DrNAS's Dirichlet samples) is refused, as are components that need weights on the
simplex (SDARTS's projection, the hardware cost's expectation). The reference's genotype
(``threshold_sparse``: per node the top-2 inputs, each kept only if its weight >= 0.85, so a
node keeps 0-2 inputs) is the selector ``threshold`` (``nas.selection.threshold``), a sparse
``DartsGenotype`` that ``NetworkCIFAR`` runs as the reference's ``DCOCell``; the other
selectors derive with their own rule (argmax: top-2 inputs, best op each, on the sigmoids).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from nas.strategies.components.base import Component

if TYPE_CHECKING:
    from nas.strategies.base import SearchStrategy
    from nas.supernet import Supernet


def zero_one_loss(sigmoids: Sequence[Tensor]) -> Tensor:
    """``- mean((s - 0.5)^2)`` over every entry of ``sigmoids`` (the reference's L2 form)."""
    return -torch.cat([s.reshape(-1) for s in sigmoids]).sub(0.5).pow(2).mean()


class FairDARTS(Component):
    """Sigmoid mixing weights plus ``w01`` times the zero-one loss."""

    replaces_mixing = True
    # the sigmoid replaces the strategy's softmax; the zero-one loss is an architecture term
    requires = frozenset({"softmax", "arch_penalty"})
    on_simplex = False

    def __init__(self, *, w01: float = 10.0, drop_none: bool = True) -> None:
        super().__init__()
        if w01 < 0:
            raise ValueError(f"components: w01 must be >= 0, got {w01}")
        self.w01 = float(w01)
        self.drop_none = bool(drop_none)

    def check(self, strategy: SearchStrategy, others: Sequence[Component]) -> None:
        for c in others:
            if c.needs_simplex:
                raise ValueError(
                    f"fair_darts's sigmoid weights are not on the simplex that {c.name} "
                    "perturbs and projects onto"
                )

    def prepare_supernet(self, supernet: Supernet) -> None:
        if not self.drop_none:
            return
        for ct, cell in supernet.space.cells.items():
            mask = supernet.op_mask(ct).clone()
            for e in cell.edges:
                for k, op in enumerate(e.ops):
                    if op == "none":
                        mask[e.index, k] = False
            if not bool(mask.any(-1).all()):
                raise ValueError(f"fair_darts: an edge of {ct!r} has no op but 'none'")
            supernet.set_op_mask(ct, mask)

    def mixing(self, alpha_EO: Tensor) -> Tensor:
        return torch.sigmoid(alpha_EO)

    def arch_penalty(self, strategy: SearchStrategy) -> Tensor | None:
        if self.w01 == 0:
            return None
        kept = []
        for ct, alpha in strategy.arch_params.items():
            mask = strategy.supernet.op_mask(ct)
            kept.append(torch.sigmoid(alpha)[mask])
        return self.w01 * zero_one_loss(kept)

    def log_state(self) -> dict[str, Any]:
        return {"zero_one_w01": self.w01}
