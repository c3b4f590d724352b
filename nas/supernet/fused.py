"""One convolution per cell state: the ReLU-first conv ops of every edge that reads it, fused.

Second stage of the pipeline (``nas.supernet``), used by the cells of the supernets that have a
``fuse`` switch (performance issue, item 1: "one convolution per input state, not per edge").
In a cell every edge ``(i, j)`` mixes its candidate ops on the state ``x_i`` (Liu et al., ICLR
2019, eq. 1: ``sum_k w_k o_k(x_i)``), so all the edges leaving state ``i`` run their ops on the
same input. Here the ops that run this forward on those edges, that start with a ReLU of the
state and continue as a chain of convolutions, batch norms and ReLUs (``ReLUConvBN``,
``DilConv``, ``SepConv`` of ``search_spaces.ops``), are grouped by kind (the same op class and
the same layers: kernel, stride, padding, dilation, groups, channels, batch-norm settings and
mode, dtype and device), and each group of ``n`` ops runs as one chain on the cell's one ReLU
of the state (``SharedReLU``):

* the first convolution reads the state: the ``n`` ops' filters are interleaved per channel
  group and run as one convolution with the ops' ``groups``, whose output channels come out
  group by group; one copy reorders them into ``n`` blocks, one per op. For ``groups == 1``
  (a plain convolution) the weights are just concatenated and nothing is reordered; for a
  depthwise first stage (``groups == C``) one depthwise convolution makes ``n`` outputs per
  channel;
* every later convolution reads the ``n`` blocks: one convolution with ``n`` times the groups
  over the concatenated weights (a pointwise 1x1: ``groups=n``; a depthwise stage:
  ``groups=n*C``);
* every batch norm is one batch norm over the concatenated channels, every ReLU one ReLU.

The result is split back into one channel block per op, and each edge mixes its ops as before
(``MixedOp``'s ``given``). Interleaving the first convolution's filters, rather than repeating
the state ``n`` times along channels and running ``n`` times the groups, copies the output (a
quarter of the input at stride 2) instead of the input, and measured no slower on balance
(``experiments/benchmarks/fused_state.py``, ``docs/performance.md``).

The per-op modules keep owning their parameters and running statistics: the fused weights are
``torch.stack`` / ``torch.cat`` of theirs in every forward (autograd gives each its own
gradient), so state dicts, checkpoints, op masks, projections and widening see the same tensors
as without fusion. Batch norm normalises each channel by that channel's own statistics, so one
BN over the concatenated channels computes what the per-op BNs compute; the running statistics
it updates are copied back into each op's buffers (and each op's ``num_batches_tracked`` counts
the step).

Only the ops that run are fused (``active`` and not ``none``: a masked, pruned, projected-away
or unsampled op is not computed); a kind with a single op this forward, an edge under partial
channels (K > 1) or without the shared ReLU (the proxies' hooks), a subclass of the op classes,
an op with a hook on any of its layers after the ReLU (or a global module hook), and every op
under ``torch.compile`` (``compile_supernet``: the compiler fuses as it sees fit) run the unfused
way.

The results equal the unfused ones to float rounding (the fused kernels sum in another order:
the input gradient of the state in one convolution instead of one per op, a grouped kernel's
blocking; in float32 even the forward of the depthwise and grouped kernels), so a fixed-seed
float32 search rounds differently with it on. Off by default (the supernets' ``fuse``): on a
2-core CPU it measured no clear gain (``docs/performance.md``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from nas.supernet.mixed_op import MixedOp, global_hooks, hooked
from search_spaces.ops import BatchNorm2d, DilConv, ReLUConvBN, SepConv

# edge index -> op index -> that op's output, for ``MixedOp.forward(given=...)``
FusedOutputs = dict[int, dict[int, Tensor]]

# the op classes whose layers after the first ReLU are a chain of convs, BNs and ReLUs
FUSABLE_OPS = (ReLUConvBN, DilConv, SepConv)


class FusingCell(nn.Module):
    """A supernet cell that can fuse the ops of the edges reading one state (``fuse``; the
    supernets' ``fuse`` property switches every such cell). It has ``ops``, a ``MixedOp`` per
    edge, and ``edges_from``, state -> the edges that read it."""

    fuse = False
    ops: nn.ModuleList
    edges_from: dict[int, list[int]]

    def fused_from(
        self,
        src: int,
        relu_of: Callable[[nn.Module, int, list[bool]], Tensor | None],
        active: list[list[bool]],
    ) -> FusedOutputs:
        """The fused ops' outputs of the edges leaving state ``src`` (edge -> op -> output);
        ``relu_of(mixed_op, src, active_O)``: the cell's shared ReLU (``SharedReLU.of``)."""
        edges = []
        for e in self.edges_from.get(src, []):
            op = self.ops[e]
            assert isinstance(op, MixedOp)
            edges.append((e, op, active[e]))
        return fused_outputs(edges, lambda e: relu_of(self.ops[e], src, active[e]))


class _Member(NamedTuple):
    edge: int
    k: int  # the op's index on its edge
    layers: tuple[nn.Module, ...]  # the op's layers after its ReLU


def _layer_kind(layer: nn.Module) -> tuple[object, ...] | None:
    """What two ops' layers at one position must share to run as one; None: not fusable.
    Exact classes: a subclass may compute otherwise (``ops.BatchNorm2d`` differs from
    ``nn.BatchNorm2d`` only in the layout it computes a narrow NHWC input in)."""
    if hooked(layer):
        return None
    if type(layer) is nn.ReLU:
        return ("relu",)
    if type(layer) is nn.Conv2d:
        assert isinstance(layer, nn.Conv2d)
        if layer.padding_mode != "zeros" or isinstance(layer.padding, str):
            return None
        w = layer.weight
        return (
            "conv", layer.in_channels, layer.out_channels, layer.kernel_size, layer.stride,
            layer.padding, layer.dilation, layer.groups, layer.bias is not None, w.dtype,
            w.device,
        )  # fmt: skip
    if type(layer) in (nn.BatchNorm2d, BatchNorm2d):
        assert isinstance(layer, nn.BatchNorm2d)
        if layer.momentum is None:  # a cumulative running average per BN
            return None
        return (
            "bn", layer.num_features, layer.eps, layer.momentum, layer.affine,
            layer.track_running_stats, layer.training, layer.running_mean is not None,
        )  # fmt: skip
    return None


def _member(edge: int, k: int, op: nn.Module) -> tuple[tuple[object, ...], _Member] | None:
    """The op's kind and the op as a fusion member, or None when it must run its own way."""
    if type(op) not in FUSABLE_OPS:
        return None
    assert isinstance(op, nn.Sequential)
    layers = tuple(op)
    if len(layers) < 2 or type(layers[0]) is not nn.ReLU or type(layers[1]) is not nn.Conv2d:
        return None
    kinds = []
    for layer in layers[1:]:
        kind = _layer_kind(layer)
        if kind is None:
            return None
        kinds.append(kind)
    return (type(op), *kinds), _Member(edge, k, layers[1:])


def groups_of(
    edges: Sequence[tuple[int, MixedOp, list[bool]]],
) -> list[list[_Member]]:
    """The fusable ops that run this forward on ``edges`` (edge index, mixed op, its active
    ops; the edges that read one state), grouped by kind; groups of one are left out. None
    under ``torch.compile``, which picks its own kernels for the unfused graph."""
    if global_hooks() or torch.compiler.is_compiling():
        return []
    groups: dict[tuple[object, ...], list[_Member]] = {}
    for e, mixed, active_O in edges:
        if mixed.k != 1 or not mixed.share_relu:
            continue
        for k in mixed.running_ops(active_O):
            found = _member(e, k, mixed.ops[k])
            if found is not None:
                kind, m = found
                groups.setdefault(kind, []).append(m)
    return [g for g in groups.values() if len(g) > 1]


def _batch_norm(y: Tensor, bns: list[nn.BatchNorm2d]) -> Tensor:
    """``cat([bn_i(y_i)])`` for the channel blocks ``y_i`` of ``y``, as ``BatchNorm2d.forward``
    runs each (all of one kind: ``_layer_kind``), the running statistics written back to each
    BN."""
    b0 = bns[0]
    factor = b0.momentum
    assert factor is not None  # _layer_kind
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


def _regroup(y: Tensor, groups: int, n: int) -> Tensor:
    """``y``'s channels, ordered (group, op, channel of the group's output), reordered to
    (op, group, channel): one block per op. One copy, in ``y``'s memory layout."""
    b, c, h, w = y.shape
    if y.dim() == 4 and y.stride(1) == 1 and c > 1:  # NHWC
        nhwc = y.permute(0, 2, 3, 1).reshape(b, h, w, groups, n, c // (groups * n))
        return nhwc.transpose(3, 4).reshape(b, h, w, c).permute(0, 3, 1, 2)
    return y.reshape(b, groups, n, c // (groups * n), h, w).transpose(1, 2).reshape(b, c, h, w)


def _first_conv(x: Tensor, convs: list[nn.Conv2d]) -> Tensor:
    """``cat([conv_i(x)])``: the ``n`` convolutions of one state's input ``x`` as one, with
    each channel group's filters of all ops side by side, then reordered per op."""
    c0, n, g = convs[0], len(convs), convs[0].groups
    weight = torch.stack([c.weight.view(g, -1, *c.weight.shape[1:]) for c in convs], 1)
    weight = weight.reshape(-1, *weight.shape[3:])
    bias = None
    if c0.bias is not None:
        biases = [c.bias.view(g, -1) for c in convs]  # type: ignore[union-attr]
        bias = torch.stack(biases, 1).reshape(-1)
    y = F.conv2d(x, weight, bias, c0.stride, c0.padding, c0.dilation, g)
    return y if g == 1 else _regroup(y, g, n)


def _block_conv(y: Tensor, convs: list[nn.Conv2d]) -> Tensor:
    """``cat([conv_i(y_i)])`` for the ``n`` channel blocks ``y_i`` of ``y``: one convolution
    with ``n`` times the groups over the concatenated weights."""
    c0 = convs[0]
    weight = torch.cat([c.weight for c in convs])
    bias = None if c0.bias is None else torch.cat([c.bias for c in convs])  # type: ignore[misc]
    return F.conv2d(y, weight, bias, c0.stride, c0.padding, c0.dilation, c0.groups * len(convs))


def run_group(relu_x: Tensor, group: list[_Member], out: FusedOutputs) -> None:
    """The layers of the ops of ``group`` (one kind) as one chain on ``relu_x`` (the ReLU of
    the state their edges read); each op's output, a channel block of the result, into
    ``out``."""
    y = relu_x
    for j, layer in enumerate(group[0].layers):
        layers = [m.layers[j] for m in group]
        if isinstance(layer, nn.Conv2d):
            convs: list[nn.Conv2d] = layers  # type: ignore[assignment]
            y = _first_conv(y, convs) if j == 0 else _block_conv(y, convs)
        elif isinstance(layer, nn.BatchNorm2d):
            y = _batch_norm(y, layers)  # type: ignore[arg-type]
        else:  # nn.ReLU (_layer_kind)
            y = torch.relu(y)
    sizes = [y.shape[1] // len(group)] * len(group)
    for m, part in zip(group, y.split(sizes, 1)):
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
