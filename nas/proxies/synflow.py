"""synflow: synaptic flow, ``sum |W * dR/dW|`` of a linearised network (Tanaka et al. 2020).

Zero-cost proxy (``nas.proxies``), as SamsungLabs/zero-cost-nas ``measures/synflow.py``
computes it (``bn=False``): on a copy of the network, BN removed (identity), every tensor of
the state dict replaced by its absolute value, everything cast to float64; the input is one
all-ones image of the data's shape; R = sum of the outputs; the score is ``sum |W * dR/dW|``
over Conv2d / Linear weights. No data, no labels. The float64 cast matters: in float32 the
products of a deep network's weights overflow or lose the small layers.
"""

from __future__ import annotations

import torch
from torch import Tensor

from nas.proxies.base import PROXIES, DataSpec, Proxy, Scorable, bn_mode, check_images


@PROXIES.register("synflow")
class Synflow(Proxy):
    name = "synflow"
    data = DataSpec(kind="ones", batch_size=1, augment=False)

    def score(self, net: Scorable, x: Tensor, y: Tensor | None) -> float:
        return float(sum(float(t.sum()) for t in self.per_weight(net, x) if t is not None))

    def per_weight(self, net: Scorable, x: Tensor) -> list[Tensor | None]:
        """``|W * dR/dW|`` of each scored layer (module order; None where the layer gets no
        gradient), the reference's per-weight array."""
        check_images(self.name, x)
        net.scored_layers(self.name)  # the one-line refusal, before any copying
        work = net.copy()
        model = work.net
        with torch.no_grad():
            for t in model.state_dict().values():
                if t.is_floating_point():
                    t.abs_()
        model.double()
        if work.weights is not None:
            work.weights = {k: v.double() for k, v in work.weights.items()}
        layers = work.scored_layers(self.name)
        weights = [layer.weight for layer in layers]
        ones = torch.ones((1, *x.shape[1:]), dtype=torch.float64, device=x.device)
        with bn_mode(model, "none"), torch.enable_grad():
            out = work.logits(ones)
            grads = torch.autograd.grad(out.sum(), weights, allow_unused=True)
        return [None if g is None else (w.detach() * g).abs() for w, g in zip(weights, grads)]
