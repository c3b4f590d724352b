"""DARTS-: an auxiliary skip connection on every edge, decayed to nothing during the search.

Third stage of the pipeline (``nas.strategies``), a component. Chu et al., "DARTS-: Robustly
Stepping out of Performance Collapse Without Indicators", ICLR 2021; reference Meituan-AutoML/DARTS-
(adb81a8). Every edge of both cell types gets ``beta_e * aux(x)`` added to its mixed output,
outside the mixing weights (``src/search/model_search.py: MixedOp``): ``aux`` is the identity on
stride-1 edges and ``FactorizedReduce(C, C, affine=False)`` on stride-2 edges (or, with
``operation: conv1``, an identity-initialised 1x1 convolution on stride-1 edges). The skip
carries the gradient that otherwise makes the searched ``skip_connect`` win (the paper's
"unfair advantage"), so the mixing weights can rank the operations on their merit. The
auxiliary op is not a candidate: the genotype never contains it.

Schedule (``src/utils.py: DecayScheduler``, stepped at the start of every epoch, ``linear``):
``beta_e = beta0 * (T_max - e) / (T_max - T_start)`` for ``T_start <= e <= T_stop``, ``beta0``
before ``T_start`` and the last value after ``T_stop``; with ``beta0 = 1``, ``T_start = 0`` and
``T_max = T_stop = T`` (the reference's 50 epochs): 1.0 at epoch 0, 0.02 at epoch 49, never 0
during training. ``cosine`` is the reference's other decay. ``t_max``/``t_stop`` null = the
search's epochs. The auxiliary ops' weights (``FactorizedReduce``'s convolutions) are supernet
weights, trained by the weight optimiser and saved with the supernet.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from nas.strategies.components.base import Component
from search_spaces.ops import FactorizedReduce

if TYPE_CHECKING:
    from nas.strategies.base import SearchContext, SearchStrategy
    from nas.supernet import Supernet
    from nas.supernet.mixed_op import MixedOp


def aux_beta_at(
    epoch: int,
    *,
    beta0: float,
    t_max: int,
    t_start: int,
    t_stop: int,
    decay: str,
) -> float:
    """The reference ``DecayScheduler.decay_rate`` after ``step(epoch)``, with the value it
    keeps after ``t_stop`` (the one at ``t_stop``)."""
    e = min(epoch, t_stop)
    if e < t_start:
        return beta0
    if decay == "linear":
        return beta0 * (t_max - e) / (t_max - t_start)
    return beta0 * (1 + math.cos(math.pi * e / (t_max - t_start))) / 2.0


class AuxiliarySkip(Component):
    """DARTS-'s auxiliary skip connection with its decaying coefficient."""

    def __init__(
        self,
        *,
        beta0: float = 1.0,
        decay: str = "linear",
        t_start: int = 0,
        t_max: int | None = None,
        t_stop: int | None = None,
        operation: str = "skip",
    ) -> None:
        super().__init__()
        if decay not in ("linear", "cosine"):
            raise ValueError(f"components: decay must be 'linear' or 'cosine', got {decay!r}")
        if operation not in ("skip", "conv1"):
            raise ValueError(f"components: operation must be 'skip' or 'conv1', got {operation!r}")
        if beta0 < 0 or t_start < 0:
            raise ValueError(f"components: beta0 and t_start must be >= 0, got {beta0}, {t_start}")
        self.beta0 = float(beta0)
        self.decay = decay
        self.t_start = int(t_start)
        self.t_max = t_max
        self.t_stop = t_stop
        self.operation = operation
        self.beta = self.beta0
        self._mixed: list[MixedOp] = []
        self._search_epochs: int | None = None

    def check(self, strategy: SearchStrategy, others: Sequence[Component]) -> None:
        for c in others:
            if isinstance(c, AuxiliarySkip):
                raise ValueError("darts_minus is listed twice; list it once")

    def prepare_supernet(self, supernet: Supernet) -> None:
        mixed_ops = supernet.mixed_ops()
        if not mixed_ops or not all(m.takes_aux for m in mixed_ops):
            raise ValueError(
                f"{self.name or 'darts_minus'} adds an auxiliary skip to every cell edge, and "
                f"the {supernet.space.name} supernet's mixed blocks take none (a chain's blocks "
                f"change width and carry their own skip op); drop {self.name or 'darts_minus'}"
            )
        for m in mixed_ops:
            aux: nn.Module
            if m.stride == 2:
                aux = FactorizedReduce(m.C, m.C, affine=False)
            elif self.operation == "skip":
                aux = nn.Identity()
            else:  # an identity-initialised 1x1 convolution, as the reference's conv1
                conv = nn.Conv2d(m.C, m.C, 1, padding=0, bias=False)
                with torch.no_grad():
                    conv.weight.copy_(torch.eye(m.C).view(m.C, m.C, 1, 1))
                aux = conv
            m.aux = aux
        self._mixed = mixed_ops
        self._set(self.beta)

    def attach(self, strategy: SearchStrategy, context: SearchContext) -> None:
        self._search_epochs = context.epochs
        if not self._mixed:
            raise ValueError(
                "darts_minus: the supernet has no auxiliary ops; call "
                "strategy.prepare_supernet(supernet) before building the weight optimiser"
            )

    def _set(self, beta: float) -> None:
        self.beta = beta
        for m in self._mixed:
            m.aux_scale = beta

    def begin_epoch(self, epoch: int) -> None:
        t_max = self.t_max or self._search_epochs
        if t_max is None:
            raise ValueError("darts_minus: the decay needs t_max or the search's epochs")
        t_stop = self.t_stop if self.t_stop is not None else t_max
        if t_max <= self.t_start:
            raise ValueError(f"darts_minus: t_max={t_max} must exceed t_start={self.t_start}")
        self._set(
            aux_beta_at(
                epoch,
                beta0=self.beta0,
                t_max=t_max,
                t_start=self.t_start,
                t_stop=t_stop,
                decay=self.decay,
            )
        )

    def log_state(self) -> dict[str, Any]:
        return {"aux_skip_beta": self.beta}
