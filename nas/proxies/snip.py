"""snip: connection sensitivity, the sum of |W * dL/dW| over Conv2d / Linear weights.

Zero-cost proxy (``nas.proxies``); Lee et al., "SNIP", ICLR 2019, as SamsungLabs/zero-cost-nas
``measures/snip.py`` computes it: a mask m = 1 multiplies every weight, W is frozen and the
score is ``sum |dL/dm|``. Since dL/dm = W * dL/dW at m = 1, we read it off the weight gradient
of the shared cross-entropy backward (batch 64, BN in batch-statistics mode), without the mask.
"""

from __future__ import annotations

from torch import Tensor

from nas.proxies.base import PROXIES, Proxy, Scorable
from nas.proxies.gradients import GradientPass, gradient_pass


@PROXIES.register("snip")
class Snip(Proxy):
    name = "snip"
    shared_pass = "gradients"

    def score(self, net: Scorable, x: Tensor, y: Tensor | None) -> float:
        return self.from_pass(gradient_pass(net, x, y, proxy=self.name))

    @staticmethod
    def from_pass(p: GradientPass) -> float:
        total = 0.0
        for layer, g in zip(p.layers, p.weight_grads):
            if g is not None:
                total += float((layer.weight.detach() * g).abs().sum())
        return total
