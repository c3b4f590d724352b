"""FBNet's space as data: its 22 searchable blocks, their 9 candidates, its two spaces (no torch).

First stage of the pipeline (``search_spaces``). Wu, Dai, Zhang, Wang, Sun, Wu, Tian, Vajda, Jia
& Keutzer, "FBNet: Hardware-Aware Efficient ConvNet Design via Differentiable Neural
Architecture Search", CVPR 2019: the macro-architecture of its Table 1 and the candidate blocks
of its Table 2, laid out as facebookresearch/mobile-vision defines the found networks
(``mobile_cv/arch/fbnet_v2/fbnet_modeldef_cls_fbnet.py``: ``fbnet_a``, ``fbnet_b``,
``fbnet_c``; the blocks of ``irf_block.py`` / ``blocks_factory.py``):

* a stem Conv3x3 of stride 2 to 16 channels (BN, ReLU);
* 22 searchable blocks in seven stages: widths 16, 24, 32, 64, 112, 184, 352, depths 1, 4, 4,
  4, 4, 4, 1, strides 1, 2, 2, 2, 1, 2, 1 (the stride on a stage's first block);
* each block chooses one of 9 candidates (the paper's Table 2, in its order): an inverted
  residual ``kKeE`` of kernel K (3, 5) and expansion E (1, 3, 6), ``kKe1g2`` (expansion 1, its
  1x1 convolutions in 2 groups with a channel shuffle), or ``skip``; a block of stride 1 whose
  input and output widths are equal (16 of the 22) adds its input (the identity shortcut),
  and only such a block may be skipped (``skip`` elsewhere is listed but never allowed, as the
  ProxylessNAS chain treats its ``none``);
* a 1x1 conv to 1984 channels (BN, ReLU; FBNet-A's is 1504 wide, which its genotype carries),
  global average pooling and a 1x1 convolution as classifier. Convolutions have a bias.

In the toolkit's terms the searchable blocks form one cell type, ``fbnet_blocks``, whose edges
are a chain: edge ``i`` joins node ``i`` to node ``i + 1`` (block ``i``'s input and output).
Every edge lists the same 9 ops (architecture tensors are rectangular, ``[22, 9]``); on the 6
blocks that change the shape ``skip`` is masked from the start, never derived and refused in
a genotype.

Two spaces: ``fbnet``, the ImageNet layout (224x224 inputs, a 7x7 map before the pooling), and
``fbnet_cifar``, the same chain for 32x32 inputs: the stem runs at stride 1 and so does the
first stride-2 stage (24 channels), so the three stride-2 stages left halve 32 -> 16 -> 8 -> 4
(a 4x4 map before the pooling), as ``proxyless_cifar`` adapts its chain. Block for block the
two have the same widths, ops and skippable blocks, so a genotype of one is a genotype of the
other.

Widths: a network at width ``C`` (the stem's channels at multiplier 1: 16) scales every width,
the last conv's included, by ``C / 16`` and rounds it as mobile-vision's ``FBNetBuilder`` does
(``_get_divisible_width``: ``get_divisible_by(int(w * ratio), 8, 8)``). Depth: the size word
``blocks`` (``layers``) is the number of searchable blocks a network keeps, 22 in the paper;
17, 12 or 7 keep the first 3, 2 or 1 blocks of each stage (a number up to 4 is read as that
depth per stage); the blocks left out could all be skipped, so such a network is the full chain
with them skipped. What every chain space shares (the checks, depths and block shapes of
``FBNetChain``) is ``search_spaces.chain``'s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from search_spaces.chain import ChainCell, build_chain, chain_cell_of, chain_space
from search_spaces.space import SPACE_BUILDERS, Space

FAMILY = "fbnet"
CELL_TYPE = "fbnet_blocks"
SKIP_OP = "skip"  # the block passes its input on (its identity shortcut alone)
# the paper's candidate blocks (Table 2) in its order: kernel, expansion, grouped 1x1 convs
CONV_OPS: tuple[str, ...] = (
    "k3e1",
    "k3e1g2",
    "k3e3",
    "k3e6",
    "k5e1",
    "k5e1g2",
    "k5e3",
    "k5e6",
)
FBNET_OPS: tuple[str, ...] = (*CONV_OPS, SKIP_OP)

BASE_STEM = 16  # the stem width at multiplier 1: a network's ``C``
BASE_HEAD = 1984  # the last 1x1 conv (FBNet-A: 1504)
STAGE_WIDTHS: tuple[int, ...] = (16, 24, 32, 64, 112, 184, 352)
STAGE_DEPTHS: tuple[int, ...] = (1, 4, 4, 4, 4, 4, 1)
STAGE_STRIDES: tuple[int, ...] = (1, 2, 2, 2, 1, 2, 1)


def parse_block_op(op: str) -> tuple[int, int, int]:
    """``(kernel, expansion, groups)`` of a block op ``kKeE`` / ``kKeEgG``; a one-line ValueError
    for any other name (``skip`` included)."""
    try:
        if not op.startswith("k"):
            raise ValueError
        kernel, rest = op[1:].split("e")
        expand, _, groups = rest.partition("g")
        k, e, g = int(kernel), int(expand), int(groups or 1)
    except ValueError:
        raise ValueError(f"{op!r} is not an FBNet block op (kKeE or kKeEgG)") from None
    if k % 2 == 0 or e < 1 or g < 1:
        raise ValueError(f"{op!r} is not an FBNet block op (kKeE or kKeEgG, odd K)")
    return k, e, g


def divisible_width(v: float, divisor: int = 8) -> int:
    """mobile-vision's ``get_divisible_by(int(v), divisor, divisor)`` (``mobile_cv/arch/utils/
    helper.py``): ``int(v)`` rounded half up to a multiple of ``divisor``, up once more if that
    lost over 5 %, at least ``divisor``."""
    num = int(v)
    ret = num
    if num % divisor:
        ret = int((math.floor(num / divisor + 0.5) or 1) * divisor)
        if ret < 0.95 * num:
            ret += divisor
    return max(ret, divisor)


@dataclass(frozen=True)
class Widths:
    """The widths of one network: stem, each stage, last conv."""

    stem: int
    stages: tuple[int, ...]
    head: int


@dataclass(frozen=True)
class FBNetChain(ChainCell):
    """The searchable blocks as a chain cell (``search_spaces.chain.ChainCell``), entered at the
    stem's width."""

    stem_width: int = BASE_STEM
    head_width: int = BASE_HEAD

    chain_ops: ClassVar[tuple[str, ...]] = FBNET_OPS
    skip_op: ClassVar[str] = SKIP_OP
    a_chain: ClassVar[str] = "an FBNet chain"
    a_network: ClassVar[str] = "an FBNet network"

    def widths_at(self, C: int, head: int | None = None) -> Widths:
        """The widths at ``C`` (multiplier ``C / 16``), the last conv ``head`` wide at
        multiplier 1 (None: the chain's 1984), rounded as mobile-vision rounds them; at
        ``C = 16`` they are the widths themselves."""
        if isinstance(C, bool) or not isinstance(C, int) or C < 1:
            raise ValueError(f"C must be a positive int, got {C!r}")
        base = (self.stem_width, *self.widths, head or self.head_width)
        if self.stem_width != C:
            base = tuple(divisible_width(w * C / self.stem_width) for w in base)
        return Widths(base[0], tuple(base[1:-1]), base[-1])

    def block_shapes(self, widths: Widths) -> list[tuple[int, int, int]]:
        """``(C_in, C_out, stride)`` of every searchable block at these widths."""
        return self.shapes_from(widths.stem, widths.stages)


def fbnet_chain(*, cifar: bool) -> FBNetChain:
    """The chain of ``fbnet`` (ImageNet layout) or, ``cifar``, of ``fbnet_cifar``."""
    strides = (STAGE_STRIDES[0], 1, *STAGE_STRIDES[2:]) if cifar else STAGE_STRIDES
    return build_chain(
        FBNetChain,
        c_in=BASE_STEM,
        widths=STAGE_WIDTHS,
        depths=STAGE_DEPTHS,
        strides=strides,
        cifar=cifar,
    )


def fbnet_space(name: str) -> Space:
    """The space ``fbnet`` (ImageNet layout) or ``fbnet_cifar`` (32x32 layout)."""
    return chain_space(name, FBNET_SPACES, "FBNet", FAMILY, CELL_TYPE, fbnet_chain)


def chain_of(space: Space) -> FBNetChain:
    """The block chain of a space of the family."""
    return chain_cell_of(space, CELL_TYPE, FBNetChain)


FBNET_SPACES: tuple[str, ...] = ("fbnet", "fbnet_cifar")
SPACE_BUILDERS.update(dict.fromkeys(FBNET_SPACES, fbnet_space))  # get_space's entries

# FBNet-A, -B and -C: per network its blocks in order, each (op, output channels, stride), then
# the last 1x1 conv's width; read off facebookresearch/mobile-vision
# ``mobile_cv/arch/fbnet_v2/fbnet_modeldef_cls_fbnet.py`` (``ir_kK`` with expansion E: ``kKeE``;
# ``ir_kK_g2`` with ``pwl_groups`` 2: ``kKe1g2``; ``skip``). Widths and strides are the chain's
# (``search_spaces.published`` keeps the ops and the last width as each network's genotype).
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
