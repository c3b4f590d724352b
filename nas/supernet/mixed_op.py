"""The mixed operation of one supernet edge: a weighted sum of its candidate operations.

Second stage of the pipeline (``nas.supernet``). DARTS (Liu et al., ICLR 2019, eq. 1):
``o(x) = sum_k w_k o_k(x)``, with the weights ``w`` supplied by the search strategy (a softmax
for DARTS, a Dirichlet sample for DrNAS), so the op knows nothing about strategies.

Partial channels (PC-DARTS, Xu et al., ICLR 2020, eq. 2; used by DrNAS without edge
normalisation): only the first ``C / K`` channels go through the ops; the rest bypass them
(max-pooled 2x2 on stride-2 edges), are concatenated back, and the channels are shuffled with
``K`` groups.

Auxiliary op (DARTS-, Chu et al., ICLR 2021, H4): ``aux`` (None unless a search component sets
it) is added to the edge's output as ``aux_scale * aux(x)``, outside the mixing weights.

Cost: an op whose weight is exactly zero, whose mask entry is off, or that is ``none``, is not
run at all (the reference multiplies ``none``'s zeros and every other output by its weight).
The weighted sum is one autograd node per edge (``weighted_sum``): the forward accumulates in
place, and the gradient of each mixing weight, ``<dL/do, o_k(x)>``, is a dot product instead of
a product tensor that is then summed; op outputs are kept for the backward only when the
mixing weights need a gradient.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from search_spaces.ops import build_op


def _dot(a: Tensor, b: Tensor) -> Tensor:
    """Sum of ``a * b`` without the product tensor, for tensors of one memory layout."""
    if a.is_contiguous() and b.is_contiguous():
        return torch.dot(a.view(-1), b.view(-1))
    if (
        a.dim() == 4
        and a.is_contiguous(memory_format=torch.channels_last)
        and b.is_contiguous(memory_format=torch.channels_last)
    ):
        return torch.dot(a.permute(0, 2, 3, 1).reshape(-1), b.permute(0, 2, 3, 1).reshape(-1))
    return (a * b).sum()


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
            dots = torch.stack([_dot(grad, y) for y in ys])
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


class MixedOp(nn.Module):
    """One edge of a supernet cell with candidates ``ops`` (in the space's order).

    ``forward(x, weights_O, active_O, acc)`` adds ``sum_k weights_O[k] * op_k(x)`` over the
    active ops to the accumulator ``acc`` (a node's running sum), or returns it if ``acc`` is
    None. ``active_O`` is a list of Python bools, computed once per forward for the whole cell,
    so skipping an op needs no device synchronisation per op.
    """

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
                    op, nn.BatchNorm2d(c_op, affine=False, track_running_stats=track_running_stats)
                )
            self.ops.append(op)
        self._runnable = [name != "none" for name in ops]
        # DARTS-'s auxiliary skip (nas.search.components.darts_minus): outside the weights
        self.aux: nn.Module | None = None
        self.aux_scale = 0.0
        # GDAS's NB201 forward (set through Supernet.set_unselected_scalars): see
        # add_unselected_scalars below
        self.unselected_scalars = False

    def forward(
        self, x: Tensor, weights_O: Tensor, active_O: list[bool], acc: Tensor | None = None
    ) -> Tensor | None:
        out = self._mixed(x, weights_O, active_O, acc)
        if self.unselected_scalars and weights_O.requires_grad:
            out = self.add_unselected_scalars(x, weights_O, active_O, out)
        return out

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
        self, x: Tensor, weights_O: Tensor, active_O: list[bool], acc: Tensor | None
    ) -> Tensor | None:
        ops = [k for k in range(len(self.ops)) if active_O[k] and self._runnable[k]]
        if self.aux is not None and self.aux_scale != 0:
            extra = self.aux(x) * self.aux_scale
            acc = extra if acc is None else acc + extra
        if self.k == 1:
            if not ops:
                return acc
            return weighted_sum(acc, weights_O, ops, [self.ops[k](x) for k in ops])
        c_op = self.C // self.k
        x_op, x_bypass = x[:, :c_op], x[:, c_op:]
        mixed = (
            weighted_sum(None, weights_O, ops, [self.ops[k](x_op) for k in ops]) if ops else None
        )
        if self.stride == 2:
            x_bypass = F.max_pool2d(x_bypass, 2, 2)
        if mixed is None:
            n, _, h, w_ = x_bypass.shape
            mixed = x_bypass.new_zeros(n, c_op, h, w_)
        out = channel_shuffle(torch.cat([mixed, x_bypass], dim=1), self.k)
        return out if acc is None else acc + out
