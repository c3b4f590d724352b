"""params: the number of parameters that a forward pass uses (a baseline, not a proxy of merit).

Zero-cost baseline (``nas.proxies``); NASLib's ``params`` and the ZC code's
``count_parameters``: trainable parameters. We count those of the modules that run in a
forward of one input, which for a discrete network is all of them but an auxiliary head, and
for a supernet those of the operations with a non-zero weight (plus stem, reductions, head).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from nas.proxies.base import PROXIES, DataSpec, Proxy, Scorable, bn_mode, check_images


def modules_run(net: Scorable, x: Tensor) -> list[nn.Module]:
    """The modules (with parameters of their own) that a forward of ``x[:1]`` calls."""
    ran: dict[int, nn.Module] = {}

    def hook(m: nn.Module, inp: object, out: object) -> None:
        ran[id(m)] = m

    own = [m for m in net.net.modules() if any(True for _ in m.parameters(recurse=False))]
    handles = [m.register_forward_hook(hook) for m in own]
    try:
        with torch.no_grad(), bn_mode(net.net, "eval"):
            net.logits(x[:1])
    finally:
        for h in handles:
            h.remove()
    return list(ran.values())


@PROXIES.register("params")
class Params(Proxy):
    name = "params"
    data = DataSpec(kind="ones", batch_size=1, augment=False)

    def score(self, net: Scorable, x: Tensor, y: Tensor | None) -> float:
        check_images(self.name, x)
        return float(
            sum(
                p.numel()
                for m in modules_run(net, x)
                for p in m.parameters(recurse=False)
                if p.requires_grad
            )
        )
