"""zen: the Zen-score, log E|f(x) - f(x + g e)| plus the BN scales (Lin et al., ICCV 2021).

Zero-cost proxy (``nas.proxies``), as idstcv/ZenNAS ``ZeroShotProxy/compute_zen_score.py``
computes it: on a copy of the network, per repeat, Conv2d / Linear weights ~ N(0, 1) and
biases 0, BN gamma = 1 and beta = 0; x, e ~ N(0, 1) of batch 16; f = the feature map before
global pooling; Delta = mean over the batch of ``sum |f(x) - f(x + 0.01 e)|``; the repeat's
score is ``log Delta + sum over BN layers of log sqrt(mean running_var)``, averaged over 32
repeats. Train mode, without autograd, as the reference: BN normalises with batch statistics
and its running variance moves (momentum 0.1) across the forwards and repeats, as there.
A BN layer that keeps no running statistics (our supernet cells) contributes the variance of
its input in that repeat's forward of x instead (unbiased, as a running update would use).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor, nn

from nas.proxies.base import (
    PROXIES,
    DataSpec,
    Proxy,
    ProxyError,
    Scorable,
    check_images,
)

_BN = nn.modules.batchnorm._BatchNorm


def gaussian_init(net: nn.Module, generator: torch.Generator | None = None) -> None:
    """ZenNAS ``network_weight_gaussian_init`` (BN without affine parameters is left alone)."""
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                m.weight.copy_(torch.randn(m.weight.shape, generator=generator))
                if m.bias is not None:
                    m.bias.zero_()
            elif isinstance(m, (_BN, nn.GroupNorm)) and m.weight is not None:
                m.weight.fill_(1.0)
                if m.bias is not None:
                    m.bias.zero_()


@PROXIES.register("zen")
class Zen(Proxy):
    name = "zen"
    data = DataSpec(kind="gaussian", batch_size=16, augment=False)

    def __init__(self, *, repeat: int = 32, mixup_gamma: float = 1e-2) -> None:
        if repeat < 1:
            raise ProxyError(f"zen repeat must be >= 1, got {repeat}")
        self.repeat = repeat
        self.mixup_gamma = mixup_gamma

    def score(self, net: Scorable, x: Tensor, y: Tensor | None) -> float:
        """``x`` gives the input shape and device; the inputs are Gaussian draws from the
        global torch generator (seed it for a reproducible score)."""
        check_images(self.name, x)
        if not net.has_features():
            net.features(x[:1])  # raises the one-line refusal
        work = net.copy()
        model = work.net
        bns = [m for m in model.modules() if isinstance(m, _BN)]
        batch_var: dict[int, Tensor] = {}

        def record(m: nn.Module, inp: tuple[Tensor, ...]) -> None:
            v = inp[0].transpose(0, 1).reshape(inp[0].shape[1], -1).var(dim=1, unbiased=True)
            batch_var[id(m)] = v

        handles = [m.register_forward_pre_hook(record) for m in bns if m.running_var is None]
        scores = []
        was_training = model.training
        model.train()
        try:
            with torch.no_grad():
                for _ in range(self.repeat):
                    gaussian_init(model)
                    shape = (x.shape[0], *x.shape[1:])
                    x1 = torch.randn(shape, device=x.device, dtype=x.dtype)
                    x2 = torch.randn(shape, device=x.device, dtype=x.dtype)
                    out = work.features(x1)
                    var_x = dict(batch_var)
                    mixed = work.features(x1 + self.mixup_gamma * x2)
                    delta = torch.abs(out - mixed).sum(dim=tuple(range(1, out.dim()))).mean()
                    log_bn = 0.0
                    for m in bns:
                        var = m.running_var if m.running_var is not None else var_x[id(m)]
                        log_bn += math.log(math.sqrt(float(var.mean())))
                    scores.append(math.log(float(delta)) + log_bn)
        finally:
            for h in handles:
                h.remove()
            model.train(was_training)
        return float(np.mean(scores))
