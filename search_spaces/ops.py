"""Primitive operations of the DARTS and NAS-Bench-201 cell spaces.

First stage of the pipeline (``search_spaces``): the candidate operations that a supernet mixes
and a discrete network compiles. Each is exact to its reference implementation:

* DARTS (Liu et al., ICLR 2019; quark0/darts ``cnn/operations.py``): ``none``, 3x3 max / avg
  pool, ``skip_connect`` (identity, or ``FactorizedReduce`` at stride 2), separable convs
  (applied twice), dilated convs. No conv has a bias.
* RobustDARTS S4 (Zela et al., ICLR 2020, as used by DARTS-PT): ``noise``, N(0, 1) of the
  input's shape.
* NAS-Bench-201 (Dong & Yang, ICLR 2020; the authors' ``cell_operations.py``): ``nor_conv_kxk``
  = ReLU-Conv-BN whose conv has a bias only when the BN is not affine, as in the reference.

``OPS`` maps a name to a factory ``(C_in, C_out, stride, affine, track_running_stats) -> Module``.
Supernets build ops with ``affine=False`` BN, discrete networks with ``affine=True``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn
from torch.autograd.function import once_differentiable
from torch.nn import functional as F

# DARTS_OPS, NB201_OPS: re-exported here, where they always were
from search_spaces.op_names import DARTS_OPS, NB201_OPS, OP_NAMES  # noqa: F401

OpFactory = Callable[..., nn.Module]


def _layout_of(x: Tensor) -> torch.memory_format:
    """NHWC (``channels_last``) for a 4-d tensor that is not NCHW-contiguous, else NCHW."""
    if x.dim() == 4 and not x.is_contiguous():
        return torch.channels_last
    return torch.contiguous_format


def _dense_like(grad: Tensor) -> Tensor:
    """``grad`` made dense in the layout of the tensor it was sliced from (a copy if strided)."""
    return grad.contiguous(memory_format=_layout_of(grad))


class _ConcatChannels(torch.autograd.Function):
    """``torch.cat(xs, dim=1)`` whose backward hands each input a dense gradient.

    ``cat``'s own backward returns channel slices of the output's gradient: in NHWC
    (``channels_last``) those are strided views, and every consumer downstream (BN, ReLU,
    drop-path, conv backward) then falls back to slow strided kernels or returns NCHW results
    that mismatch the NHWC activations. One copy here is cheaper than that. The backward is
    made of differentiable ops, so double backward still works.
    """

    @staticmethod
    def forward(ctx, *xs: Tensor) -> Tensor:
        ctx.sizes = [x.shape[1] for x in xs]
        return torch.cat(xs, dim=1)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, ...]:
        return tuple(_dense_like(g) for g in grad.split(ctx.sizes, dim=1))


class _ConcatReLU(torch.autograd.Function):
    """``relu(torch.cat(xs, dim=1))`` in one pass: each input's ReLU written into its channels.

    Saves the concatenation's write and re-read and, in the backward, the copy to dense
    gradients (``threshold_backward`` writes them directly). Once differentiable: discrete
    networks are trained, never differentiated twice.
    """

    @staticmethod
    def forward(ctx, *xs: Tensor) -> Tensor:
        first = xs[0]
        ctx.sizes = [x.shape[1] for x in xs]
        out = torch.empty(
            (first.shape[0], sum(ctx.sizes), *first.shape[2:]),
            dtype=first.dtype,
            device=first.device,
            memory_format=_layout_of(first),
        )
        for x, part in zip(xs, out.split(ctx.sizes, dim=1), strict=True):
            torch.clamp_min(x, 0, out=part)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor) -> tuple[Tensor, ...]:
        (out,) = ctx.saved_tensors
        grads = []
        for g, y in zip(grad.split(ctx.sizes, dim=1), out.split(ctx.sizes, dim=1), strict=True):
            dense = torch.empty_like(y, memory_format=_layout_of(out))
            grads.append(torch.ops.aten.threshold_backward.grad_input(g, y, 0, grad_input=dense))
        return tuple(grads)


def concat_relu(xs: list[Tensor]) -> Tensor:
    """``relu(cat(xs, dim=1))`` in one pass over the data (see ``_ConcatReLU``)."""
    return _ConcatReLU.apply(*xs)


def concat_channels(xs: list[Tensor]) -> Tensor:
    """Concatenate NCHW or NHWC feature maps along channels (dense gradients in the backward)."""
    return _ConcatChannels.apply(*xs)


NARROW_CHANNELS = 16
"""``BatchNorm2d`` normalises an NHWC CPU input of fewer channels than this in NCHW."""


class BatchNorm2d(nn.BatchNorm2d):
    """``nn.BatchNorm2d`` that normalises a narrow NHWC input on the CPU in NCHW.

    torch's channels-last CPU kernel vectorises across channels, so below 16 of them (the
    partial-channel ops of PC-DARTS and DrNAS at K > 1 are C/K = 4-12 channels wide) it runs
    several times slower than the NCHW kernel on the same data. Such an input is normalised as
    an NCHW copy and the result handed back in NHWC: the NCHW kernel's output, gradient and
    running statistics bit for bit, at the price of two copies. Wider inputs, other devices and
    traced or compiled graphs take ``nn.BatchNorm2d``'s path unchanged; parameters, buffers and
    checkpoints are ``nn.BatchNorm2d``'s.
    """

    def forward(self, x: Tensor) -> Tensor:
        if (
            x.dim() == 4
            and x.shape[1] < NARROW_CHANNELS
            and x.device.type == "cpu"
            and not x.is_contiguous()
            and x.is_contiguous(memory_format=torch.channels_last)
            and not torch.jit.is_tracing()
            and not torch.compiler.is_compiling()
        ):
            nchw = _Relayout.apply(x, torch.contiguous_format, torch.channels_last)
            return _Relayout.apply(
                super().forward(nchw), torch.channels_last, torch.contiguous_format
            )
        return super().forward(x)


class _Relayout(torch.autograd.Function):
    """``x`` copied into ``layout``; its gradient copied into ``grad_layout`` (so that a kernel
    sees its input and the gradient of its output in one layout, as in an NCHW network)."""

    @staticmethod
    def forward(ctx, x: Tensor, layout: torch.memory_format, grad_layout: torch.memory_format):
        ctx.grad_layout = grad_layout
        return x.contiguous(memory_format=layout)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None, None]:
        return grad.contiguous(memory_format=ctx.grad_layout), None, None


class Zero(nn.Module):
    """The ``none`` operation: a zero tensor of the output's shape, with no parameters.

    It allocates zeros and reads nothing from its input, so it costs no arithmetic and adds no
    node to the autograd graph. Supernets skip it altogether.
    """

    def __init__(self, C_out: int, stride: int) -> None:
        super().__init__()
        self.C_out = C_out
        self.stride = stride

    def forward(self, x: Tensor) -> Tensor:
        n, _, h, w = x.shape
        s = self.stride
        # x[:, :, ::s, ::s] has ceil(h / s) rows: the reference's shape at any stride.
        return x.new_zeros(n, self.C_out, (h + s - 1) // s, (w + s - 1) // s)


class Identity(nn.Module):
    """``skip_connect`` at stride 1. A class of its own so drop-path can recognise it."""

    def forward(self, x: Tensor) -> Tensor:
        return x


class _EvenOddPixels(torch.autograd.Function):
    """``(x[:, :, ::2, ::2], x[:, :, 1::2, 1::2])`` as dense maps in x's layout.

    Slicing's own backward zero-fills a full-size gradient per slice (in NCHW even for an NHWC
    input) and adds the two; this one fills one zero map in the input's layout and writes both
    slices into it. Differentiable ops throughout, so double backward works.
    """

    @staticmethod
    def forward(ctx, x: Tensor) -> tuple[Tensor, Tensor]:
        layout = _layout_of(x)
        ctx.shape, ctx.layout = x.shape, layout
        even = x[:, :, ::2, ::2].contiguous(memory_format=layout)
        odd = x[:, :, 1::2, 1::2].contiguous(memory_format=layout)
        return even, odd

    @staticmethod
    def backward(ctx, g_even: Tensor, g_odd: Tensor) -> Tensor:
        grad = torch.empty(
            ctx.shape, dtype=g_even.dtype, device=g_even.device, memory_format=ctx.layout
        ).zero_()
        grad[:, :, ::2, ::2] = g_even
        grad[:, :, 1::2, 1::2] = g_odd
        return grad


class FactorizedReduce(nn.Module):
    """Halve H and W: ReLU, two 1x1 stride-2 convs (the second shifted by one pixel), concat, BN."""

    def __init__(
        self, C_in: int, C_out: int, affine: bool = True, track_running_stats: bool = True
    ) -> None:
        super().__init__()
        if C_out % 2:
            raise ValueError(f"FactorizedReduce needs an even C_out, got {C_out}")
        self.relu = nn.ReLU(inplace=False)
        self.conv_1 = nn.Conv2d(C_in, C_out // 2, 1, stride=2, padding=0, bias=False)
        self.conv_2 = nn.Conv2d(C_in, C_out // 2, 1, stride=2, padding=0, bias=False)
        self.bn = BatchNorm2d(C_out, affine=affine, track_running_stats=track_running_stats)

    def forward(self, x: Tensor) -> Tensor:
        # A 1x1 conv at stride 2 reads only the even pixels (conv_1) or, shifted by one, the odd
        # ones (conv_2), and ReLU commutes with picking pixels: so pick first, then ReLU and
        # convolve at stride 1. The same arithmetic as the reference's ReLU -> stride-2 convs,
        # on a quarter of the pixels (no full-size ReLU, no copy of the shifted input, no
        # full-size zero-filled gradient for the slice in the backward).
        even, odd = _EvenOddPixels.apply(x)
        return self._convolve(self.relu(even), self.relu(odd))

    def after_relu(self, x: Tensor) -> Tensor:
        """``forward`` of an input already passed through the ReLU (see ``ReLUFirst``)."""
        return self._convolve(*_EvenOddPixels.apply(x))

    def _convolve(self, even: Tensor, odd: Tensor) -> Tensor:
        return self.bn(
            concat_channels(
                [
                    F.conv2d(even, self.conv_1.weight, self.conv_1.bias),
                    F.conv2d(odd, self.conv_2.weight, self.conv_2.bias),
                ]
            )
        )


class ReLUFirst(nn.Sequential):
    """A sequence of layers whose first is a ReLU of the input.

    ``after_relu(relu(x))`` equals ``forward(x)``: a discrete cell computes the ReLU of a state
    once and hands it to every op that starts with one (the reference recomputes it per op).
    ``after_relu`` calls the layers after the ReLU, so hooks on the sequence itself or on its
    ReLU do not fire there.
    """

    def after_relu(self, x: Tensor) -> Tensor:
        for layer in list(self)[1:]:
            x = layer(x)
        return x


class ReLUConvBN(ReLUFirst):
    """ReLU, conv, BN: the DARTS cell preprocessing (1x1) and NB201's ``nor_conv_kxk``."""

    def __init__(
        self,
        C_in: int,
        C_out: int,
        kernel_size: int,
        stride: int,
        padding: int,
        *,
        affine: bool = True,
        track_running_stats: bool = True,
        bias: bool = False,
    ) -> None:
        super().__init__(
            nn.ReLU(inplace=False),
            nn.Conv2d(C_in, C_out, kernel_size, stride=stride, padding=padding, bias=bias),
            BatchNorm2d(C_out, affine=affine, track_running_stats=track_running_stats),
        )


class DilConv(ReLUFirst):
    """ReLU, depthwise kxk conv (dilation d), pointwise 1x1 conv, BN."""

    def __init__(
        self,
        C_in: int,
        C_out: int,
        kernel_size: int,
        stride: int,
        padding: int,
        dilation: int,
        *,
        affine: bool = True,
        track_running_stats: bool = True,
    ) -> None:
        super().__init__(
            nn.ReLU(inplace=False),
            nn.Conv2d(
                C_in, C_in, kernel_size, stride, padding, dilation=dilation, groups=C_in, bias=False
            ),
            nn.Conv2d(C_in, C_out, 1, padding=0, bias=False),
            BatchNorm2d(C_out, affine=affine, track_running_stats=track_running_stats),
        )


class SepConv(ReLUFirst):
    """A depthwise-separable conv applied twice, the first at the op's stride (DARTS)."""

    def __init__(
        self,
        C_in: int,
        C_out: int,
        kernel_size: int,
        stride: int,
        padding: int,
        *,
        affine: bool = True,
        track_running_stats: bool = True,
    ) -> None:
        super().__init__(
            nn.ReLU(inplace=False),
            nn.Conv2d(C_in, C_in, kernel_size, stride, padding, groups=C_in, bias=False),
            nn.Conv2d(C_in, C_in, 1, padding=0, bias=False),
            BatchNorm2d(C_in, affine=affine, track_running_stats=track_running_stats),
            nn.ReLU(inplace=False),
            nn.Conv2d(C_in, C_in, kernel_size, 1, padding, groups=C_in, bias=False),
            nn.Conv2d(C_in, C_out, 1, padding=0, bias=False),
            BatchNorm2d(C_out, affine=affine, track_running_stats=track_running_stats),
        )


class Noise(nn.Module):
    """RobustDARTS S4's ``noise``: standard normal noise of the (strided) input's shape."""

    # it draws random numbers: evaluations of several candidates in one batch give each its
    # own draws (``nas.supernet.batched``)
    draws_random_numbers = True

    def __init__(self, stride: int, mean: float = 0.0, std: float = 1.0) -> None:
        super().__init__()
        self.stride = stride
        self.mean = mean
        self.std = std

    def forward(self, x: Tensor) -> Tensor:
        if self.stride != 1:
            x = x[:, :, :: self.stride, :: self.stride]
        # Detached, as in the reference: the noise carries no gradient to the input.
        return torch.empty_like(x).normal_(self.mean, self.std)


def _same_channels(name: str, C_in: int, C_out: int) -> None:
    if C_in != C_out:
        raise ValueError(
            f"operation {name!r} keeps the channel count; got C_in={C_in}, C_out={C_out}"
        )


def _pool(kind: str) -> OpFactory:
    def build(
        C_in: int, C_out: int, stride: int, affine: bool = True, track_running_stats: bool = True
    ) -> nn.Module:
        _same_channels(f"{kind}_pool_3x3", C_in, C_out)
        if kind == "max":
            return nn.MaxPool2d(3, stride=stride, padding=1)
        return nn.AvgPool2d(3, stride=stride, padding=1, count_include_pad=False)

    return build


def _skip(
    C_in: int, C_out: int, stride: int, affine: bool = True, track_running_stats: bool = True
) -> nn.Module:
    if stride == 1 and C_in == C_out:
        return Identity()
    if stride != 2:
        raise ValueError(f"skip_connect between different shapes needs stride 2, got {stride}")
    return FactorizedReduce(C_in, C_out, affine=affine, track_running_stats=track_running_stats)


def _sep(k: int) -> OpFactory:
    def build(
        C_in: int, C_out: int, stride: int, affine: bool = True, track_running_stats: bool = True
    ) -> nn.Module:
        return SepConv(
            C_in, C_out, k, stride, k // 2, affine=affine, track_running_stats=track_running_stats
        )

    return build


def _dil(k: int) -> OpFactory:
    def build(
        C_in: int, C_out: int, stride: int, affine: bool = True, track_running_stats: bool = True
    ) -> nn.Module:
        # Dilation 2 doubles the receptive field; padding 2 (3x3) or 4 (5x5) keeps H and W.
        return DilConv(
            C_in, C_out, k, stride, k - 1, 2, affine=affine, track_running_stats=track_running_stats
        )

    return build


def _nor_conv(k: int) -> OpFactory:
    def build(
        C_in: int, C_out: int, stride: int, affine: bool = True, track_running_stats: bool = True
    ) -> nn.Module:
        # NB201's reference gives the conv a bias exactly when its BN has no affine shift.
        return ReLUConvBN(
            C_in,
            C_out,
            k,
            stride,
            k // 2,
            affine=affine,
            track_running_stats=track_running_stats,
            bias=not affine,
        )

    return build


def _none(
    C_in: int, C_out: int, stride: int, affine: bool = True, track_running_stats: bool = True
) -> nn.Module:
    return Zero(C_out, stride)


def _noise(
    C_in: int, C_out: int, stride: int, affine: bool = True, track_running_stats: bool = True
) -> nn.Module:
    _same_channels("noise", C_in, C_out)
    return Noise(stride)


OPS: dict[str, OpFactory] = {
    "none": _none,
    "max_pool_3x3": _pool("max"),
    "avg_pool_3x3": _pool("avg"),
    "skip_connect": _skip,
    "sep_conv_3x3": _sep(3),
    "sep_conv_5x5": _sep(5),
    "dil_conv_3x3": _dil(3),
    "dil_conv_5x5": _dil(5),
    "noise": _noise,
    "nor_conv_1x1": _nor_conv(1),
    "nor_conv_3x3": _nor_conv(3),
}
assert tuple(OPS) == OP_NAMES, "search_spaces.op_names.OP_NAMES must list OPS in its order"

# Ops that start with a ReLU of their input (``after_relu`` skips it): a cell computes a state's
# ReLU once for all of them (discrete cells and supernet edges alike).
RELU_FIRST = (ReLUFirst, FactorizedReduce)


def build_op(
    name: str,
    C_in: int,
    C_out: int,
    stride: int,
    *,
    affine: bool = True,
    track_running_stats: bool = True,
) -> nn.Module:
    """Build operation ``name``; a one-line ValueError for an unknown name or stride."""
    if name not in OPS:
        raise ValueError(f"unknown operation {name!r}; expected one of {', '.join(OPS)}")
    if stride not in (1, 2):
        raise ValueError(f"operation stride must be 1 or 2, got {stride}")
    return OPS[name](C_in, C_out, stride, affine, track_running_stats)
