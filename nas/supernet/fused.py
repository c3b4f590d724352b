"""One convolution per cell state: the ReLU-conv-BN ops of every edge that reads it, fused.

Second stage of the pipeline (``nas.supernet``); the NB201 supernet's cells use it (performance
issue, item 1: "one convolution per input state, not per edge"). In a NAS-Bench-201 cell every
edge leaving a state runs its own ``nor_conv_1x1`` and ``nor_conv_3x3`` (ReLU, conv, BN) on that
same state: node 0 feeds three edges, node 1 two. Here the ops that run this forward, over all
the edges of one state, are computed as one convolution per kernel size over their weights
concatenated along the output channels, from the cell's one ReLU of the state
(``SharedReLU``), and one batch norm over the concatenated channels; the output is split back
per op, and each edge mixes its ops as before (``MixedOp``'s ``given``).

The per-op modules keep owning their parameters and running statistics: the fused weight is a
``torch.cat`` of theirs in every forward (autograd gives each its own gradient), so state
dicts, checkpoints, op masks, projections and widening see the same tensors as without fusion.
Batch norm normalises each channel by that channel's own statistics, so one BN over the
concatenated channels computes what the per-op BNs compute; the running statistics it updates
are copied back into each op's buffers (and each op's ``num_batches_tracked`` counts the step).

Only the ops that run are fused (``active`` and not ``none``: a masked, pruned, projected-away
or unsampled op is not computed); a kind with a single op this forward, an edge under partial
channels (K > 1) or without the shared ReLU (the proxies' hooks), and an op whose conv or BN
carries a hook run the unfused way.

The forward is bit-identical to the unfused one; the backward sums the state's input gradient
in one convolution instead of one per op, so float32 results differ by rounding. Off by default
(``NB201Supernet.fuse``): on a 2-core CPU it measured slower (``docs/performance.md``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import torch
from torch import Tensor, nn
from torch.nn import functional as F
from torch.nn.modules import module as _module

from nas.supernet.mixed_op import MixedOp
from search_spaces.ops import BatchNorm2d, ReLUConvBN

# edge index -> op index -> that op's output, for ``MixedOp.forward(given=...)``
FusedOutputs = dict[int, dict[int, Tensor]]


class _Member(NamedTuple):
    edge: int
    k: int  # the op's index on its edge
    conv: nn.Conv2d
    bn: nn.BatchNorm2d


def _hooked(m: nn.Module) -> bool:
    return bool(
        m._forward_hooks or m._forward_pre_hooks or m._backward_hooks or m._backward_pre_hooks
    )


def _global_hooks() -> bool:
    return bool(
        _module._global_forward_hooks
        or _module._global_forward_pre_hooks
        or _module._global_backward_hooks
        or _module._global_backward_pre_hooks
    )


def _member(edge: int, k: int, op: nn.Module) -> _Member | None:
    """The op as a fusion member, or None when it must run its own way."""
    if type(op) is not ReLUConvBN or len(op) != 3:
        return None
    conv, bn = op[1], op[2]
    # exact classes: a subclass may compute otherwise (ops.BatchNorm2d differs from
    # nn.BatchNorm2d only in the layout it computes a narrow NHWC input in)
    if type(conv) is not nn.Conv2d or type(bn) not in (nn.BatchNorm2d, BatchNorm2d):
        return None
    assert isinstance(conv, nn.Conv2d) and isinstance(bn, nn.BatchNorm2d)
    if conv.groups != 1 or conv.padding_mode != "zeros" or isinstance(conv.padding, str):
        return None
    if bn.momentum is None or _hooked(conv) or _hooked(bn):  # None: a per-BN running average
        return None
    return _Member(edge, k, conv, bn)


def _kind(m: _Member) -> tuple[object, ...]:
    """What must be equal for two ops to share one convolution and one batch norm."""
    c, b = m.conv, m.bn
    w = c.weight
    return (
        c.in_channels, c.kernel_size, c.stride, c.padding, c.dilation, c.bias is not None,
        w.dtype, w.device, b.eps, b.momentum, b.affine, b.track_running_stats, b.training,
        b.running_mean is not None,
    )  # fmt: skip


def groups_of(
    edges: Sequence[tuple[int, MixedOp, list[bool]]],
) -> list[list[_Member]]:
    """The fusable ops that run this forward on ``edges`` (edge index, mixed op, its active
    ops; the edges that read one state), grouped by kind; groups of one are left out."""
    if _global_hooks():
        return []
    groups: dict[tuple[object, ...], list[_Member]] = {}
    for e, mixed, active_O in edges:
        if mixed.k != 1 or not mixed.share_relu:
            continue
        for k in mixed.running_ops(active_O):
            m = _member(e, k, mixed.ops[k])
            if m is not None:
                groups.setdefault(_kind(m), []).append(m)
    return [g for g in groups.values() if len(g) > 1]


def _batch_norm(y: Tensor, bns: list[nn.BatchNorm2d]) -> Tensor:
    """``cat([bn_i(y_i)])`` for the channel blocks ``y_i`` of ``y``, as ``BatchNorm2d.forward``
    runs each (all of one kind: ``_kind``), the running statistics written back to each BN."""
    b0 = bns[0]
    factor = b0.momentum
    assert factor is not None  # _member
    if b0.training and b0.track_running_stats:
        for bn in bns:
            if bn.num_batches_tracked is not None:
                bn.num_batches_tracked.add_(1)
    use_running = not b0.training or b0.track_running_stats
    mean = var = None
    if use_running and b0.running_mean is not None:
        mean = torch.cat([bn.running_mean for bn in bns])  # type: ignore[misc]
        var = torch.cat([bn.running_var for bn in bns])  # type: ignore[misc]
    batch_stats = b0.training or b0.running_mean is None
    weight = bias = None
    if b0.affine:
        weight = torch.cat([bn.weight for bn in bns])
        bias = torch.cat([bn.bias for bn in bns])
    out = F.batch_norm(y, mean, var, weight, bias, batch_stats, factor, b0.eps)
    if batch_stats and mean is not None and var is not None:  # updated in the concatenation
        sizes = [bn.num_features for bn in bns]
        for bn, m, v in zip(bns, mean.split(sizes), var.split(sizes)):
            bn.running_mean.copy_(m)  # type: ignore[union-attr]
            bn.running_var.copy_(v)  # type: ignore[union-attr]
    return out


def run_group(relu_x: Tensor, group: list[_Member], out: FusedOutputs) -> None:
    """One convolution and one batch norm for ``group`` on ``relu_x`` (the ReLU of the state
    its edges read); each op's output, a channel block of the result, into ``out``."""
    c0 = group[0].conv
    weight = torch.cat([m.conv.weight for m in group])
    bias = None if c0.bias is None else torch.cat([m.conv.bias for m in group])  # type: ignore[misc]
    y = F.conv2d(relu_x, weight, bias, c0.stride, c0.padding, c0.dilation)
    y = _batch_norm(y, [m.bn for m in group])
    for m, part in zip(group, y.split([m.conv.out_channels for m in group], 1)):
        out.setdefault(m.edge, {})[m.k] = part


def fused_outputs(
    edges: Sequence[tuple[int, MixedOp, list[bool]]],
    relu_of: Callable[[int], Tensor | None],
) -> FusedOutputs:
    """The outputs of the fused ops of ``edges`` (all reading one state): edge -> op -> output.
    ``relu_of(edge)``: the cell's shared ReLU of the state, for an edge whose ops want it."""
    out: FusedOutputs = {}
    groups = groups_of(edges)
    if not groups:
        return out
    relu_x = relu_of(groups[0][0].edge)
    assert relu_x is not None  # a member runs a ReLU-first op on a sharing, full-width edge
    for group in groups:
        run_group(relu_x, group, out)
    return out
