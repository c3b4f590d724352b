"""The forward and backward that grad_norm, snip, fisher and jacob_cov share.

Part of ``nas.proxies``. In the ZC harness (Abdelfattah et al., ICLR 2021) each of the four
measures deep-copies the network and runs its own forward and backward of the same batch with
BN in batch-statistics mode (``foresight/pruners/measures/__init__.py``, ``predictive.py``).
Batch statistics make the forward independent of the BN running statistics, so one forward
serves all four: the cross-entropy gradient of every Conv2d / Linear weight (grad_norm, snip),
the per-channel products of each conv / linear output and its gradient (fisher, hooked during
that same backward), and the input gradient of the summed logits (jacob_cov, a second
backward of the same graph). ``score_many`` runs it once for all the proxies that ask.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from nas.proxies.base import (
    Scorable,
    bn_mode,
    check_images,
    check_labels,
    cross_entropy,
)


@dataclass
class GradientPass:
    """What one forward + backward of a batch yields, per scored layer (module order)."""

    layers: list[nn.Conv2d | nn.Linear]
    weight_grads: list[Tensor | None]
    fisher: list[Tensor | None] = field(default_factory=list)  # per output channel, or None
    input_jacobian: Tensor | None = None  # d(sum of logits)/dx, [N, ...]


def gradient_pass(
    net: Scorable,
    x: Tensor,
    y: Tensor | None,
    *,
    proxy: str,
    fisher: bool = False,
    jacobian: bool = False,
) -> GradientPass:
    """Cross-entropy gradients of the scored weights on (x, y), BN in batch-statistics mode,
    plus fisher's per-channel sums and the input Jacobian where asked."""
    check_images(proxy, x, min_batch=2 if jacobian else 1)
    y = check_labels(proxy, x, y)
    layers = net.scored_layers(proxy)
    sums: dict[int, Tensor] = {}
    handles = []

    if fisher:
        # fisher.py: a hook on an identity after each conv / linear sees its output a and the
        # gradient d; per channel k the score is 1/2 mean_n (sum_spatial a * d)^2, summed over
        # the layer's calls.
        def forward_hook(m: nn.Module, inp: tuple[Tensor, ...], out: Tensor) -> None:
            if not out.requires_grad:
                return
            act = out.detach()

            def on_grad(grad: Tensor) -> None:
                g = grad.detach()
                prod = act * g
                g_nk = prod.sum(dim=tuple(range(2, prod.dim()))) if prod.dim() > 2 else prod
                del_k = g_nk.pow(2).mean(0).mul(0.5)
                key = id(m)
                sums[key] = sums[key] + del_k if key in sums else del_k

            handles.append(out.register_hook(on_grad))

        handles.extend(layer.register_forward_hook(forward_hook) for layer in layers)

    weights = [layer.weight for layer in layers]
    try:
        with bn_mode(net.net, "train"), torch.enable_grad():
            x_in = x.detach().requires_grad_(jacobian)
            logits = net.logits(x_in)
            net.num_classes_check(proxy, logits, y)
            loss = cross_entropy(logits, y)
            grads = torch.autograd.grad(loss, weights, retain_graph=jacobian, allow_unused=True)
            for h in handles:
                h.remove()
            handles.clear()
            jac = None
            if jacobian:
                # jacob_cov.py: y.backward(ones_like(y)); the Jacobian is x.grad
                # (a cell whose every path is `none` cuts the input off: J = 0, which the
                # score turns into NaN as the reference's correlation of zero rows does)
                (jac,) = torch.autograd.grad(logits.sum(), x_in, allow_unused=True)
                if jac is None:
                    jac = torch.zeros_like(x_in)
    finally:
        for h in handles:
            h.remove()
    return GradientPass(
        layers=layers,
        weight_grads=list(grads),
        fisher=[sums.get(id(m)) for m in layers] if fisher else [],
        input_jacobian=jac,
    )


__all__ = ["GradientPass", "gradient_pass"]
