"""Net2Wider for partial-channel supernets: widen every op from C/K_old to C/K_new channels.

Second stage of the pipeline (``nas.supernet``), used by DrNAS's progressive learning (Chen et
al., ICLR 2021, section 3.3), which borrows the widening of Net2Net (Chen, Goodfellow & Shlens,
ICLR 2016): when the partial-channel fraction grows between stages, each op's channels ``0 ..
c_old-1`` keep their weights and every new channel copies a randomly chosen existing one
(no rescaling, as DrNAS does it).

One channel map per op, ``m = [0, 1, ..., c_old-1, r_1, ..., r_(c_new-c_old)]``, is applied to
every channel dimension inside the op (depthwise filters, both sides of pointwise convs, BN
statistics and affine terms, biases), so a channel keeps one identity through the op; a
``FactorizedReduce`` gets a map per half. Parameters are widened in place (the same
``nn.Parameter`` objects, new data), so optimisers keep referring to them; the returned
expanders widen any tensor of a parameter's old shape the same way (its momentum buffer).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from nas.supernet.mixed_op import MixedOp
from search_spaces.ops import FactorizedReduce

Expander = Callable[[Tensor], Tensor]


def _channel_map(c_old: int, c_new: int, generator: torch.Generator) -> Tensor:
    extra = torch.randint(0, c_old, (c_new - c_old,), generator=generator)
    return torch.cat([torch.arange(c_old), extra])


def _expander(dim_maps: dict[int, Tensor]) -> Expander:
    def expand(t: Tensor) -> Tensor:
        for dim, idx in dim_maps.items():
            t = t.index_select(dim, idx.to(t.device))
        return t

    return expand


def _widen_tensor(module: nn.Module, name: str, dim_maps: dict[int, Tensor], out: dict) -> None:
    tensor = getattr(module, name, None)
    if tensor is None:
        return
    expand = _expander(dim_maps)
    if isinstance(tensor, nn.Parameter):
        out[tensor] = expand
        tensor.data = expand(tensor.data)
        tensor.grad = None  # a gradient of the old shape cannot accumulate into the new one
    else:  # a buffer (BN running statistics)
        setattr(module, name, expand(tensor))


def _widen_bn(bn: nn.BatchNorm2d, m: Tensor, out: dict) -> None:
    for name in ("weight", "bias", "running_mean", "running_var"):
        _widen_tensor(bn, name, {0: m}, out)
    bn.num_features = len(m)


def _widen_conv(conv: nn.Conv2d, m_out: Tensor, m_in: Tensor, out: dict) -> None:
    depthwise = conv.groups == conv.in_channels == conv.out_channels and conv.groups > 1
    maps = {0: m_out} if depthwise else {0: m_out, 1: m_in}
    _widen_tensor(conv, "weight", maps, out)
    _widen_tensor(conv, "bias", {0: m_out}, out)
    conv.out_channels = len(m_out)
    conv.in_channels = len(m_in)
    if depthwise:
        conv.groups = len(m_in)


def widen_op(
    op: nn.Module, c_old: int, c_new: int, generator: torch.Generator
) -> dict[nn.Parameter, Expander]:
    """Widen one candidate op built for ``c_old`` channels to ``c_new``; returns the expanders."""
    if c_new < c_old:
        raise ValueError(f"cannot widen an op from {c_old} to fewer channels ({c_new})")
    out: dict[nn.Parameter, Expander] = {}
    m = _channel_map(c_old, c_new, generator)
    done: set[int] = set()
    for module in op.modules():
        if id(module) in done:
            continue
        if isinstance(module, FactorizedReduce):
            half_old, half_new = c_old // 2, c_new // 2
            m_half = _channel_map(half_old, half_new, generator)
            _widen_conv(module.conv_1, m_half, m, out)
            _widen_conv(module.conv_2, m_half, m, out)
            _widen_bn(module.bn, torch.cat([m_half, m_half + half_old]), out)
            done.update(id(x) for x in module.modules())
        elif isinstance(module, nn.Conv2d):
            _widen_conv(module, m, m, out)
        elif isinstance(module, nn.BatchNorm2d):
            _widen_bn(module, m, out)
    return out


def widen_mixed_op(
    mixed: MixedOp, new_k: int, generator: torch.Generator
) -> dict[nn.Parameter, Expander]:
    """Switch a mixed op to partial-channel fraction 1/``new_k``, widening its ops."""
    if mixed.C % new_k:
        raise ValueError(
            f"partial-channel K={new_k} does not divide the {mixed.C} channels of an edge"
        )
    c_old, c_new = mixed.C // mixed.k, mixed.C // new_k
    if mixed.stride == 2 and c_new % 2 and "skip_connect" in mixed.op_names:
        raise ValueError(f"skip_connect at stride 2 needs an even channel count, got {c_new}")
    expanders: dict[nn.Parameter, Expander] = {}
    for name, op in zip(mixed.op_names, mixed.ops):
        if name != "none":
            expanders.update(widen_op(op, c_old, c_new, generator))
    mixed.k = new_k
    return expanders
