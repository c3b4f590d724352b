"""Architecture dropout: random mixing weights dropped in every training forward, annealed.

Third stage of the pipeline (``nas.strategies``), a component. As confopt
(automl/ConfigurableOptimizer, ``src/confopt/oneshot/dropout.py``: ``Dropout``, applied in
``searchspace/common/mixop.py``: ``OperationBlock.forward``), the toolkit's peer: each mixing
weight of a sampled forward (the weight step's and the architecture step's) is kept with
probability ``1 - p`` and scaled by ``1 / (1 - p)``, dropped (0) otherwise:

    w' = w * [u >= p] / (1 - p),   u ~ U(0, 1) per entry

so the architecture gradient of a dropped entry is 0 and the kept ones are scaled alike. ``p``
is annealed per epoch from ``p`` to ``p_min`` over the search's epochs: ``linear`` (confopt's
default profile, ``profile/base.py``: ``anneal_type linear``, ``anneal_frequency epoch``,
``max_iter`` the epochs), ``p_e = p_min + (p - p_min) (1 - e / E)``; ``cosine``, ``p_e = p_min
+ (p - p_min) (1 + cos(pi e / E)) / 2``; or none.

Where ours differs from confopt's code, on purpose:

* confopt's cosine reads ``cos(self.p * pi / max_iter)``, the current probability in place of
  the epoch, so its "cosine" barely moves p (from 0.5 to 0.4998 in the first epoch of 50);
  ours is the cosine of the epoch (SGDR's, which its comment cites);
* confopt draws a mask in every ``OperationBlock`` forward, so the cells of one type get their
  own masks, and evaluation forwards are masked too; here one mask per cell type and sampled
  forward (the mixing weights are shared by the cells of a type) and none in evaluation or
  derivation (``sample=False``);
* confopt's step frequency anneals with the epoch counter (``_anneal_probability`` reads
  ``_epoch``); ours anneals per epoch only.

The draws come from ``SearchStrategy.draw_seed`` (the same on every rank and after a resume).
Masked ops (DrNAS's pruning, DARTS-PT's decisions) stay at 0.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch

from nas.strategies.components.base import Component

if TYPE_CHECKING:
    from nas.strategies.base import SearchContext, SearchStrategy
    from nas.supernet import ArchWeights

ANNEALS = ("linear", "cosine", None)


def dropout_p(epoch: int, epochs: int, p: float, p_min: float, anneal: str | None) -> float:
    """The drop probability of 0-based ``epoch`` of ``epochs``."""
    if anneal is None or epochs <= 0:
        return p
    t = min(epoch, epochs) / epochs
    if anneal == "linear":
        return p_min + (p - p_min) * (1 - t)
    return p_min + (p - p_min) * (1 + math.cos(math.pi * t)) / 2


class ArchDropout(Component):
    """Dropout of the mixing weights of every sampled (training) forward."""

    name = "arch_dropout"
    requires = frozenset({"masked_mixing"})

    def __init__(self, *, p: float = 0.2, p_min: float = 0.0, anneal: str | None = "linear"):
        super().__init__()
        for key, value in (("p", p), ("p_min", p_min)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
                raise ValueError(f"arch_dropout.{key} must be a number in [0, 1), got {value!r}")
        if anneal not in ANNEALS:
            raise ValueError(f"arch_dropout.anneal must be linear, cosine or null, got {anneal!r}")
        if p == 0:
            raise ValueError("arch_dropout.p=0 drops nothing; leave the component out instead")
        if anneal is not None and not p_min < p:
            raise ValueError(
                f"arch_dropout.anneal={anneal} goes from p={p} down to p_min={p_min}; expected "
                "p_min < p"
            )
        if anneal is None and p_min != 0:
            raise ValueError(
                f"arch_dropout.p_min={p_min} is where the annealing ends, and anneal=null "
                "anneals nothing; leave p_min at 0 or choose linear or cosine"
            )
        self.p0, self.p_min, self.anneal = float(p), float(p_min), anneal
        self.p = self.p0
        self._epochs = 0

    def check(self, strategy: SearchStrategy, others: Any) -> None:
        if getattr(strategy, "order", 1) == 2:
            raise ValueError(
                "component arch_dropout draws a new mask in every forward, so the unrolled "
                "step's finite differences would compare two different networks; expected "
                "search.order=1"
            )

    def attach(self, strategy: SearchStrategy, context: SearchContext) -> None:
        self._epochs = int(context.epochs or 0)

    def begin_epoch(self, epoch: int) -> None:
        self.p = dropout_p(epoch, self._epochs, self.p0, self.p_min, self.anneal)

    def mask_weights(self, strategy: SearchStrategy, weights: ArchWeights) -> ArchWeights:
        """``w * [u >= p] / (1 - p)`` per entry, one mask per cell type (differentiable)."""
        if self.p == 0:
            return weights
        out = {}
        for ct, w in weights.items():
            gen = torch.Generator(w.device).manual_seed(strategy.draw_seed())
            u = torch.rand(w.shape, generator=gen, device=w.device, dtype=w.dtype)
            out[ct] = w * (u >= self.p).to(w.dtype) * (1.0 / (1.0 - self.p))
        return out

    def log_state(self) -> dict[str, Any]:
        return {"arch_dropout_p": self.p}
