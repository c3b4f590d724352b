"""The ProxylessNAS search network: the supernet of the spaces ``proxyless`` / ``proxyless_cifar``.

Second stage of the pipeline (``nas.supernet``), the ProxylessNAS family's own module there (the
family's other hooks are ``search_spaces.proxyless_family``'s). Cai, Zhu & Han, ICLR 2019; the
layout of mit-han-lab/proxylessnas ``search/models/super_nets/super_proxyless.py``
(``SuperProxylessNASNets``) and ``search/modules/mix_op.py`` (``MixedEdge``): the stem, the fixed
first block, then each searchable block as one mixed edge over its candidate MBConvs (and
``none``, the reference's ``Zero``, where the block can be skipped), plus the block's identity
shortcut where it has one (stride 1, equal widths), the feature mix, pooling and classifier.
BN momentum 0.1, eps 1e-3, affine as the reference's search network. At ImageNet widths the
weights number 16,034,168, the reference's ``weight_parameters()`` exactly (``tests``).

The blocks form one cell type (``blocks``) whose edge ``i`` is block ``i``; each mixed edge is a
``MixedOp`` whose candidates are MBConvs from ``C_in`` to ``C_out`` channels. ``none`` is listed
on every edge (architecture tensors are rectangular) and masked from the start where the block
cannot be skipped, so it never runs, never takes a share of the mixing weights
(``SearchStrategy.apply_mask``) and is never derived there. The search network itself is
``nas.supernet.chain``'s (shared with FBNet's); this module gives its MBConvs, stem and head.
"""

from __future__ import annotations

from torch import Tensor, nn

from nas.supernet.chain import ChainMixedOp, ChainSupernet
from nas.supernet.network import SUPERNETS
from search_spaces.chain import ChainCell, Shape, Widths
from search_spaces.proxyless import (
    ConvBNReLU6,
    MobileBlock,
    block_shapes,
    build_mbconv,
    init_he_fout,
)
from search_spaces.proxyless_space import CELL_TYPE, FIRST_BLOCK_OP, SKIP_OP
from search_spaces.proxyless_space import Widths as ProxylessWidths


class MBConvMixedOp(ChainMixedOp):
    """A ``ChainMixedOp`` whose candidates are MBConvs from ``C_in`` to ``C_out`` at ``stride``
    (and the never-run placeholder for ``none``); full width only (no partial channels)."""

    skip_op = SKIP_OP

    def candidate(
        self, op: str, C_in: int, C_out: int, stride: int, track_running_stats: bool
    ) -> nn.Module:
        return build_mbconv(op, C_in, C_out, stride, track_running_stats=track_running_stats)


class ProxylessSupernet(ChainSupernet):
    """The ProxylessNAS search network: stem, first block, 21 mixed blocks, head.

    ``C``: the stem width at multiplier 1 (32; every width scales by ``C / 32``). ``depth``:
    the blocks kept per stage, 1..4 (4: the reference's 21 blocks; the config's
    ``space.layers`` counts the blocks kept, ``BlockChain.depth_of``); a block beyond it has no
    MBConv and only ``none`` unmasked, so it passes its input on. The
    stem and stage strides are the space's (``proxyless``: ImageNet, ``proxyless_cifar``:
    32x32)."""

    family = "proxyless"
    cell_type = CELL_TYPE
    mixed_op = MBConvMixedOp
    head_text = "has the ProxylessNAS head (feature mix, pooling, classifier)"
    default_space = "proxyless"
    default_C = 32

    def block_shapes(self, chain: ChainCell, C: int) -> tuple[Widths, list[Shape]]:
        return block_shapes(C, cifar=chain.stem_stride == 1)

    def build_stem(self, chain: ChainCell, widths: Widths) -> None:
        assert isinstance(widths, ProxylessWidths)
        self.first_conv = ConvBNReLU6(3, widths.stem, 3, chain.stem_stride)
        self.first_block = MobileBlock(
            build_mbconv(FIRST_BLOCK_OP, widths.stem, widths.first, 1), False
        )

    def build_head(self, widths: Widths) -> None:
        self.feature_mix_layer = ConvBNReLU6(widths.stages[-1], widths.head, 1, 1)
        self.global_avg_pooling = nn.AdaptiveAvgPool2d(1)

    def init_weights(self) -> None:
        init_he_fout(self)  # as the reference's run_manager.py initialises the search network

    def stem(self, x: Tensor) -> Tensor:
        out: Tensor = self.first_block(self.first_conv(x))
        return out

    def last(self, x: Tensor) -> Tensor:
        out: Tensor = self.feature_mix_layer(x)
        return out

    def pool(self, x: Tensor) -> Tensor:
        out: Tensor = self.global_avg_pooling(x)
        return out


SUPERNETS[ProxylessSupernet.family] = ProxylessSupernet.build
