"""The ProxylessNAS block chain as data: its candidate ops, its layout, its two spaces (no torch).

First stage of the pipeline (``search_spaces``). Cai, Zhu & Han, "ProxylessNAS: Direct Neural
Architecture Search on Target Task and Hardware", ICLR 2019; the layout is that of the
reference search code, mit-han-lab/proxylessnas ``search/models/super_nets/super_proxyless.py``
(``SuperProxylessNASNets``) with the defaults of ``search/imagenet_arch_search.py``:

* a stem Conv3x3 (stride 2, 32 channels, BN, ReLU6) and a fixed first block, an MBConv of
  expansion 1 and kernel 3 from 32 to 16 channels;
* six stages of searchable blocks: widths 24, 40, 80, 96, 192, 320, depths 4, 4, 4, 4, 4, 1,
  strides 2, 2, 2, 1, 2, 1 (the stride on a stage's first block): 21 searchable blocks;
* each block chooses one of 6 MBConvs (kernel 3, 5 or 7 x expansion 3 or 6, the reference's
  ``conv_candidates`` order), and a block of stride 1 whose input and output widths are equal
  (15 of the 21) may also be skipped (the reference's ``Zero`` candidate, last; the block's
  identity shortcut then carries its input through). This toolkit names that op ``none``;
* a 1x1 feature-mix conv to 1280 channels (BN, ReLU6), global average pooling, a linear
  classifier; BN momentum 0.1, eps 1e-3.

In the toolkit's terms the searchable blocks form one cell type, ``blocks``, whose edges are a
chain: edge ``i`` joins node ``i`` to node ``i + 1`` (block ``i``'s input and output). Every edge
lists the same 7 ops (architecture tensors are rectangular, ``[21, 7]``); on the 6 edges whose
block cannot be skipped ``none`` is listed but never allowed (``BlockChain.skippable``): the
supernet masks it from the start, the derivation never picks it and a genotype that names it
there is refused.

Two spaces: ``proxyless``, the ImageNet layout (224x224 inputs), and ``proxyless_cifar``, the
same chain for 32x32 inputs: the stem has stride 1 and so has the first stage (the stages of
stride 2 halve 32 -> 16 -> 8 -> 4), so the feature map before the pooling is 4x4 (ImageNet's
is 7x7). Block for block the two chains have the same widths, ops and skippable blocks, so a
genotype of one is a genotype of the other.

Widths: a network at width ``C`` (the stem's channels at multiplier 1: 32) scales every width by
``C / 32`` and rounds it to a multiple of 8 as the reference's ``make_divisible`` does; the
feature-mix width stays 1280 below multiplier 1 (the reference's rule). Depth: the size word
``blocks`` (``layers``) is the number of searchable blocks a network keeps, 21 in the
reference; 16, 11 or 6 keep the first 3, 2 or 1 blocks of each stage (a number up to 4 is read
as that depth per stage). The blocks left out could all be skipped, so such a network is the
full chain with them skipped, and the architecture tensors keep their 21 rows (the supernet
masks every op of a left-out block but ``none``). What every chain space shares (the checks,
depths and block shapes of ``BlockChain``) is ``search_spaces.chain``'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from search_spaces.chain import ChainCell, build_chain, chain_cell_of, chain_space
from search_spaces.space import SPACE_BUILDERS, Space

FAMILY = "proxyless"
CELL_TYPE = "blocks"
SKIP_OP = "none"  # the reference's ``Zero``: the block is skipped (its shortcut remains)
# the reference's ``conv_candidates`` in its order (search/imagenet_arch_search.py), then zero
MBCONV_OPS: tuple[str, ...] = (
    "3x3_MBConv3",
    "3x3_MBConv6",
    "5x5_MBConv3",
    "5x5_MBConv6",
    "7x7_MBConv3",
    "7x7_MBConv6",
)
PROXYLESS_OPS: tuple[str, ...] = (*MBCONV_OPS, SKIP_OP)
# the fixed first block (expansion 1): an op name the chain's edges do not offer
FIRST_BLOCK_OP = "3x3_MBConv1"

BASE_STEM = 32  # the stem width at multiplier 1: a network's ``C``
BASE_FIRST = 16
BASE_HEAD = 1280


def parse_mbconv(op: str) -> tuple[int, int]:
    """``(kernel, expansion)`` of an MBConv op name ``KxK_MBConvE``; a one-line ValueError
    for any other name."""
    try:
        size, rest = op.split("_MBConv")
        k1, k2 = size.split("x")
        kernel, expand = int(k1), int(rest)
    except ValueError:
        raise ValueError(f"{op!r} is not an MBConv op (KxK_MBConvE)") from None
    if k1 != k2 or kernel % 2 == 0 or expand < 1:
        raise ValueError(f"{op!r} is not an MBConv op (KxK_MBConvE, odd K)")
    return kernel, expand


def make_divisible(v: float, divisor: int = 8) -> int:
    """``v`` rounded to the nearest multiple of ``divisor`` (at least ``divisor``), and up once
    more if that lost over 10 %: the rounding of the reference's ``utils.make_divisible``."""
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


@dataclass(frozen=True)
class BlockChain(ChainCell):
    """The searchable blocks as a chain cell (``search_spaces.chain.ChainCell``), entered at the
    fixed first block's width (``first_width``)."""

    stem_width: int = BASE_STEM
    head_width: int = BASE_HEAD
    first_width: int = BASE_FIRST

    chain_ops: ClassVar[tuple[str, ...]] = PROXYLESS_OPS
    skip_op: ClassVar[str] = SKIP_OP
    a_network: ClassVar[str] = "a ProxylessNAS network"

    def block_shapes(self, C: int = BASE_STEM) -> list[tuple[int, int, int]]:
        """``(C_in, C_out, stride)`` of every searchable block at width ``C``."""
        w = scaled_widths(self, C)
        return self.shapes_from(w.first, w.stages)


@dataclass(frozen=True)
class Widths:
    """The widths of one network: stem, first block, each stage, feature mix."""

    stem: int
    first: int
    stages: tuple[int, ...]
    head: int

    def as_tuple(self) -> tuple[int, ...]:
        return (self.stem, self.first, *self.stages, self.head)


def scaled_widths(chain: BlockChain, C: int, given: tuple[int, ...] | None = None) -> Widths:
    """The widths at ``C`` (multiplier ``C / 32``) of the chain's, or of ``given`` (a released
    network's nine widths: stem, first block, six stages, feature mix), rounded as the
    reference rounds them; at ``C = 32`` they are the widths themselves."""
    if C < 1:
        raise ValueError(f"C must be a positive int, got {C}")
    mult = C / BASE_STEM
    base = given or (chain.stem_width, chain.first_width, *chain.widths, chain.head_width)
    if len(base) != len(chain.widths) + 3:
        raise ValueError(
            f"expected {len(chain.widths) + 3} widths (stem, first block, "
            f"{len(chain.widths)} stages, feature mix), got {len(base)}"
        )
    if mult == 1:
        return Widths(base[0], base[1], tuple(base[2:-1]), base[-1])
    scaled = [make_divisible(w * mult) for w in base]
    head = scaled[-1] if mult > 1 else base[-1]  # the reference keeps 1280 below 1.0
    return Widths(scaled[0], scaled[1], tuple(scaled[2:-1]), head)


def block_chain(*, cifar: bool) -> BlockChain:
    widths, depths = (24, 40, 80, 96, 192, 320), (4, 4, 4, 4, 4, 1)
    strides = (1 if cifar else 2, 2, 2, 1, 2, 1)
    return build_chain(
        BlockChain, c_in=BASE_FIRST, widths=widths, depths=depths, strides=strides, cifar=cifar
    )


def proxyless_space(name: str) -> Space:
    """The space ``proxyless`` (ImageNet layout) or ``proxyless_cifar`` (32x32 layout)."""
    return chain_space(name, PROXYLESS_SPACES, "ProxylessNAS", FAMILY, CELL_TYPE, block_chain)


def chain_of(space: Space) -> BlockChain:
    """The block chain of a space of the family."""
    return chain_cell_of(space, CELL_TYPE, BlockChain)


PROXYLESS_SPACES: tuple[str, ...] = ("proxyless", "proxyless_cifar")
SPACE_BUILDERS.update(dict.fromkeys(PROXYLESS_SPACES, proxyless_space))  # get_space's entries

# The authors' released networks (han-cai/files ``proxylessnas/<name>.config``), each as its 21
# block choices and its nine widths (stem, first block, six stages, feature mix): the configs
# list every block's MBConv, or ZeroLayer for a skipped block. ``proxyless_mobile`` widens the
# first stage from the searched 24 to 32 channels (the mobile latency table the search used,
# ``mobile_trim.yaml``, has 24 there); GPU and CPU nets and the 1.4x mobile net have widths of
# their own.
_K3E3, _K3E6, _K5E3, _K5E6, _K7E3, _K7E6 = MBCONV_OPS
PUBLISHED_BLOCKS: dict[str, tuple[tuple[str, ...], tuple[int, ...]]] = {
    "proxyless_mobile": (
        (_K5E3, _K3E3, SKIP_OP, SKIP_OP, _K7E3, _K3E3, _K5E3, _K5E3, _K7E6, _K5E3, _K5E3)
        + (_K5E3, _K5E6, _K5E3, _K5E3, _K5E3, _K7E6, _K7E6, _K7E3, _K7E3, _K7E6),
        (32, 16, 32, 40, 80, 96, 192, 320, 1280),
    ),
    "proxyless_mobile_14": (
        (_K5E3, _K3E3, SKIP_OP, SKIP_OP, _K7E3, _K3E3, _K5E3, _K5E3, _K7E6, _K5E3, _K5E3)
        + (_K5E3, _K5E6, _K5E3, _K5E3, _K5E3, _K7E6, _K7E6, _K7E3, _K7E3, _K7E6),
        (48, 24, 40, 56, 112, 136, 256, 448, 1792),
    ),
    "proxyless_gpu": (
        (_K5E3, SKIP_OP, SKIP_OP, SKIP_OP, _K7E3, SKIP_OP, SKIP_OP, _K3E3, _K7E6, SKIP_OP)
        + (SKIP_OP, _K5E3, _K5E6, SKIP_OP, _K3E3, _K5E3, _K7E6, _K7E6, _K7E6, _K5E6, _K7E6),
        (40, 24, 32, 56, 112, 128, 256, 432, 1728),
    ),
    "proxyless_cpu": (
        (_K3E6, _K3E3, _K3E3, _K3E3, _K3E6, _K3E3, _K3E3, _K5E3, _K3E6, SKIP_OP, SKIP_OP)
        + (_K3E3, _K5E6, _K3E3, _K3E3, _K3E3, _K5E6, _K5E3, _K5E3, _K3E3, _K5E6),
        (40, 24, 32, 48, 88, 104, 216, 360, 1432),
    ),
}
