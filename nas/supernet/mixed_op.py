"""The mixed operation of one supernet edge: a weighted sum of its candidate operations.

Second stage of the pipeline (``nas.supernet``). DARTS (Liu et al., ICLR 2019, eq. 1):
``o(x) = sum_k w_k o_k(x)``, with the weights ``w`` supplied by the search strategy (a softmax
for DARTS, a Dirichlet sample for DrNAS), so the op knows nothing about strategies.

Partial channels (PC-DARTS, Xu et al., ICLR 2020, eq. 2; used by DrNAS without edge
normalisation): only the first ``C / K`` channels go through the ops; the rest bypass them
(max-pooled 2x2 on stride-2 edges), are concatenated back, and the channels are shuffled with
``K`` groups. The split, the weighted sum, the bypass, the shuffle and the node's running sum are
two autograd nodes per edge (``_SplitChannels``, ``_PartialChannelMix``) that write each output
once, instead of slices, ``cat`` and a shuffle copy, each with a full-size backward copy; the
same arithmetic, so the same bits.

Auxiliary op (DARTS-, Chu et al., ICLR 2021, H4): ``aux`` (None unless a search component sets
it) is added to the edge's output as ``aux_scale * aux(x)``, outside the mixing weights.

Shared ReLU: the ops that start with a ReLU of their input (NB201's ``nor_conv``, DARTS's
``sep_conv`` / ``dil_conv``, the stride-2 ``FactorizedReduce``) take ``relu_x``, the ReLU of the
edge's input state computed once by the cell for every edge and op that reads the state, and run
the layers after their ReLU (``after_relu``): the same values as each op's own ReLU (the
reference runs one per op: 12 of the same 3 tensors per NB201 cell, 56 of 5 per DARTS cell), one
ReLU backward per state, and one saved copy. ``share_relu = False`` (set by the proxies, whose
hooks watch the ReLU modules) runs every op's own ReLU instead.

Shared pools: a pooling op (or one that starts with a pool, as DARTS's pool then batch norm)
takes its pool's output from ``pooled``, the cell's pool of the edge's input state computed once
per state and pool setting (``shared_head``): the same values as each edge's own pool (the three
edges leaving an NB201 cell's input pool it three times over in the reference), one pool forward
and backward per state, and one saved output. The backward then sums the edges' gradients
before the one pool backward instead of after each: the same to float rounding.
``share_pools = False`` (set by the proxies with ``share_relu``) runs every op's own pool.

Fused ops (``nas.supernet.fused``, the cells with ``fuse`` on): ``given`` maps op indices to
outputs the cell has already computed, one convolution chain per kind of op for every edge that
reads the same state; those ops are mixed from there instead of being run.

Cost: an op whose weight is exactly zero, whose mask entry is off, or that is ``none``, is not
run at all (the reference multiplies ``none``'s zeros and every other output by its weight);
under ``Supernet.zero_weight_ops_run`` (SDARTS, SNAS) an unmasked op of weight zero runs and is
multiplied by its zero like the others, so it is trained as the reference trains it.
The weighted sum is one autograd node per edge (``weighted_sum``): the forward accumulates in
place, and the gradient of each mixing weight, ``<dL/do, o_k(x)>``, is a dot product instead of
a product tensor that is then summed; op outputs are kept for the backward only when the
mixing weights need a gradient.

Weight entanglement (``nas.supernet.entangle``, set by the ``weight_entangle`` component):
``entangled`` lists groups of ops of one kind at several kernel sizes; a group whose members
run is computed as its largest op with the alpha-weighted centre crops of its kernel, added to
the edge's sum with weight 1; the other ops are mixed as above.

Binary gates (ProxylessNAS, ``nas.strategies.proxylessnas``): ``gate_probe``, set by the strategy
around one forward, names ops of gate 0 whose gate still gets its gradient ``<dL/do, o_k(x)>``,
from an output computed without autograd (``_GateProbe``), so only the active path holds
activations for the backward.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from typing import Any, ClassVar

import torch
from torch import Tensor, nn
from torch.nn import functional as F
from torch.nn.modules import module as _module

from nas.supernet.entangle import EntangledGroup, group_output, single_output

# RELU_FIRST: the ops where ``op.after_relu(relu(x)) == op(x)``
from search_spaces.ops import RELU_FIRST, BatchNorm2d, build_op


def _dot(a: Tensor, b: Tensor) -> Tensor:
    """Sum of ``a * b`` without the product tensor, for tensors of one memory layout. Half
    precision (autocast's bf16 / fp16 outputs) is taken in float32: the sum of a million
    products needs its precision, and on CPUs torch's bf16 dot is 5x slower than the casts and
    a float32 dot together."""
    if a.dtype in (torch.bfloat16, torch.float16):
        a, b = a.float(), b.float()
    if a.is_contiguous() and b.is_contiguous():
        return torch.dot(a.view(-1), b.view(-1))
    if (
        a.dim() == 4
        and a.is_contiguous(memory_format=torch.channels_last)
        and b.is_contiguous(memory_format=torch.channels_last)
    ):
        return torch.dot(a.permute(0, 2, 3, 1).reshape(-1), b.permute(0, 2, 3, 1).reshape(-1))
    return (a * b).sum()


def hooked(m: nn.Module) -> bool:
    """Whether ``m`` has forward or backward hooks of its own."""
    return bool(
        m._forward_hooks or m._forward_pre_hooks or m._backward_hooks or m._backward_pre_hooks
    )


def global_hooks() -> bool:
    """Whether module hooks are registered for every module (``nn.modules.module``'s)."""
    return bool(
        _module._global_forward_hooks
        or _module._global_forward_pre_hooks
        or _module._global_backward_hooks
        or _module._global_backward_pre_hooks
    )


# the parameter-free layers whose output depends on the input alone (no state, no randomness)
_POOLS = (nn.AvgPool2d, nn.MaxPool2d)


def pool_key(layer: nn.Module) -> tuple[object, ...]:
    """What two pooling layers must share to compute the same output from the same input."""
    return (type(layer),) + tuple(
        getattr(layer, a, None)
        for a in (
            "kernel_size",
            "stride",
            "padding",
            "dilation",
            "ceil_mode",
            "count_include_pad",
            "divisor_override",
            "return_indices",
        )
    )


def shared_head(op: nn.Module) -> tuple[nn.Module, list[nn.Module]] | None:
    """The pooling layer ``op`` starts with and the layers after it, if the pool's output can
    be shared with the other edges that read the same state (``MixedOp.forward``'s
    ``pooled``): ``op`` is a pool, or a ``Sequential`` that starts with one (DARTS's pool then
    batch norm) whose other layers do not work in place; exact classes, no hooks on ``op`` or
    the pool, none global."""
    layers = list(op.children()) if type(op) is nn.Sequential else [op]
    if not layers:
        return None
    head, rest = layers[0], layers[1:]
    if type(head) not in _POOLS or getattr(head, "return_indices", False):
        return None
    if any(getattr(m, "inplace", False) for m in rest):
        return None
    if hooked(op) or hooked(head) or global_hooks():
        return None
    return head, rest


class _WeightedSum(torch.autograd.Function):
    """``acc + sum_j weights_O[ops[j]] * ys[j]`` (``acc`` may be None), one node per edge."""

    @staticmethod
    def forward(
        ctx: Any, acc: Tensor | None, weights_O: Tensor, ops: list[int], *ys: Tensor
    ) -> Tensor:
        w = weights_O.detach()
        out = ys[0] * w[ops[0]] if acc is None else torch.addcmul(acc, ys[0], w[ops[0]])
        for k, y in zip(ops[1:], ys[1:]):
            out.addcmul_(y, w[k])
        ctx.has_acc = acc is not None
        ctx.ops = ops
        ctx.weights_need_grad = ctx.needs_input_grad[1]
        ctx.save_for_backward(weights_O, *(ys if ctx.weights_need_grad else ()))
        return out

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        weights_O, *ys = ctx.saved_tensors
        ops = ctx.ops
        grad_ys = [
            grad * weights_O[k] if ctx.needs_input_grad[3 + j] else None for j, k in enumerate(ops)
        ]
        grad_w = None
        if ctx.weights_need_grad:
            # under autocast the op outputs (and so the dots) may be bf16 / fp16
            dots = torch.stack([_dot(grad, y) for y in ys]).to(weights_O.dtype)
            grad_w = weights_O.new_zeros(weights_O.shape).index_put(
                (torch.tensor(ops, device=weights_O.device),), dots
            )
        return (grad if ctx.has_acc else None, grad_w, None, *grad_ys)


def weighted_sum(acc: Tensor | None, weights_O: Tensor, ops: list[int], ys: list[Tensor]) -> Tensor:
    """``acc + sum_j weights_O[ops[j]] * ys[j]`` (DARTS eq. 1 for the active ops of one edge)."""
    out: Tensor = _WeightedSum.apply(acc, weights_O, ops, *ys)
    return out


def channel_shuffle(x: Tensor, groups: int) -> Tensor:
    """Interleave ``groups`` channel groups (ShuffleNet), as PC-DARTS does after each edge."""
    n, c, h, w = x.shape
    return x.view(n, groups, c // groups, h, w).transpose(1, 2).reshape(n, c, h, w)


def _layout(x: Tensor) -> torch.memory_format:
    """NHWC for a tensor (or a channel slice of one) laid out channels-last, else NCHW."""
    if x.dim() == 4 and x.stride(1) == 1 and x.shape[1] > 1:
        return torch.channels_last
    return torch.contiguous_format


def _slots(out: Tensor, k: int) -> Tensor:
    """``out`` [N, C, H, W] (NCHW or NHWC) viewed as [N, C/K, K, H, W] (channel ``j*K + g`` at
    ``[:, j, g]``), a view in either layout."""
    n, c, h, w = out.shape
    if _layout(out) == torch.channels_last:
        return out.permute(0, 2, 3, 1).view(n, h, w, c // k, k).permute(0, 3, 4, 1, 2)
    return out.view(n, c // k, k, h, w)


class _SplitChannels(torch.autograd.Function):
    """``(x[:, :c], x[:, c:])``: the partial-channel split of an edge, views of ``x``.

    Slicing's own backward zero-fills a gradient of ``x``'s full size per slice and autograd
    adds the two; this one writes both parts into one buffer of ``x``'s layout.
    """

    @staticmethod
    def forward(ctx: Any, x: Tensor, c: int) -> tuple[Tensor, Tensor]:
        ctx.c, ctx.shape, ctx.layout = c, x.shape, _layout(x)
        return x[:, :c], x[:, c:]

    @staticmethod
    def backward(ctx: Any, g_op: Tensor | None, g_bypass: Tensor | None) -> tuple[Tensor, None]:
        c = ctx.c
        ref = g_op if g_op is not None else g_bypass
        assert ref is not None
        grad = torch.empty(ctx.shape, dtype=ref.dtype, device=ref.device, memory_format=ctx.layout)
        for part, g in ((grad[:, :c], g_op), (grad[:, c:], g_bypass)):
            if g is None:
                part.zero_()
            else:
                part.copy_(g)
        return grad, None


class _PartialChannelMix(torch.autograd.Function):
    """``acc + channel_shuffle(cat([sum_j w[ops[j]] ys[j], bypass]), K)``, one output write.

    The shuffle puts channel ``j`` of group ``g`` of the concatenation at output channel
    ``j * K + g``: viewed as ``[N, C/K, K, H, W]``, slot 0 holds the mixed ops and slots 1..K-1
    the bypass. Writing the weighted sum and the bypass straight into those strided views saves
    the concatenation's and the shuffle's copies (and their backward copies); the arithmetic is
    that of ``weighted_sum`` then ``acc + out``, so the results are the same bits.
    """

    @staticmethod
    def forward(
        ctx: Any,
        acc: Tensor | None,
        weights_O: Tensor,
        ops: list[int],
        k: int,
        bypass: Tensor,
        *ys: Tensor,
    ) -> Tensor:
        n, c_bypass, h, w_ = bypass.shape
        c_op = c_bypass // (k - 1)
        ctx.layout = _layout(bypass)
        out = torch.empty(
            (n, c_op * k, h, w_), dtype=bypass.dtype, device=bypass.device, memory_format=ctx.layout
        )
        slots = _slots(out, k)
        mixed = slots[:, :, 0]
        w = weights_O.detach()
        if ys:
            torch.mul(ys[0], w[ops[0]], out=mixed)
            for j, y in zip(ops[1:], ys[1:]):
                mixed.addcmul_(y, w[j])
        else:
            mixed.zero_()
        slots[:, :, 1:].copy_(bypass.view(n, k - 1, c_op, h, w_).transpose(1, 2))
        if acc is not None:
            out.add_(acc)
        ctx.has_acc = acc is not None
        ctx.ops, ctx.k = ops, k
        ctx.weights_need_grad = ctx.needs_input_grad[1]
        ctx.save_for_backward(weights_O, *(ys if ctx.weights_need_grad else ()))
        return out

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        weights_O, *ys = ctx.saved_tensors
        ops, k = ctx.ops, ctx.k
        grad = grad.contiguous(memory_format=ctx.layout)
        n, c, h, w_ = grad.shape
        c_op = c // k
        slots = _slots(grad, k)
        g_mixed = slots[:, :, 0]
        g_bypass = None
        if ctx.needs_input_grad[4]:
            g_bypass = torch.empty(
                (n, c - c_op, h, w_), dtype=grad.dtype, device=grad.device, memory_format=ctx.layout
            )
            g_bypass.view(n, k - 1, c_op, h, w_).copy_(slots[:, :, 1:].transpose(1, 2))
        grad_ys = [
            g_mixed * weights_O[j] if ctx.needs_input_grad[5 + i] else None
            for i, j in enumerate(ops)
        ]
        grad_w = None
        if ctx.weights_need_grad:
            grad_w = weights_O.new_zeros(weights_O.shape)
            if ys:  # no op ran (a sampled `none`): the weights get no gradient from this edge
                dots = torch.stack([_dot(g_mixed, y) for y in ys]).to(weights_O.dtype)
                grad_w = grad_w.index_put((torch.tensor(ops, device=weights_O.device),), dots)
        return (grad if ctx.has_acc else None, grad_w, None, None, g_bypass, *grad_ys)


class _GateProbe(torch.autograd.Function):
    """``out`` unchanged; the gradient of ``weights_O[k]`` for each ``k`` in
    ``mixed.gate_probe`` is ``<dL/d out, op_k(x)>``, as if ``weights_O[k] * op_k(x)`` with a
    detached ``op_k(x)`` had been added to ``out``: the gates of ProxylessNAS's binary paths
    (Cai et al., ICLR 2019, eq. 4; mit-han-lab/proxylessnas ``search/modules/mix_op.py``,
    ``MixedEdge.forward``). The probed gates must be 0 (their terms are not added: the value is
    the active ops' alone) and no gradient reaches ``x`` or the probed ops' parameters through
    them. ``mixed.gate_probe_recompute``: the outputs are recomputed in the backward without
    autograd (the reference's ``full_v2``, ``ArchGradientFunction``), so the forward keeps only
    ``x``; otherwise they are computed in the forward and kept (its ``two`` and ``full``)."""

    @staticmethod
    def forward(ctx: Any, out: Tensor, weights_O: Tensor, mixed: MixedOp, x: Tensor) -> Tensor:
        probe = list(mixed.gate_probe or [])
        ctx.mixed, ctx.probe = mixed, probe
        ctx.shape, ctx.w_dtype = weights_O.shape, weights_O.dtype
        ctx.recompute = mixed.gate_probe_recompute
        if ctx.recompute:
            # the backward recomputes under the forward's autocast (as activation checkpointing)
            device = x.device.type
            ctx.autocast = (device, torch.get_autocast_dtype(device),
                            torch.is_autocast_enabled(device))  # fmt: skip
            ctx.save_for_backward(x)
        else:
            with torch.no_grad():
                ys = [mixed.probe_output(x, k) for k in probe]
            ctx.has_y = [y is not None for y in ys]
            ctx.save_for_backward(*(y for y in ys if y is not None))
        return out.view_as(out)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        mixed: MixedOp = ctx.mixed
        g = mixed.probe_grad(grad)
        grad_w = None
        if ctx.needs_input_grad[1]:
            dots: list[Tensor | float] = []
            if ctx.recompute:
                (x,) = ctx.saved_tensors
                device, dtype, enabled = ctx.autocast
                with torch.no_grad(), torch.autocast(device, dtype=dtype, enabled=enabled):
                    for k in ctx.probe:
                        y = mixed.probe_output(x, k)
                        dots.append(0.0 if y is None else _dot(g, y.to(g.dtype)))
                        del y
            else:
                saved = iter(ctx.saved_tensors)
                dots = [_dot(g, next(saved).to(g.dtype)) if has else 0.0 for has in ctx.has_y]
            grad_w = torch.zeros(ctx.shape, dtype=ctx.w_dtype, device=grad.device)
            for k, d in zip(ctx.probe, dots):
                grad_w[k] = d
        return grad, grad_w, None, None


class MixedOp(nn.Module):
    """One edge of a supernet cell with candidates ``ops`` (in the space's order).

    ``forward(x, weights_O, active_O, acc)`` adds ``sum_k weights_O[k] * op_k(x)`` over the
    active ops to the accumulator ``acc`` (a node's running sum), or returns it if ``acc`` is
    None. ``active_O`` is a list of Python bools, computed once per forward for the whole cell,
    so skipping an op needs no device synchronisation per op.
    """

    #: whether ``forward`` adds the auxiliary term ``aux_scale * aux(x)`` (DARTS-)
    takes_aux: ClassVar[bool] = True

    def __init__(
        self,
        C: int,
        stride: int,
        ops: tuple[str, ...],
        *,
        partial_channels: int = 1,
        bn_after_pool: bool = True,
        track_running_stats: bool = True,
    ) -> None:
        super().__init__()
        if C % partial_channels:
            raise ValueError(
                f"partial-channel K={partial_channels} does not divide the {C} channels of an "
                "edge; choose C and K so that every cell's channel count is a multiple of K"
            )
        self.C = C
        self.stride = stride
        self.op_names = ops
        self.k = partial_channels
        c_op = C // partial_channels
        self.ops = nn.ModuleList()
        for name in ops:
            if name == "none":
                # a placeholder keeps module indices equal to op indices; it is never run
                self.ops.append(nn.Identity())
                continue
            if name == "skip_connect" and stride == 2 and c_op % 2:
                raise ValueError(
                    f"skip_connect at stride 2 needs an even channel count, but C/K = {C}/"
                    f"{partial_channels} = {c_op}; choose C and K so that C/K is even"
                )
            op = build_op(
                name, c_op, c_op, stride, affine=False, track_running_stats=track_running_stats
            )
            if bn_after_pool and "pool" in name:
                op = nn.Sequential(
                    op, BatchNorm2d(c_op, affine=False, track_running_stats=track_running_stats)
                )
            self.ops.append(op)
        self._runnable = [name != "none" for name in ops]
        # DARTS-'s auxiliary skip (nas.strategies.components.darts_minus): outside the weights
        self.aux: nn.Module | None = None
        self.aux_scale = 0.0
        # GDAS's NB201 forward (set through Supernet.set_unselected_scalars): see
        # add_unselected_scalars below
        self.unselected_scalars = False
        # the ReLU of the input is taken once per state by the cell (off: each op its own)
        self.share_relu = True
        # the pool of the input is taken once per state and setting by the cell (off: each
        # op its own; see shared_head)
        self.share_pools = True
        # binary gates (ProxylessNAS, nas.strategies.proxylessnas): op indices whose gate gets a
        # gradient this forward without the op taking part in the graph (see _GateProbe);
        # set by the strategy around one forward, None otherwise
        self.gate_probe: list[int] | None = None
        # True: their outputs are recomputed in the backward ("full_v2"); False: computed in
        # the forward without autograd and kept until the backward ("two", "full")
        self.gate_probe_recompute = False
        # candidates batched along the batch dimension (``nas.supernet.batched``): None, or
        # what maps this forward's weight row to per-chunk weights (set around one forward)
        self.chunked: Any = None
        # weight entanglement (nas.supernet.entangle): the groups, and op index -> its group
        self.entangled: list[EntangledGroup] = []
        self._group_of: dict[int, EntangledGroup] = {}

    def set_entangled(self, groups: list[EntangledGroup]) -> None:
        """Compute ``groups`` (``nas.supernet.entangle.entangle_mixed_op``'s) entangled."""
        self.entangled = list(groups)
        self._group_of = {k: g for g in groups for k in g.members}

    def running_ops(self, active_O: list[bool]) -> list[int]:
        """The indices of the ops this forward runs: active and not ``none``."""
        return [k for k in range(len(self.ops)) if active_O[k] and self._runnable[k]]

    def wants_relu(self, active_O: list[bool]) -> bool:
        """Whether an op this forward runs starts with a ReLU of the input that the cell can
        share (``relu_x`` of ``forward``); full-width edges only."""
        return (
            self.share_relu
            and self.k == 1
            and any(
                active_O[k]
                and self._runnable[k]
                and k not in self._group_of
                and isinstance(op, RELU_FIRST)
                for k, op in enumerate(self.ops)
            )
        )

    def forward(
        self,
        x: Tensor,
        weights_O: Tensor,
        active_O: list[bool],
        acc: Tensor | None = None,
        relu_x: Tensor | None = None,
        given: dict[int, Tensor] | None = None,
        pooled: Callable[[nn.Module], Tensor] | None = None,
    ) -> Tensor | None:
        """``acc + sum_k weights_O[k] * op_k(x)`` over the active ops; ``relu_x``, if given,
        is ``relu(x)`` for the ops that start with one (``wants_relu``); ``given``: op index
        -> ``op_k(x)`` already computed (fused by the cell; full-width edges only);
        ``pooled(pool)``: ``pool(x)``, computed once per state by the cell (``shared_head``;
        full-width edges only)."""
        out = self._mixed(x, weights_O, active_O, acc, relu_x, given, pooled)
        if self.unselected_scalars and weights_O.requires_grad:
            out = self.add_unselected_scalars(x, weights_O, active_O, out)
        if self.gate_probe and out is not None and weights_O.requires_grad:
            out = _GateProbe.apply(out, weights_O, self, x)
        return out

    def probe_output(self, x: Tensor, k: int) -> Tensor | None:
        """``op_k(x)`` as the edge computes it (the first C/K channels under partial
        channels); None for ``none``. Called without autograd by ``_GateProbe``."""
        if not self._runnable[k]:
            return None
        group = self._group_of.get(k)
        if group is not None:
            x_op = x if self.k == 1 else x[:, : self.C // self.k]
            return single_output(self.ops, group, x_op, k)
        if self.k == 1:
            y: Tensor = self.ops[k](x)
            return y
        y = self.ops[k](x[:, : self.C // self.k])
        return y

    def probe_grad(self, grad: Tensor) -> Tensor:
        """The part of the gradient of the edge's output that the ops' weighted sum receives:
        all of it, or under partial channels the slot of the mixed channels (``_slots``)."""
        if self.k == 1:
            return grad
        return _slots(grad.contiguous(memory_format=_layout(grad)), self.k)[:, :, 0]

    # ---- hard mixing weights: the unselected ops' scalar terms (H1), begin
    def add_unselected_scalars(
        self, x: Tensor, weights_O: Tensor, active_O: list[bool], out: Tensor | None
    ) -> Tensor:
        """``out + sum_{k off} w[k]`` as a broadcast scalar whose value is exactly 0 but whose
        gradient is kept: GDAS's NB201 cell (AutoDL ``search_cells.py:72-86``, one-hot
        ``hardwts``) adds ``hardwts[k]`` for every op but the selected one, so each unselected
        op's weight receives ``sum dL/d(node)``. ``s - s.detach()`` is 0 whatever the weights'
        values (a masked op's weight need not be 0)."""
        off = [k for k in range(len(active_O)) if not active_O[k]]
        if out is None:  # nothing ran (the selected op is `none`): a zero node to add to
            ref = x if self.stride == 1 else x[:, :, :: self.stride, :: self.stride]
            out = torch.zeros_like(ref)
        if not off:
            return out
        s = weights_O[off].sum()
        return out + (s - s.detach()).to(out.dtype)

    # ---- hard mixing weights, end

    def _mixed(
        self,
        x: Tensor,
        weights_O: Tensor,
        active_O: list[bool],
        acc: Tensor | None,
        relu_x: Tensor | None = None,
        given: dict[int, Tensor] | None = None,
        pooled: Callable[[nn.Module], Tensor] | None = None,
    ) -> Tensor | None:
        ops = self.running_ops(active_O)
        if self.aux is not None and self.aux_scale != 0:
            extra = self.aux(x) * self.aux_scale
            acc = extra if acc is None else acc + extra
        # batched candidates: a row that differs across the chunks (None: the same for all)
        row = None if self.chunked is None else self.chunked.row(weights_O)
        groups: list[tuple[EntangledGroup, list[int]]] = []
        if self._group_of:
            assert row is None, "batched candidates are refused for entangled ops"
            for group in self.entangled:
                live = [k for k in group.members if k in ops]
                if live:
                    groups.append((group, live))
            ops = [k for k in ops if k not in self._group_of]
        if self.k == 1:
            for group, live in groups:  # each group's output joins the sum with weight 1
                y_g = group_output(self.ops, group, x, weights_O, live)
                acc = y_g if acc is None else acc + y_g
            if not ops:
                return acc
            ys: list[Tensor] = []
            for k in ops:
                op = self.ops[k]
                with nullcontext() if row is None else row.running(k):
                    if given is not None and k in given:
                        ys.append(given[k])
                    elif relu_x is not None and isinstance(op, RELU_FIRST):
                        ys.append(op.after_relu(relu_x))
                    elif (
                        pooled is not None
                        and self.share_pools
                        and (shared := shared_head(op)) is not None
                    ):
                        y = pooled(shared[0])
                        for layer in shared[1]:
                            y = layer(y)
                        ys.append(y)
                    else:
                        ys.append(op(x))
            if row is not None:
                out_chunked: Tensor = row.weighted_sum(acc, ops, ys)
                return out_chunked
            return weighted_sum(acc, weights_O, ops, ys)
        # PC-DARTS: the ops see the first C/K channels, the rest bypass them; the weighted sum,
        # the bypass, the shuffle and the node's running sum are written in one pass
        assert not given, "fused op outputs are for full-width edges (K = 1) only"
        x_op, x_bypass = _SplitChannels.apply(x, self.C // self.k)
        ys = []
        for k in ops:
            with nullcontext() if row is None else row.running(k):
                ys.append(self.ops[k](x_op))
        if groups:  # each group's output mixed in with weight 1 (an entry of its own)
            n_ops = weights_O.shape[0]
            ops = ops + [n_ops + i for i in range(len(groups))]
            ys += [group_output(self.ops, g, x_op, weights_O, live) for g, live in groups]
            weights_O = torch.cat([weights_O, weights_O.new_ones(len(groups))])
        if self.stride == 2:
            x_bypass = F.max_pool2d(x_bypass, 2, 2)
        if row is not None and ops:  # the chunks' sums, then mixed in as one op of weight 1
            ys = [row.weighted_sum(None, ops, ys)]
            weights_O, ops = weights_O.new_ones(1), [0]
        out: Tensor = _PartialChannelMix.apply(acc, weights_O, ops, self.k, x_bypass, *ys)
        return out
