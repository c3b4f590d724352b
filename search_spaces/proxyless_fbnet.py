"""FBNet-A, -B and -C (Wu et al., CVPR 2019): published networks of the MobileNet family by name.

First stage of the pipeline (``search_spaces``). FBNet's space is not ProxylessNAS's, so these
networks are not genotypes of the ``proxyless`` spaces: 22 searchable blocks in stages of 1, 4,
4, 8 and 5 blocks (widths 16, 24, 32, 64 then 112, 184 then 352, stem 16, last conv 1504 or
1984), candidates of kernel 3 / 5 and expansion 1 / 3 / 6 with grouped (2 groups) 1x1 convs and
a channel shuffle, and a ``skip``; ReLU rather than ReLU6, convolutions with a bias, BN eps 1e-5,
a 1x1 convolution as classifier. They are built by name here (``fbnet_network``), layer for
layer as facebookresearch/mobile-vision builds them (``mobile_cv/arch/fbnet_v2/
fbnet_modeldef_cls_fbnet.py``: the definitions ``fbnet_a``, ``fbnet_b``, ``fbnet_c``;
``irf_block.py``: ``IRFBlock``; ``basic_blocks.py``: ``ConvBNRelu``, ``ChannelShuffle``;
``mobile_cv/model_zoo/models/fbnet_v2.py``: ``FBNet``, ``ClsConvHead``), written anew.

Counting conventions: every parameter counts (conv biases and BN's affine parameters included:
4,321,232 / 4,818,216 / 5,592,784 for A / B / C, as ``sum(p.numel())`` of the reference); the
multiply-accumulates of ``nas.summary.count_macs`` (convolutions and linear layers, forward
hooks; no bias, BN, ReLU, addition or pooling) are 244,452,664 / 291,004,424 / 378,136,224 at
224x224. mobile-vision's own counter (``mobile_cv.lut.lib.pt.flops_utils.print_model_flops``)
reports 4,270,288 / 4,766,672 / 5,525,424 "params" and 244,526,360 / 291,101,640 / 378,233,440
"flops": its parameters are the conv weights alone (no biases, no BN), and its flops add the
global pooling's input elements (1504 or 1984 x 7 x 7) to the convolutions' multiply-adds.
Both were measured by running the reference; with the same weights this module's networks give
the reference's outputs bit for bit at float64.
"""

from __future__ import annotations

from torch import Tensor, nn

# Per network: its blocks in order, each (op, output channels, stride); ops ``kKeE`` (kernel K,
# expansion E), ``kKeEg2`` (the 1x1 convs in 2 groups, a channel shuffle after the expansion),
# ``skip`` (identity); then the last 1x1 conv's width. Read off the reference definitions.
FBNET_BLOCKS: dict[str, tuple[tuple[tuple[str, int, int], ...], int]] = {
    "fbnet_a": (
        (
            ("skip", 16, 1),
            ("k3e3", 24, 2), ("k3e1", 24, 1), ("skip", 24, 1), ("skip", 24, 1),
            ("k5e6", 32, 2), ("k3e3", 32, 1), ("k5e1", 32, 1), ("k3e3", 32, 1),
            ("k5e6", 64, 2), ("k5e3", 64, 1), ("k5e1g2", 64, 1), ("k5e6", 64, 1),
            ("k3e6", 112, 1), ("k5e1g2", 112, 1), ("k5e3", 112, 1), ("k3e1g2", 112, 1),
            ("k5e6", 184, 2), ("k5e6", 184, 1), ("k5e3", 184, 1), ("k5e6", 184, 1),
            ("k5e6", 352, 1),
        ),
        1504,
    ),
    "fbnet_b": (
        (
            ("k3e1", 16, 1),
            ("k3e6", 24, 2), ("k5e1", 24, 1), ("k3e1", 24, 1), ("k3e1", 24, 1),
            ("k5e6", 32, 2), ("k5e3", 32, 1), ("k3e6", 32, 1), ("k5e6", 32, 1),
            ("k5e6", 64, 2), ("k5e6", 64, 1), ("skip", 64, 1), ("k5e3", 64, 1),
            ("k5e6", 112, 1), ("k3e1", 112, 1), ("k5e1", 112, 1), ("k5e3", 112, 1),
            ("k5e6", 184, 2), ("k5e1", 184, 1), ("k5e6", 184, 1), ("k5e6", 184, 1),
            ("k3e6", 352, 1),
        ),
        1984,
    ),
    "fbnet_c": (
        (
            ("k3e1", 16, 1),
            ("k3e6", 24, 2), ("skip", 24, 1), ("k3e1", 24, 1), ("k3e1", 24, 1),
            ("k5e6", 32, 2), ("k5e3", 32, 1), ("k5e6", 32, 1), ("k3e6", 32, 1),
            ("k5e6", 64, 2), ("k5e3", 64, 1), ("k5e6", 64, 1), ("k5e6", 64, 1),
            ("k5e6", 112, 1), ("k5e6", 112, 1), ("k5e6", 112, 1), ("k5e3", 112, 1),
            ("k5e6", 184, 2), ("k5e6", 184, 1), ("k5e6", 184, 1), ("k5e6", 184, 1),
            ("k3e6", 352, 1),
        ),
        1984,
    ),
}  # fmt: skip
STEM_WIDTH = 16


def _conv_bn(c_in: int, c_out: int, k: int, stride: int, groups: int, relu: bool) -> nn.Sequential:
    layers: list[nn.Module] = [
        nn.Conv2d(c_in, c_out, k, stride, k // 2, groups=groups, bias=True),
        nn.BatchNorm2d(c_out),
    ]
    if relu:
        layers.append(nn.ReLU(inplace=True))
    return nn.Sequential(*layers)


class ChannelShuffle(nn.Module):
    def __init__(self, groups: int) -> None:
        super().__init__()
        self.groups = groups

    def forward(self, x: Tensor) -> Tensor:
        return nn.functional.channel_shuffle(x, self.groups)


class FBNetBlock(nn.Module):
    """An inverted residual block of FBNet: 1x1 expansion (absent where it would not change
    the width), an optional channel shuffle, KxK depthwise, 1x1 projection without ReLU; the
    input added where stride 1 keeps the width."""

    def __init__(self, op: str, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        kernel, rest = op[1:].split("e")
        expand, _, groups = rest.partition("g")
        k, e, g = int(kernel), int(expand), int(groups or 1)
        mid = c_in * e
        self.pw = _conv_bn(c_in, mid, 1, 1, g, True) if mid != c_in else None
        self.shuffle = ChannelShuffle(g) if g > 1 else None
        self.dw = _conv_bn(mid, mid, k, stride, mid, True)
        self.pwl = _conv_bn(mid, c_out, 1, 1, g, False)
        self.residual = stride == 1 and c_in == c_out

    def forward(self, x: Tensor) -> Tensor:
        y = x if self.pw is None else self.pw(x)
        if self.shuffle is not None:
            y = self.shuffle(y)
        y = self.pwl(self.dw(y))
        return y + x if self.residual else y


class FBNetNetwork(nn.Module):
    """FBNet-A / -B / -C by name; ``forward`` returns the logits."""

    def __init__(self, name: str, num_classes: int = 1000) -> None:
        super().__init__()
        if name not in FBNET_BLOCKS:
            raise ValueError(
                f"unknown FBNet network {name!r}; expected one of {', '.join(FBNET_BLOCKS)}"
            )
        blocks, last = FBNET_BLOCKS[name]
        self.name = name
        layers: list[nn.Module] = [_conv_bn(3, STEM_WIDTH, 3, 2, 1, True)]
        c_in = STEM_WIDTH
        for op, c_out, stride in blocks:
            if op == "skip":
                if c_in != c_out or stride != 1:
                    raise ValueError(f"{name}: a skip block must keep its shape")
                layers.append(nn.Identity())
            else:
                layers.append(FBNetBlock(op, c_in, c_out, stride))
            c_in = c_out
        layers.append(_conv_bn(c_in, last, 1, 1, 1, True))
        self.stages = nn.Sequential(*layers)
        self.avg_pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Conv2d(last, num_classes, 1)  # the classifier: a 1x1 conv with bias

    def features(self, x: Tensor) -> Tensor:
        out: Tensor = self.stages(x)
        return out

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.head(self.avg_pool(self.features(x)))
        return out.flatten(1)


def fbnet_network(name: str, num_classes: int = 1000) -> FBNetNetwork:
    """The published FBNet network ``name`` (``fbnet_a``, ``fbnet_b``, ``fbnet_c``)."""
    return FBNetNetwork(name, num_classes)


__all__ = ["FBNET_BLOCKS", "FBNetBlock", "FBNetNetwork", "fbnet_network"]
