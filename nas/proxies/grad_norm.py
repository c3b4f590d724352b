"""grad_norm: the sum over Conv2d / Linear layers of the L2 norm of the loss gradient.

Zero-cost proxy (``nas.proxies``); Abdelfattah et al., ICLR 2021, SamsungLabs/zero-cost-nas
``measures/grad_norm.py``: one cross-entropy backward of a batch of 64 augmented training
images, BN in batch-statistics mode, then ``sum_l ||dL/dW_l||_2`` (a sum of per-layer norms,
not one global norm; a layer without gradient counts 0).
"""

from __future__ import annotations

from torch import Tensor

from nas.proxies.base import PROXIES, Proxy, Scorable
from nas.proxies.gradients import GradientPass, gradient_pass


@PROXIES.register("grad_norm")
class GradNorm(Proxy):
    name = "grad_norm"
    shared_pass = "gradients"

    def score(self, net: Scorable, x: Tensor, y: Tensor | None) -> float:
        return self.from_pass(gradient_pass(net, x, y, proxy=self.name))

    @staticmethod
    def from_pass(p: GradientPass) -> float:
        return float(sum(float(g.norm()) for g in p.weight_grads if g is not None))
