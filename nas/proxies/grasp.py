"""grasp: gradient signal preservation, ``sum(-W * Hg)`` (Wang et al., GraSP, ICLR 2020).

Zero-cost proxy (``nas.proxies``), as SamsungLabs/zero-cost-nas ``measures/grasp.py``
computes it (T = 1, one iteration, batch 64, BN in batch-statistics mode): pass 1, g = dL/dW
without a graph; pass 2, dL/dW with ``create_graph`` and z = sum g * dL/dW, whose gradient is
Hg; the score is ``sum -W * Hg`` over Conv2d / Linear weights. The minus sign is the ZC
authors' (the unsigned score correlated negatively with accuracy).
"""

from __future__ import annotations

import torch
from torch import Tensor

from nas.proxies.base import (
    PROXIES,
    Proxy,
    Scorable,
    bn_mode,
    check_images,
    check_labels,
    cross_entropy,
)


@PROXIES.register("grasp")
class Grasp(Proxy):
    name = "grasp"

    def score(self, net: Scorable, x: Tensor, y: Tensor | None) -> float:
        return float(sum(float(t.sum()) for t in self.per_weight(net, x, y) if t is not None))

    def per_weight(self, net: Scorable, x: Tensor, y: Tensor | None) -> list[Tensor | None]:
        """``-W * Hg`` of each scored layer (module order; None where the layer gets no
        gradient), the reference's per-weight array."""
        check_images(self.name, x)
        y = check_labels(self.name, x, y)
        layers = net.scored_layers(self.name)
        weights = [layer.weight for layer in layers]
        with bn_mode(net.net, "train"), torch.enable_grad():
            logits = net.logits(x)
            net.num_classes_check(self.name, logits, y)
            g1 = torch.autograd.grad(cross_entropy(logits, y), weights, allow_unused=True)
            g2 = torch.autograd.grad(
                cross_entropy(net.logits(x), y), weights, create_graph=True, allow_unused=True
            )
            terms = [
                (a.detach() * b).sum()
                for a, b in zip(g1, g2)
                if a is not None and b is not None and b.requires_grad
            ]
            if not terms:
                return [None] * len(weights)
            hg = torch.autograd.grad(torch.stack(terms).sum(), weights, allow_unused=True)
        return [None if h is None else -w.detach() * h for w, h in zip(weights, hg)]
