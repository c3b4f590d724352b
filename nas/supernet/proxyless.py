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
(``SearchStrategy.apply_mask``) and is never derived there.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from nas.supernet.mixed_op import MixedOp
from nas.supernet.network import SUPERNETS, ArchWeights, Supernet, refuse_options
from search_spaces.proxyless import (
    ConvBNReLU6,
    MobileBlock,
    block_shapes,
    build_mbconv,
    init_he_fout,
)
from search_spaces.proxyless_space import CELL_TYPE, FIRST_BLOCK_OP, SKIP_OP, chain_of
from search_spaces.space import Space


class MBConvMixedOp(MixedOp):
    """A ``MixedOp`` whose candidates are MBConvs from ``C_in`` to ``C_out`` at ``stride`` (and
    the never-run placeholder for ``none``); full width only (no partial channels)."""

    def __init__(
        self,
        C_in: int,
        C_out: int,
        stride: int,
        ops: tuple[str, ...],
        track_running_stats: bool,
        kept: bool = True,
    ) -> None:
        # the base's attributes, with placeholders; then the MBConvs in their place (none for
        # a block beyond the supernet's depth: it only ever passes its input on)
        super().__init__(C_out, stride, (SKIP_OP,) * len(ops))
        self.C_in, self.C_out = C_in, C_out
        self.op_names = ops
        self.ops = nn.ModuleList(
            nn.Identity()  # a placeholder keeps module indices equal to op indices
            if name == SKIP_OP or not kept
            else build_mbconv(name, C_in, C_out, stride, track_running_stats=track_running_stats)
            for name in ops
        )
        self._runnable = [name != SKIP_OP and kept for name in ops]


class ProxylessSupernet(Supernet):
    """The ProxylessNAS search network: stem, first block, 21 mixed blocks, head.

    ``C``: the stem width at multiplier 1 (32; every width scales by ``C / 32``). ``depth``:
    the blocks kept per stage, 1..4 (4: the reference's 21 blocks; the config's
    ``space.layers`` counts the blocks kept, ``BlockChain.depth_of``); a block beyond it has no
    MBConv and only ``none`` unmasked, so it passes its input on. The
    stem and stage strides are the space's (``proxyless``: ImageNet, ``proxyless_cifar``:
    32x32)."""

    family = "proxyless"

    def __init__(
        self,
        *,
        space: Space | str = "proxyless",
        C: int = 32,
        depth: int = 4,
        num_classes: int = 1000,
        track_running_stats: bool = True,
    ) -> None:
        super().__init__()
        self.space = self.own_space(space)
        if C < 1 or num_classes < 1:
            raise ValueError(f"C and num_classes must be positive, got {C}, {num_classes}")
        chain = chain_of(self.space)
        self.kept = chain.kept(depth)
        self.C, self.depth, self.num_classes = C, depth, num_classes
        widths, shapes = block_shapes(C, cifar=chain.stem_stride == 1)
        self.first_conv = ConvBNReLU6(3, widths.stem, 3, chain.stem_stride)
        self.first_block = MobileBlock(
            build_mbconv(FIRST_BLOCK_OP, widths.stem, widths.first, 1), False
        )
        self.cells = nn.ModuleList(
            MBConvMixedOp(c_in, c_out, stride, e.ops, track_running_stats, kept)
            for e, (c_in, c_out, stride), kept in zip(chain.edges, shapes, self.kept)
        )
        self.shortcut = list(chain.skippable)
        self.feature_mix_layer = ConvBNReLU6(widths.stages[-1], widths.head, 1, 1)
        self.global_avg_pooling = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(widths.head, num_classes)
        init_he_fout(self)  # as the reference's run_manager.py initialises the search network
        self._init_masks()

    def _init_masks(self) -> None:
        """Every op, but ``none`` on the blocks that cannot be skipped; only ``none`` on the
        blocks beyond the depth."""
        chain = chain_of(self.space)
        mask = torch.ones(chain.num_edges, chain.num_ops, dtype=torch.bool)
        for e in chain.edges:
            none = e.ops.index(SKIP_OP)
            if not chain.skippable[e.index]:
                mask[e.index, none] = False
            if not self.kept[e.index]:
                mask[e.index] = False
                mask[e.index, none] = True
        self.register_buffer(f"mask_{CELL_TYPE}", mask)

    def check_partial_channels(self, k: int) -> None:
        """Only K=1: an edge's ops change the width, so no channels can bypass them."""
        if k != 1:
            raise ValueError(
                f"partial channels (K={k}) are not available on the {self.space.name} supernet "
                "(its blocks change the width); use partial_channels=1"
            )

    def first_cell_of(self, cell_type: str) -> int:
        return 0

    @property
    def cell_types(self) -> list[str | None]:
        return [CELL_TYPE] * len(self.cells)

    def _run_blocks(self, x: Tensor, weights: ArchWeights, blocks: range) -> Tensor:
        if not len(blocks):
            return x
        active = self.active_ops(weights)[CELL_TYPE]
        w_E = weights[CELL_TYPE].unbind(0)
        edge_w = self.current_edge_weights()
        for i in blocks:
            op = self.cells[i]
            skip = x if self.shortcut[i] else None
            out = op(x, w_E[i], active[i], None)
            if edge_w is not None and out is not None:  # PC-DARTS's edge normalisation
                out = out * edge_w[CELL_TYPE][i]
            if out is None:  # only `none` is active: the block passes its input on
                assert skip is not None
                x = skip
            else:
                x = out if skip is None else out + skip
        return x

    def run_prefix(self, x: Tensor, weights: ArchWeights, stop: int) -> Tensor:
        return self._run_blocks(self.first_block(self.first_conv(x)), weights, range(stop))

    def run_suffix(self, state: Tensor, weights: ArchWeights, start: int) -> Tensor:
        x = self._run_blocks(state, weights, range(start, len(self.cells)))
        pooled = self.global_avg_pooling(self.feature_mix_layer(x)).flatten(1)
        logits: Tensor = self.classifier(pooled)
        return logits

    def features(self, x: Tensor, weights: ArchWeights) -> Tensor:
        x = self.run_prefix(x, weights, len(self.cells))
        out: Tensor = self.feature_mix_layer(x)
        return out


def build(
    space: Space,
    *,
    C: int,
    layers: int,
    num_classes: int,
    partial_channels: int,
    track_running_stats: bool,
    stem: str,
    lastact: bool | None,
    pool_bn: bool | None,
) -> Supernet:
    has = "has the ProxylessNAS head (feature mix, pooling, classifier)"
    refuse_options(space.name, has, lastact=lastact, pool_bn=pool_bn)
    # ``stem`` (from the data's image size) is not read: the space fixes its layout;
    # ``layers``: the searchable blocks kept (21: all; 16, 11, 6 or 1..4: a depth per stage)
    net = ProxylessSupernet(
        space=space,
        C=C,
        depth=chain_of(space).depth_of(layers),
        num_classes=num_classes,
        track_running_stats=track_running_stats,
    )
    net.check_partial_channels(partial_channels)
    return net


SUPERNETS[ProxylessSupernet.family] = build
