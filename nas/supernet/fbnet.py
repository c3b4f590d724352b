"""The FBNet search network: the supernet of the spaces ``fbnet`` / ``fbnet_cifar``.

Second stage of the pipeline (``nas.supernet``), the FBNet family's own module there (the
family's other hooks are ``search_spaces.fbnet_family``'s). Wu et al., "FBNet: Hardware-Aware
Efficient ConvNet Design via Differentiable Neural Architecture Search", CVPR 2019, Section 3
(Table 1, eq. 5-6): the stem, then each of the 22 searchable blocks as one mixed block over its
candidates (the paper's stochastic super net: every candidate of a layer run and summed with
its mask weight), the last 1x1 conv, pooling and classifier, as the discrete network
(``search_spaces.fbnet``) builds them. The paper's search code was not released; this is the
same pattern as the ProxylessNAS supernet (``nas.supernet.proxyless``).

The blocks form one cell type (``fbnet_blocks``) whose edge ``i`` is block ``i``; each mixed
block is a ``MixedOp`` whose candidates are FBNet blocks from ``C_in`` to ``C_out`` channels
without their shortcut, plus the block's identity shortcut where it has one (stride 1, equal
widths). ``skip`` is that shortcut alone: a never-run placeholder of the mixed op, like
ProxylessNAS's ``none``. As mixing weights sum to 1 this is the paper's sum over candidates that
each carry their own shortcut (``sum_k m_k (op_k(x) + x) + m_skip x = sum_k m_k op_k(x) + x``).
``skip`` is listed on every edge (architecture tensors are rectangular) and masked from the
start where the block changes the shape, so it never takes a share of the mixing weights
(``SearchStrategy.apply_mask``) and is never derived there.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from nas.supernet.mixed_op import MixedOp
from nas.supernet.network import SUPERNETS, ArchWeights, Supernet, refuse_options
from search_spaces.fbnet import ConvBNReLU, FBNetBlock, block_shapes
from search_spaces.fbnet_space import BASE_STEM, CELL_TYPE, SKIP_OP, chain_of
from search_spaces.space import Space

# the base MixedOp's own name for a candidate it never runs (a placeholder module)
_PLACEHOLDER = "none"


class FBNetMixedOp(MixedOp):
    """A ``MixedOp`` whose candidates are FBNet blocks (without shortcut) from ``C_in`` to
    ``C_out`` at ``stride``, and the never-run placeholder for ``skip``; full width only (no
    partial channels). ``kept`` False: a block beyond the supernet's depth, which only ever
    passes its input on (no candidate is built)."""

    def __init__(
        self,
        C_in: int,
        C_out: int,
        stride: int,
        ops: tuple[str, ...],
        track_running_stats: bool,
        kept: bool = True,
    ) -> None:
        # the base's attributes, with placeholders; then the blocks in their place
        super().__init__(C_out, stride, (_PLACEHOLDER,) * len(ops))
        self.C_in, self.C_out = C_in, C_out
        self.op_names = ops
        self.ops = nn.ModuleList(
            nn.Identity()  # a placeholder keeps module indices equal to op indices
            if name == SKIP_OP or not kept
            else FBNetBlock(
                name, C_in, C_out, stride, False, track_running_stats=track_running_stats
            )
            for name in ops
        )
        self._runnable = [name != SKIP_OP and kept for name in ops]


class FBNetSupernet(Supernet):
    """The FBNet search network: stem, 22 mixed blocks, last conv, pooling, classifier.

    ``C``: the stem width at multiplier 1 (16; every width scales by ``C / 16``). ``depth``: the
    blocks kept per stage, 1..4 (4: the paper's 22 blocks; the config's ``space.layers`` counts
    the blocks kept, ``FBNetChain.depth_of``); a block beyond it has no candidate and only
    ``skip`` unmasked, so it passes its input on. The stem and stage strides are the space's
    (``fbnet``: ImageNet, ``fbnet_cifar``: 32x32)."""

    family = "fbnet"

    def __init__(
        self,
        *,
        space: Space | str = "fbnet",
        C: int = BASE_STEM,
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
        widths, shapes = block_shapes(chain, C)
        self.first_conv = ConvBNReLU(3, widths.stem, 3, chain.stem_stride)
        self.cells = nn.ModuleList(
            FBNetMixedOp(c_in, c_out, stride, e.ops, track_running_stats, kept)
            for e, (c_in, c_out, stride), kept in zip(chain.edges, shapes, self.kept)
        )
        self.shortcut = list(chain.skippable)
        self.last_conv = ConvBNReLU(widths.stages[-1], widths.head, 1)
        self.avg_pool = nn.AdaptiveAvgPool2d(1)
        # the discrete network's 1x1-conv classifier on the pooled map, as the Linear layer it
        # equals (the same parameters and initialisation), under the supernets' common name
        self.classifier = nn.Linear(widths.head, num_classes)
        self._init_masks()

    def _init_masks(self) -> None:
        """Every op, but ``skip`` on the blocks that change the shape; only ``skip`` on the
        blocks beyond the depth."""
        chain = chain_of(self.space)
        mask = torch.ones(chain.num_edges, chain.num_ops, dtype=torch.bool)
        for e in chain.edges:
            skip = e.ops.index(SKIP_OP)
            if not chain.skippable[e.index]:
                mask[e.index, skip] = False
            if not self.kept[e.index]:
                mask[e.index] = False
                mask[e.index, skip] = True
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
            if out is None:  # only `skip` is active: the block passes its input on
                assert skip is not None
                x = skip
            else:
                x = out if skip is None else out + skip
        return x

    def run_prefix(self, x: Tensor, weights: ArchWeights, stop: int) -> Tensor:
        return self._run_blocks(self.first_conv(x), weights, range(stop))

    def run_suffix(self, state: Tensor, weights: ArchWeights, start: int) -> Tensor:
        x = self._run_blocks(state, weights, range(start, len(self.cells)))
        logits: Tensor = self.classifier(self.avg_pool(self.last_conv(x)).flatten(1))
        return logits

    def features(self, x: Tensor, weights: ArchWeights) -> Tensor:
        x = self.run_prefix(x, weights, len(self.cells))
        out: Tensor = self.last_conv(x)
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
    has = "has FBNet's head (last 1x1 conv, pooling, classifier)"
    refuse_options(space.name, has, lastact=lastact, pool_bn=pool_bn)
    # ``stem`` (from the data's image size) is not read: the space fixes its layout;
    # ``layers``: the searchable blocks kept (22: all; 17, 12, 7 or 1..4: a depth per stage)
    net = FBNetSupernet(
        space=space,
        C=C,
        depth=chain_of(space).depth_of(layers),
        num_classes=num_classes,
        track_running_stats=track_running_stats,
    )
    net.check_partial_channels(partial_channels)
    return net


SUPERNETS[FBNetSupernet.family] = build
