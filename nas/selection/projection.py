"""Edge projections: the decisions of a projecting selector, laid over a strategy's weights.

Fourth stage of the pipeline (``nas.selection``). DARTS-PT (Wang et al., ICLR 2021) decides the
architecture one edge at a time: an operation projection fixes an edge to the one-hot weight of
its chosen op, a topology projection fixes a removed edge to zero. The decided edges keep those
weights while the supernet is fine-tuned, so the strategy's mixing weights must show them: the
selector owns the state (``EdgeProjection``, in its checkpoint) and installs it as the
strategy's ``weight_override``; strategies know nothing of projections. Zero-Cost-PT (Xiang et
al., AAAI 2023) projects the same way.

Legend: ``*_EO`` tensors are [edges, ops] of one cell type.
"""

from __future__ import annotations

from typing import Any

import torch

from nas.strategies.base import SearchStrategy
from nas.supernet import ArchWeights


class EdgeProjection:
    """Which edges of every cell type are decided, and their fixed weights."""

    def __init__(self, shapes: dict[str, tuple[int, int]], device: torch.device) -> None:
        self.decided = {
            ct: torch.zeros(e, dtype=torch.bool, device=device) for ct, (e, _) in shapes.items()
        }
        self.weights_EO = {ct: torch.zeros(e, o, device=device) for ct, (e, o) in shapes.items()}

    @staticmethod
    def for_strategy(strategy: SearchStrategy) -> EdgeProjection:
        """Nothing decided, shaped as the strategy's architecture, on its device."""
        device = next(strategy.supernet.parameters()).device
        return EdgeProjection(strategy.supernet.arch_shapes(), device)

    def __call__(self, weights: ArchWeights) -> ArchWeights:
        """``weights`` with every decided edge replaced by its fixed weights."""
        out = {}
        for ct, w in weights.items():
            decided = self.decided[ct]
            if bool(decided.any()):
                w = torch.where(decided.unsqueeze(-1), self.weights_EO[ct], w)
            out[ct] = w
        return out

    def undecided(self, cell_type: str) -> list[int]:
        return [int(e) for e in (~self.decided[cell_type]).nonzero().flatten()]

    def project_op(self, cell_type: str, edge: int, op: int) -> None:
        """Fix edge ``edge`` to the one-hot weight of op ``op`` (operation projection)."""
        with torch.no_grad():
            self.weights_EO[cell_type][edge].zero_()[op] = 1.0
            self.decided[cell_type][edge] = True

    def remove_edge(self, cell_type: str, edge: int) -> None:
        """Fix edge ``edge`` to zero weights (topology projection)."""
        with torch.no_grad():
            self.weights_EO[cell_type][edge].zero_()
            self.decided[cell_type][edge] = True

    def reset(self) -> None:
        """Nothing decided (Zero-Cost-PT starts each run of its pool afresh)."""
        for decided in self.decided.values():
            decided.zero_()

    def state_dict(self) -> dict[str, Any]:
        return {
            "decided": {ct: t.cpu() for ct, t in self.decided.items()},
            "weights": {ct: t.cpu() for ct, t in self.weights_EO.items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for ct, t in state["decided"].items():
            self.decided[ct].copy_(t)
        for ct, t in state["weights"].items():
            self.weights_EO[ct].copy_(t)


def install(strategy: SearchStrategy, projection: EdgeProjection) -> None:
    """Let ``projection`` override the strategy's weights (training and derivation alike)."""
    strategy.weight_override = projection
