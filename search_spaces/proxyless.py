"""ProxylessNAS: the discrete MobileNetV2-style network a genotype compiles to, and its blocks.

First stage of the pipeline (``search_spaces``). Cai, Zhu & Han, ICLR 2019. Layer for layer the
reference's ``ProxylessNASNets`` built from a config (mit-han-lab/proxylessnas
``search/models/normal_nets/proxyless_nets.py``: ``ProxylessNASNets``,
``MobileInvertedResidualBlock``; ``search/modules/layers.py``: ``ConvLayer``,
``MBInvertedConvLayer``, ``LinearLayer``), written anew:

* stem: Conv3x3 (stride 2 on ImageNet, 1 on 32x32 data), BN, ReLU6;
* the fixed first block: MBConv of kernel 3, expansion 1 (no expansion conv), no shortcut;
* 21 searchable blocks (``search_spaces.proxyless_space``): an MBConv (1x1 expansion conv, BN,
  ReLU6 unless the expansion is 1; KxK depthwise conv, BN, ReLU6; 1x1 projection conv, BN)
  plus the identity shortcut where the block has stride 1 and equal widths, or, for ``none``,
  the shortcut alone (the block passes its input on);
* feature mix: Conv1x1, BN, ReLU6; global average pooling; a linear classifier (with bias).

Convolutions have no bias; BN momentum 0.1, eps 1e-3 (``bn_param`` of the reference).
Initialisation as the reference's runs (``--model_init he_fout``, ``init_div_groups`` off:
``search/utils/my_modules.py``, ``MyNetwork.init_model``, called by ``run_manager.py``):
``init_he_fout``.

Counting conventions: the reference counts every parameter (``count_parameters``: BN's affine
parameters and the classifier's bias included) and, as "flops", the multiply-accumulates of its
convolutions and its linear layer (``count_conv_flop``: output elements x input channels per
group x kernel area; the linear layer's in x out features), nothing for BN, ReLU6, the shortcut
additions or the pooling; ``nas.summary`` counts the same, so the released networks' parameter
counts and MACs at 224x224 equal the reference's exactly (``tests/search_spaces``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from search_spaces.genotype import AnyGenotype, ProxylessGenotype
from search_spaces.proxyless_space import (
    FIRST_BLOCK_OP,
    SKIP_OP,
    Widths,
    block_chain,
    parse_mbconv,
    scaled_widths,
)

if TYPE_CHECKING:
    from search_spaces.layout import Part

BN_MOMENTUM = 0.1
BN_EPS = 1e-3


@torch.no_grad()
def init_he_fout(net: nn.Module) -> None:
    """The reference's ``he_fout`` initialisation, module by module: a convolution's weight
    from N(0, 2 / (k * k * out_channels)) (groups not divided out), batch norm to weight 1 and
    bias 0, a linear layer's weight from U(-1/sqrt(in), 1/sqrt(in)) and its bias 0."""
    for m in net.modules():
        if isinstance(m, nn.Conv2d):
            n = m.kernel_size[0] * m.kernel_size[1] * m.out_channels
            m.weight.normal_(0.0, math.sqrt(2.0 / n))
        elif isinstance(m, (nn.BatchNorm2d, nn.BatchNorm1d)) and m.affine:
            m.weight.fill_(1.0)
            m.bias.zero_()
        elif isinstance(m, nn.Linear):
            bound = 1.0 / math.sqrt(m.weight.size(1))
            m.weight.uniform_(-bound, bound)
            if m.bias is not None:
                m.bias.zero_()


def _bn(c: int, affine: bool = True, track_running_stats: bool = True) -> nn.BatchNorm2d:
    return nn.BatchNorm2d(
        c, momentum=BN_MOMENTUM, eps=BN_EPS, affine=affine, track_running_stats=track_running_stats
    )


class ConvBNReLU6(nn.Sequential):
    """Conv (no bias, "same" padding), BN, ReLU6: the stem and the feature-mix layer."""

    def __init__(self, C_in: int, C_out: int, kernel: int, stride: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(C_in, C_out, kernel, stride, kernel // 2, bias=False)
        self.bn = _bn(C_out)
        self.act = nn.ReLU6(inplace=True)


class MBConv(nn.Module):
    """An inverted residual's convolutions (no shortcut): expansion 1x1 (absent at expansion
    1), depthwise KxK, linear 1x1 projection, each followed by BN (and ReLU6 but the last)."""

    def __init__(
        self,
        C_in: int,
        C_out: int,
        kernel: int,
        stride: int,
        expand: int,
        *,
        affine: bool = True,
        track_running_stats: bool = True,
    ) -> None:
        super().__init__()
        mid = round(C_in * expand)
        self.C_in, self.C_out, self.kernel, self.stride, self.expand = (
            C_in,
            C_out,
            kernel,
            stride,
            expand,
        )

        def bn(c: int) -> nn.BatchNorm2d:
            return _bn(c, affine, track_running_stats)

        self.inverted_bottleneck: nn.Sequential | None = None
        if expand != 1:
            self.inverted_bottleneck = nn.Sequential(
                nn.Conv2d(C_in, mid, 1, 1, 0, bias=False), bn(mid), nn.ReLU6(inplace=True)
            )
        self.depth_conv = nn.Sequential(
            nn.Conv2d(mid, mid, kernel, stride, kernel // 2, groups=mid, bias=False),
            bn(mid),
            nn.ReLU6(inplace=True),
        )
        self.point_linear = nn.Sequential(nn.Conv2d(mid, C_out, 1, 1, 0, bias=False), bn(C_out))

    def forward(self, x: Tensor) -> Tensor:
        if self.inverted_bottleneck is not None:
            x = self.inverted_bottleneck(x)
        out: Tensor = self.point_linear(self.depth_conv(x))
        return out


def build_mbconv(
    op: str,
    C_in: int,
    C_out: int,
    stride: int,
    *,
    affine: bool = True,
    track_running_stats: bool = True,
) -> MBConv:
    """The MBConv an op name ``KxK_MBConvE`` names."""
    kernel, expand = parse_mbconv(op)
    return MBConv(
        C_in,
        C_out,
        kernel,
        stride,
        expand,
        affine=affine,
        track_running_stats=track_running_stats,
    )


class MobileBlock(nn.Module):
    """One block: its MBConv (None: skipped) and, where stride 1 keeps the width, the identity
    shortcut (the reference's ``MobileInvertedResidualBlock``)."""

    def __init__(self, conv: nn.Module | None, residual: bool) -> None:
        super().__init__()
        self.conv = conv
        self.residual = residual

    def forward(self, x: Tensor) -> Tensor:
        if self.conv is None:
            return x
        out: Tensor = self.conv(x)
        return out + x if self.residual else out


class ProxylessNetwork(nn.Module):
    """The discrete network of a ProxylessNAS genotype; ``forward`` returns the logits.

    ``C``: the stem width at multiplier 1 (32); every width scales by ``C / 32`` (the genotype's
    own widths, if it has them, else the chain's). ``cifar``: stem and first stage at stride 1
    (the ``proxyless_cifar`` layout), else the ImageNet layout. ``depth``: the blocks kept per
    stage (4: all; a smaller depth skips each stage's last blocks). The identity shortcuts are the
    chain's (``BlockChain.skippable``: stride 1 and equal widths at multiplier 1), whatever the
    width: a stage's first block keeps none even where scaling makes its widths equal (the
    reference, which decides at the scaled widths, differs there only: C=8 on 32x32 data)."""

    def __init__(
        self,
        genotype: ProxylessGenotype,
        *,
        C: int = 32,
        num_classes: int = 1000,
        cifar: bool = False,
        depth: int = 4,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        chain = block_chain(cifar=cifar)
        genotype.validate()
        self.genotype, self.depth = genotype, depth
        widths = scaled_widths(chain, C, genotype.widths)
        self.widths = widths
        self.first_conv = ConvBNReLU6(3, widths.stem, 3, chain.stem_stride)
        first = build_mbconv(FIRST_BLOCK_OP, widths.stem, widths.first, 1)
        blocks = [MobileBlock(first, False)]
        shapes = chain.shapes_from(widths.first, widths.stages)
        for i, (op, (c_in, c_out, stride)) in enumerate(zip(genotype.ops, shapes)):
            if not chain.kept(depth)[i]:
                continue  # beyond the depth: skipped (such a block passes its input on)
            conv = None if op == SKIP_OP else build_mbconv(op, c_in, c_out, stride)
            blocks.append(MobileBlock(conv, chain.skippable[i]))
        self.blocks = nn.ModuleList(blocks)
        self.feature_mix_layer = ConvBNReLU6(widths.stages[-1], widths.head, 1, 1)
        self.global_avg_pooling = nn.AdaptiveAvgPool2d(1)
        self.dropout = nn.Dropout(dropout) if dropout > 0 else None
        self.classifier = nn.Linear(widths.head, num_classes)
        init_he_fout(self)

    def features(self, x: Tensor) -> Tensor:
        """The map the pooling reads: the feature-mix layer's output."""
        x = self.first_conv(x)
        for block in self.blocks:
            x = block(x)
        out: Tensor = self.feature_mix_layer(x)
        return out

    def forward(self, x: Tensor) -> Tensor:
        x = self.global_avg_pooling(self.features(x)).flatten(1)
        if self.dropout is not None:
            x = self.dropout(x)
        logits: Tensor = self.classifier(x)
        return logits


def block_shapes(C: int, *, cifar: bool) -> tuple[Widths, list[tuple[int, int, int]]]:
    """The widths and the searchable blocks' ``(C_in, C_out, stride)`` at width ``C``."""
    chain = block_chain(cifar=cifar)
    widths = scaled_widths(chain, C)
    return widths, chain.shapes_from(widths.first, widths.stages)


def proxyless_network(
    genotype: AnyGenotype, *, C: int, num_classes: int, image_size: int, depth: int = 4
) -> ProxylessNetwork:
    """The network of ``genotype`` for ``image_size`` inputs: the ImageNet layout above 64
    pixels, the 32x32 layout (stem and first stage at stride 1) otherwise."""
    if not isinstance(genotype, ProxylessGenotype):
        raise ValueError(f"expected a ProxylessNAS genotype, got {type(genotype).__name__}")
    return ProxylessNetwork(
        genotype, C=C, num_classes=num_classes, cifar=image_size <= 64, depth=depth
    )


def network_features(net: nn.Module, x: Tensor) -> Tensor:
    """``ProxylessNetwork.features``, module by module."""
    assert isinstance(net, ProxylessNetwork)
    return net.features(x)


def network_logits(net: nn.Module, x: Tensor) -> Tensor:
    assert isinstance(net, ProxylessNetwork)
    out: Tensor = net(x)
    return out


STEM_BLOCK = "proxyless_stem"  # Conv3x3, BN, ReLU6
FIRST_BLOCK = "proxyless_first"  # the fixed MBConv of expansion 1
MIX_BLOCK = "proxyless_mix"  # the feature mix: Conv1x1, BN, ReLU6
CLASSIFIER_BLOCK = "proxyless_classifier"  # global average pool, Linear(C_in -> classes)


def layout_block(part: Part) -> nn.Module:
    """The module one of the family's latency-table blocks measures at ``part``'s shape: the
    stem, the first block, an MBConv choice (without its shortcut addition: the shared ``add``
    part), the feature mix, the classifier."""
    n, ci, co, s = part.name, part.C_in, part.C_out, part.stride
    if n == STEM_BLOCK:
        return ConvBNReLU6(ci, co, 3, s)
    if n == FIRST_BLOCK:
        return build_mbconv(FIRST_BLOCK_OP, ci, co, s)
    if n == MIX_BLOCK:
        return ConvBNReLU6(ci, co, 1, s)
    if n == CLASSIFIER_BLOCK:
        return nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(ci, co))
    try:
        return build_mbconv(n, ci, co, s)
    except ValueError:
        raise ValueError(f"{n!r} is not a block of the ProxylessNAS network") from None


__all__ = [
    "BN_EPS",
    "CLASSIFIER_BLOCK",
    "FIRST_BLOCK",
    "MIX_BLOCK",
    "STEM_BLOCK",
    "BN_MOMENTUM",
    "ConvBNReLU6",
    "MBConv",
    "MobileBlock",
    "ProxylessNetwork",
    "block_shapes",
    "build_mbconv",
    "layout_block",
    "network_features",
    "network_logits",
    "proxyless_network",
]
