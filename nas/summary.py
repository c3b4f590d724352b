"""Model summaries: parameter counts (with and without auxiliary heads) and multiply-accumulates.

Used by the CLIs to print what a network costs. Parameters are counted as the DARTS reference
does (``utils.count_parameters_in_MB``: every parameter whose name does not contain
"auxiliary"); multiply-accumulates are those of the convolutions and linear layers for one
input image in eval mode (auxiliary heads do not run there), the convention of the NAS papers'
"FLOPs" / "multi-adds" columns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from search_spaces.ops import FactorizedReduce


@dataclass(frozen=True)
class ModelSummary:
    params: int  # all parameters
    params_without_aux: int  # the papers' count: auxiliary head excluded
    macs: int  # multiply-accumulates for one input image, eval mode

    def __str__(self) -> str:
        return (
            f"params {self.params_without_aux / 1e6:.3f}M ({self.params_without_aux:,}; "
            f"{self.params:,} with auxiliary head), {self.macs / 1e6:.1f}M multiply-adds"
        )


def count_parameters(model: nn.Module, *, include_auxiliary: bool = False) -> int:
    return sum(
        p.numel()
        for name, p in model.named_parameters()
        if include_auxiliary or "auxiliary" not in name
    )


def count_macs(model: nn.Module, input_size: tuple[int, int, int]) -> int:
    """Conv and linear multiply-accumulates of one forward pass of a ``(C, H, W)`` image."""
    total = 0

    def conv_hook(m: nn.Module, inp: tuple[torch.Tensor, ...], out: torch.Tensor) -> None:
        nonlocal total
        assert isinstance(m, nn.Conv2d)
        kh, kw = m.kernel_size
        total += out[0].numel() * (m.in_channels // m.groups) * kh * kw

    def linear_hook(m: nn.Module, inp: tuple[torch.Tensor, ...], out: torch.Tensor) -> None:
        nonlocal total
        assert isinstance(m, nn.Linear)
        total += m.in_features * m.out_features

    def factorized_reduce_macs(c_in: int) -> Callable[..., None]:
        def hook(m: nn.Module, inp: tuple[torch.Tensor, ...], out: torch.Tensor) -> None:
            nonlocal total
            total += out[0].numel() * c_in  # each value the BN normalises cost C_in MACs

        return hook

    hooks = []
    for m in model.modules():
        if isinstance(m, FactorizedReduce):
            # Its two 1x1 convs run as functions on the picked pixels and are entered through
            # ``after_relu`` as well as ``forward``: count them where both paths meet, its BN.
            hooks.append(m.bn.register_forward_hook(factorized_reduce_macs(m.conv_1.in_channels)))
        elif isinstance(m, nn.Conv2d):
            hooks.append(m.register_forward_hook(conv_hook))
        elif isinstance(m, nn.Linear):
            hooks.append(m.register_forward_hook(linear_hook))
    was_training = model.training
    model.eval()
    try:
        device = next(model.parameters()).device
        with torch.no_grad():
            model(torch.zeros(1, *input_size, device=device))
    finally:
        for h in hooks:
            h.remove()
        model.train(was_training)
    return total


def summarize(model: nn.Module, input_size: tuple[int, int, int]) -> ModelSummary:
    return ModelSummary(
        params=count_parameters(model, include_auxiliary=True),
        params_without_aux=count_parameters(model),
        macs=count_macs(model, input_size),
    )
