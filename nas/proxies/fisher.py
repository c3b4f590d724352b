"""fisher: the channel-wise Fisher information of the activations (Turner et al., BlockSwap).

Zero-cost proxy (``nas.proxies``), as SamsungLabs/zero-cost-nas ``measures/fisher.py``
computes it: for each Conv2d / Linear output a with gradient d (cross-entropy, batch 64, BN in
batch-statistics mode, train mode), per output channel k
``F_k = 1/2 mean_n (sum_spatial a * d)^2``, accumulated over the layer's calls; then ``|F_k|``
is broadcast over the channel's weights (``weight.shape[1:]``), so the layer contributes
``sum_k F_k * C_in/groups * k_h * k_w`` (``Linear``: ``* in_features``). A layer that never ran
counts 0.
"""

from __future__ import annotations

import math

from torch import Tensor

from nas.proxies.base import PROXIES, Proxy, Scorable
from nas.proxies.gradients import GradientPass, gradient_pass


@PROXIES.register("fisher")
class Fisher(Proxy):
    name = "fisher"
    shared_pass = "gradients"

    def score(self, net: Scorable, x: Tensor, y: Tensor | None) -> float:
        return self.from_pass(gradient_pass(net, x, y, proxy=self.name, fisher=True))

    @staticmethod
    def from_pass(p: GradientPass) -> float:
        total = 0.0
        for layer, f in zip(p.layers, p.fisher):
            if f is not None:
                fan = math.prod(layer.weight.shape[1:])
                total += float(f.abs().sum()) * fan
        return total
