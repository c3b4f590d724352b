"""flops: multiply-accumulates of one image's forward pass (a baseline, not a proxy of merit).

Zero-cost baseline (``nas.proxies``); NASLib's ``flops``; the convention of the NAS papers'
"FLOPs" columns and of ``nas.summary.count_macs``: the MACs of every Conv2d and Linear call
for one input, eval mode. Our FactorizedReduce runs as the reference's two module convs here
(``module_calls``), so every conv is a hooked module call. For a supernet, the operations with
a non-zero weight.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from nas.proxies.base import PROXIES, DataSpec, Proxy, Scorable, bn_mode, check_images


@PROXIES.register("flops")
class Flops(Proxy):
    name = "flops"
    data = DataSpec(kind="ones", batch_size=1, augment=False)

    def score(self, net: Scorable, x: Tensor, y: Tensor | None) -> float:
        check_images(self.name, x)
        total = 0

        def conv(m: nn.Module, inp: tuple[Tensor, ...], out: Tensor) -> None:
            nonlocal total
            assert isinstance(m, nn.Conv2d)
            kh, kw = m.kernel_size
            total += out[0].numel() * (m.in_channels // m.groups) * kh * kw

        def linear(m: nn.Module, inp: tuple[Tensor, ...], out: Tensor) -> None:
            nonlocal total
            assert isinstance(m, nn.Linear)
            total += out[0].numel() * m.in_features

        handles = []
        for m in net.net.modules():
            if isinstance(m, nn.Conv2d):
                handles.append(m.register_forward_hook(conv))
            elif isinstance(m, nn.Linear):
                handles.append(m.register_forward_hook(linear))
        try:
            with torch.no_grad(), bn_mode(net.net, "eval"):
                net.logits(x[:1])
        finally:
            for h in handles:
                h.remove()
        return float(total)
