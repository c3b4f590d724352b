"""PC-DARTS: partial channels, edge normalisation and an architecture warm-up.

Third stage of the pipeline (``nas.strategies``), a component. Xu et al., "PC-DARTS: Partial
Channel Connections for Memory-Efficient Architecture Search", ICLR 2020; reference
yuhuixu1993/PC-DARTS (b74702f):

* partial channels (``model_search.py: MixedOp``, K = 4): only C/K channels of an edge go
  through its ops, the rest bypass them and the channels are shuffled; the supernet has this
  already (``nas.supernet.mixed_op``, used by DrNAS), the component only fixes the K the
  supernet starts with (``partial_channels``; a DrNAS stage list still decides its own);
* edge normalisation (H2, ``model_search.py:139-158``): a parameter ``beta`` per edge and cell
  type (init ``1e-3 * N(0, 1)``), softmax over the edges into each node, scaling each edge's
  whole output, bypassed channels included, before the node sums. The betas are architecture
  parameters: optimised by the strategy's Adam with its alphas, saved in its checkpoint;
* the genotype (``model_search.py: genotype``) from ``W = p_op * softmax(beta)_edge``: the
  derivation weights are the strategy's times the edge weights (any selector sees them);
* warm-up: no architecture step while ``epoch < warmup_epochs`` (15; ImageNet: 35), the weight
  step runs throughout (``train_search.py``).

The betas act on the supernet directly, so the first-order step differentiates the loss in
them (``SearchStrategy.direct_arch_parameters``); the unrolled second-order gradient carries
only the mixing weights, and a second-order strategy is refused. The paper's other settings
(batch 256, SGD 0.1, arch lr 6e-4; ImageNet's K=2, stem, clipping) are experiment configs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from nas.strategies.components.base import Component

if TYPE_CHECKING:
    from nas.strategies.base import SearchContext, SearchStrategy
    from nas.supernet import ArchWeights, Supernet


def node_softmax(beta_E: Tensor, groups: Sequence[Sequence[int]]) -> Tensor:
    """Softmax of ``beta_E`` within each group of edges (the edges into one node)."""
    out = torch.empty_like(beta_E)
    for edges in groups:
        idx = torch.tensor(list(edges), device=beta_E.device)
        out = out.index_copy(0, idx, torch.softmax(beta_E[idx], dim=0))
    return out


class EdgeNormalisation(Component):
    """PC-DARTS's edge weights (and its partial-channel K and warm-up)."""

    def __init__(
        self,
        *,
        partial_channels: int | None = 4,
        warmup_epochs: int = 15,
        edge_normalisation: bool = True,
        init_scale: float = 1e-3,
        init_seed: int = 0,
    ) -> None:
        super().__init__()
        if partial_channels is not None and (
            isinstance(partial_channels, bool) or partial_channels < 1
        ):
            raise ValueError(
                f"components: partial_channels must be a positive int or null, got "
                f"{partial_channels!r}"
            )
        if isinstance(warmup_epochs, bool) or warmup_epochs < 0:
            raise ValueError(f"components: warmup_epochs must be >= 0, got {warmup_epochs!r}")
        self.k = partial_channels
        self.warmup_epochs = int(warmup_epochs)
        self.edge_normalisation = bool(edge_normalisation)
        self.init_scale = float(init_scale)
        self.init_seed = int(init_seed)
        self.edge_betas = nn.ParameterDict()
        self._groups: dict[str, list[list[int]]] = {}

    @property
    def partial_channels(self) -> int | None:
        return self.k

    def needs(self) -> frozenset[str]:
        # the edge weights act on the supernet directly: their gradient is the loss's own
        return frozenset({"direct_params"}) if self.edge_normalisation else frozenset()

    def check_strategy(self, strategy: SearchStrategy) -> None:
        try:
            super().check_strategy(strategy)
        except ValueError as e:
            raise ValueError(f"{e}, or components.{self.name}.edge_normalisation=false") from None

    def check(self, strategy: SearchStrategy, others: Sequence[Component]) -> None:
        if sum(isinstance(c, EdgeNormalisation) for c in others):
            raise ValueError("pc_darts is listed twice; list it once")

    def prepare_supernet(self, supernet: Supernet) -> None:
        if not self.edge_normalisation:
            return
        gen = torch.Generator().manual_seed(self.init_seed)
        for ct, cell in supernet.space.cells.items():
            self._groups[ct] = [
                [e.index for e in cell.edges_into(n)] for n in cell.intermediate_nodes
            ]
            init = self.init_scale * torch.randn(cell.num_edges, generator=gen)
            self.edge_betas[ct] = nn.Parameter(init)
        supernet.edge_weights = self.edge_weights

    def attach(self, strategy: SearchStrategy, context: SearchContext) -> None:
        if (
            self.warmup_epochs > 0
            and context.epochs is not None
            and self.warmup_epochs >= context.epochs
            and strategy.has("arch_params")
            and not strategy.fix_alpha
        ):
            raise ValueError(
                f"components.{self.name or 'pc_darts'}.warmup_epochs={self.warmup_epochs} "
                f"covers all {context.epochs} epochs, so the architecture would never be "
                f"trained; expected warmup_epochs < epochs (set "
                f"components.{self.name or 'pc_darts'}.warmup_epochs=0..{context.epochs - 1})"
            )
        if self.edge_normalisation and not self._groups:
            raise ValueError(
                "pc_darts: the supernet has no edge weights; call "
                "strategy.prepare_supernet(supernet) before attaching the strategy"
            )
        device = next(strategy.supernet.parameters()).device
        self.edge_betas.to(device)

    def edge_weights(self) -> dict[str, Tensor]:
        """Cell type -> the weight of every edge (a softmax over the edges into its node)."""
        return {ct: node_softmax(b, self._groups[ct]) for ct, b in self.edge_betas.items()}

    def updates_arch(self, epoch: int) -> bool:
        return epoch >= self.warmup_epochs

    def derivation_weights(self, strategy: SearchStrategy, weights: ArchWeights) -> ArchWeights:
        if not self.edge_normalisation:
            return weights
        with torch.no_grad():
            edge = self.edge_weights()
        return {ct: w * edge[ct].to(w.dtype).unsqueeze(-1) for ct, w in weights.items()}

    def log_state(self) -> dict[str, Any]:
        if not self.edge_normalisation:
            return {}
        with torch.no_grad():
            return {
                f"edge_weights_{ct}": w.detach().cpu().tolist()
                for ct, w in self.edge_weights().items()
            }
