"""FBNet (Wu et al., CVPR 2019): the discrete network a genotype compiles to, and its blocks.

First stage of the pipeline (``search_spaces``). Wu, Dai, Zhang, Wang, Sun, Wu, Tian, Vajda,
Jia & Keutzer, "FBNet: Hardware-Aware Efficient ConvNet Design via Differentiable Neural
Architecture Search", CVPR 2019. Layer for layer as facebookresearch/mobile-vision builds the
found networks (``mobile_cv/arch/fbnet_v2/fbnet_modeldef_cls_fbnet.py``: the definitions
``fbnet_a``, ``fbnet_b``, ``fbnet_c``; ``irf_block.py``: ``IRFBlock``; ``basic_blocks.py``:
``ConvBNRelu``, ``ChannelShuffle``; ``fbnet_builder.py``: ``FBNetBuilder``;
``mobile_cv/model_zoo/models/fbnet_v2.py``: ``FBNet``, ``ClsConvHead``), written anew, for any
genotype of the space (``search_spaces.fbnet_space``) at any width:

* stem: Conv3x3 (stride 2 on ImageNet, 1 on 32x32 data), BN, ReLU;
* 22 searchable blocks: an inverted residual ``kKeE`` (a 1x1 expansion conv, absent where it
  would not change the width, i.e. at expansion 1; with 2 groups and a channel shuffle after
  it for ``kKe1g2``; a KxK depthwise conv; a 1x1 projection conv without ReLU, in 2 groups for
  ``kKe1g2``), plus the identity shortcut where the block has stride 1 and equal widths; or,
  for ``skip``, the identity;
* a 1x1 conv to 1984 channels (1504 for FBNet-A), BN, ReLU; global average pooling; a 1x1
  convolution as classifier (with bias).

Convolutions have a bias (the definitions' ``use_bias``); BN has PyTorch's defaults (eps 1e-5).
Initialisation as mobile-vision's ``build_conv``: every convolution of a ``ConvBNRelu``
``kaiming_normal_`` (fan-out, ReLU gain), its bias 0; the classifier PyTorch's default.

Counting conventions: every parameter counts (conv biases and BN's affine parameters included:
4,321,232 / 4,818,216 / 5,592,784 for A / B / C, as ``sum(p.numel())`` of the reference); the
multiply-accumulates of ``nas.summary.count_macs`` (convolutions and linear layers, forward
hooks; no bias, BN, ReLU, addition or pooling) are 244,452,664 / 291,004,424 / 378,136,224 at
224x224. mobile-vision's own counter (``mobile_cv.lut.lib.pt.flops_utils.print_model_flops``)
reports 4,270,288 / 4,766,672 / 5,525,424 "params" and 244,526,360 / 291,101,640 / 378,233,440
"flops": its parameters are the conv weights alone (no biases, no BN), and its flops add the
global pooling's input elements (1504 or 1984 x 7 x 7) to the convolutions' multiply-adds.
Both were measured by running the reference; with the same weights the published networks give
the reference's outputs bit for bit at float64.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from search_spaces.fbnet_space import (
    BASE_STEM,
    SKIP_OP,
    FBNetChain,
    Widths,
    fbnet_chain,
    parse_block_op,
)
from search_spaces.genotype import AnyGenotype, FBNetGenotype

if TYPE_CHECKING:
    from search_spaces.layout import Part


class ConvBNReLU(nn.Sequential):
    """Conv (with bias, "same" padding), BN, and ReLU unless ``relu`` is off: mobile-vision's
    ``ConvBNRelu``, its convolution initialised as there."""

    def __init__(
        self,
        C_in: int,
        C_out: int,
        kernel: int,
        stride: int = 1,
        groups: int = 1,
        relu: bool = True,
        *,
        affine: bool = True,
        track_running_stats: bool = True,
    ) -> None:
        conv = nn.Conv2d(C_in, C_out, kernel, stride, kernel // 2, groups=groups, bias=True)
        assert conv.bias is not None
        with torch.no_grad():
            nn.init.kaiming_normal_(conv.weight, mode="fan_out", nonlinearity="relu")
            nn.init.zeros_(conv.bias)
        layers: list[nn.Module] = [
            conv,
            nn.BatchNorm2d(C_out, affine=affine, track_running_stats=track_running_stats),
        ]
        if relu:
            layers.append(nn.ReLU(inplace=True))
        super().__init__(*layers)


class ChannelShuffle(nn.Module):
    """The channels of ``groups`` groups interleaved (ShuffleNet's shuffle)."""

    def __init__(self, groups: int) -> None:
        super().__init__()
        self.groups = groups

    def forward(self, x: Tensor) -> Tensor:
        n, c, h, w = x.shape
        g = self.groups
        return x.reshape(n, g, c // g, h, w).transpose(1, 2).reshape(n, c, h, w)


class FBNetBlock(nn.Module):
    """An inverted residual block of FBNet (mobile-vision's ``IRFBlock``): 1x1 expansion (absent
    where it would not change the width), a channel shuffle after it for the grouped blocks, KxK
    depthwise, 1x1 projection without ReLU; ``residual``: the input added (the block has stride
    1 and equal widths). Without the shortcut it is one candidate of the supernet's mixed
    block."""

    def __init__(
        self,
        op: str,
        C_in: int,
        C_out: int,
        stride: int,
        residual: bool,
        *,
        affine: bool = True,
        track_running_stats: bool = True,
    ) -> None:
        super().__init__()
        k, e, g = parse_block_op(op)
        mid = C_in * e
        bn = {"affine": affine, "track_running_stats": track_running_stats}
        self.C_in, self.C_out, self.stride = C_in, C_out, stride
        self.pw = ConvBNReLU(C_in, mid, 1, 1, g, True, **bn) if mid != C_in else None
        self.shuffle = ChannelShuffle(g) if g > 1 else None
        self.dw = ConvBNReLU(mid, mid, k, stride, mid, True, **bn)
        self.pwl = ConvBNReLU(mid, C_out, 1, 1, g, False, **bn)
        self.residual = residual

    def forward(self, x: Tensor) -> Tensor:
        y = x if self.pw is None else self.pw(x)
        if self.shuffle is not None:
            y = self.shuffle(y)
        y = self.pwl(self.dw(y))
        return y + x if self.residual else y


class FBNetNetwork(nn.Module):
    """The discrete network of an FBNet genotype; ``forward`` returns the logits.

    ``C``: the stem width at multiplier 1 (16); every width, the last conv's included (the
    genotype's own, else 1984), scales by ``C / 16`` as mobile-vision rounds it. ``cifar``: stem
    and first stride-2 stage at stride 1 (the ``fbnet_cifar`` layout), else the ImageNet
    layout. ``depth``: the blocks kept per stage (4: all; a smaller depth skips each stage's last
    blocks). The identity shortcuts are the chain's (``FBNetChain.skippable``: stride 1 and equal
    widths at multiplier 1), whatever the width: a stage's first block keeps none even where
    scaling makes its widths equal (mobile-vision, which decides at the built widths, differs
    there only, below multiplier 1)."""

    def __init__(
        self,
        genotype: FBNetGenotype,
        *,
        C: int = BASE_STEM,
        num_classes: int = 1000,
        cifar: bool = False,
        depth: int = 4,
    ) -> None:
        super().__init__()
        chain = fbnet_chain(cifar=cifar)
        genotype.validate()
        kept = chain.kept(depth)
        self.genotype, self.depth = genotype, depth
        self.widths: Widths = chain.widths_at(C, genotype.head)
        layers: list[nn.Module] = [ConvBNReLU(3, self.widths.stem, 3, chain.stem_stride)]
        for i, (op, (c_in, c_out, stride)) in enumerate(
            zip(genotype.ops, chain.block_shapes(self.widths))
        ):
            if op == SKIP_OP or not kept[i]:  # skipped (beyond the depth: as if skipped)
                layers.append(nn.Identity())
            else:
                layers.append(FBNetBlock(op, c_in, c_out, stride, chain.skippable[i]))
        layers.append(ConvBNReLU(self.widths.stages[-1], self.widths.head, 1))
        self.stages = nn.Sequential(*layers)
        self.avg_pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Conv2d(self.widths.head, num_classes, 1)  # the classifier

    def features(self, x: Tensor) -> Tensor:
        """The map the pooling reads: the last 1x1 conv's output."""
        out: Tensor = self.stages(x)
        return out

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.head(self.avg_pool(self.features(x)))
        return out.flatten(1)


def fbnet_network(name: str, num_classes: int = 1000) -> FBNetNetwork:
    """The published FBNet network ``name`` (``fbnet_a``, ``fbnet_b``, ``fbnet_c``) at the
    reference's width and layout (224x224 inputs)."""
    from search_spaces.fbnet_space import FBNET_BLOCKS
    from search_spaces.published import published_network

    if name not in FBNET_BLOCKS:
        raise ValueError(
            f"unknown FBNet network {name!r}; expected one of {', '.join(FBNET_BLOCKS)}"
        )
    genotype = published_network(name)
    assert isinstance(genotype, FBNetGenotype)
    return FBNetNetwork(genotype, C=BASE_STEM, num_classes=num_classes, cifar=False)


def fbnet_network_of(
    genotype: AnyGenotype, *, C: int, num_classes: int, image_size: int, depth: int = 4
) -> FBNetNetwork:
    """The network of ``genotype`` for ``image_size`` inputs: the ImageNet layout above 64
    pixels, the 32x32 layout (stem and first stride-2 stage at stride 1) otherwise."""
    if not isinstance(genotype, FBNetGenotype):
        raise ValueError(f"expected an FBNet genotype, got {type(genotype).__name__}")
    return FBNetNetwork(genotype, C=C, num_classes=num_classes, cifar=image_size <= 64, depth=depth)


def block_shapes(
    chain: FBNetChain, C: int, head: int | None = None
) -> tuple[Widths, list[tuple[int, int, int]]]:
    """The widths and the searchable blocks' ``(C_in, C_out, stride)`` at width ``C``."""
    widths = chain.widths_at(C, head)
    return widths, chain.block_shapes(widths)


def network_features(net: nn.Module, x: Tensor) -> Tensor:
    """``FBNetNetwork.features``, module by module."""
    assert isinstance(net, FBNetNetwork)
    return net.features(x)


def network_logits(net: nn.Module, x: Tensor) -> Tensor:
    assert isinstance(net, FBNetNetwork)
    out: Tensor = net(x)
    return out


STEM_BLOCK = "fbnet_stem"  # Conv3x3, BN, ReLU
LAST_BLOCK = "fbnet_last"  # the last 1x1 conv, BN, ReLU
CLASSIFIER_BLOCK = "fbnet_classifier"  # global average pool, Conv1x1(C_in -> classes)


class _Classifier(nn.Module):
    """The pooling and the classifier of ``FBNetNetwork``, as one latency-table block."""

    def __init__(self, C_in: int, num_classes: int) -> None:
        super().__init__()
        self.avg_pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Conv2d(C_in, num_classes, 1)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.head(self.avg_pool(x))
        return out.flatten(1)


def layout_block(part: Part) -> nn.Module:
    """The module one of the family's latency-table blocks measures at ``part``'s shape: the
    stem, a block choice (without its shortcut addition: the shared ``add`` part), the last
    conv, the pooling and classifier."""
    n, ci, co, s = part.name, part.C_in, part.C_out, part.stride
    if n == STEM_BLOCK:
        return ConvBNReLU(ci, co, 3, s)
    if n == LAST_BLOCK:
        return ConvBNReLU(ci, co, 1, s)
    if n == CLASSIFIER_BLOCK:
        return _Classifier(ci, co)
    try:
        return FBNetBlock(n, ci, co, s, residual=False)
    except ValueError:
        raise ValueError(f"{n!r} is not a block of the FBNet network") from None


__all__ = [
    "CLASSIFIER_BLOCK",
    "LAST_BLOCK",
    "STEM_BLOCK",
    "ChannelShuffle",
    "ConvBNReLU",
    "FBNetBlock",
    "FBNetNetwork",
    "block_shapes",
    "fbnet_network",
    "fbnet_network_of",
    "layout_block",
    "network_features",
    "network_logits",
]
