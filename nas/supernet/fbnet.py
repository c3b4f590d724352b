"""The FBNet search network: the supernet of the spaces ``fbnet`` / ``fbnet_cifar``.

Second stage of the pipeline (``nas.supernet``), the FBNet family's own module there (the
family's other hooks are ``search_spaces.fbnet_family``'s). Wu et al., "FBNet: Hardware-Aware
Efficient ConvNet Design via Differentiable Neural Architecture Search", CVPR 2019, Section 3
(Table 1, eq. 5-6): the stem, then each of the 22 searchable blocks as one mixed block over its
candidates (the paper's stochastic super net: every candidate of a layer run and summed with
its mask weight), the last 1x1 conv, pooling and classifier, as the discrete network
(``search_spaces.fbnet``) builds them. The paper's search code was not released; this is the
ProxylessNAS supernet's search network (``nas.supernet.chain``, which both subclass) with
FBNet's blocks, stem and head.

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

from torch import Tensor, nn

from nas.supernet.chain import ChainMixedOp, ChainSupernet
from nas.supernet.network import SUPERNETS
from search_spaces.chain import ChainCell, Shape, Widths
from search_spaces.fbnet import ConvBNReLU, FBNetBlock, block_shapes
from search_spaces.fbnet_space import BASE_STEM, CELL_TYPE, SKIP_OP, FBNetChain


class FBNetMixedOp(ChainMixedOp):
    """A ``ChainMixedOp`` whose candidates are FBNet blocks (without shortcut) from ``C_in`` to
    ``C_out`` at ``stride``, and the never-run placeholder for ``skip``; full width only (no
    partial channels)."""

    skip_op = SKIP_OP

    def candidate(
        self, op: str, C_in: int, C_out: int, stride: int, track_running_stats: bool
    ) -> nn.Module:
        return FBNetBlock(op, C_in, C_out, stride, False, track_running_stats=track_running_stats)


class FBNetSupernet(ChainSupernet):
    """The FBNet search network: stem, 22 mixed blocks, last conv, pooling, classifier.

    ``C``: the stem width at multiplier 1 (16; every width scales by ``C / 16``). ``depth``: the
    blocks kept per stage, 1..4 (4: the paper's 22 blocks; the config's ``space.layers`` counts
    the blocks kept, ``FBNetChain.depth_of``); a block beyond it has no candidate and only
    ``skip`` unmasked, so it passes its input on. The stem and stage strides are the space's
    (``fbnet``: ImageNet, ``fbnet_cifar``: 32x32). The discrete network's 1x1-conv classifier
    on the pooled map is the Linear ``classifier`` it equals (the same parameters and
    initialisation)."""

    family = "fbnet"
    cell_type = CELL_TYPE
    mixed_op = FBNetMixedOp
    head_text = "has FBNet's head (last 1x1 conv, pooling, classifier)"
    default_space = "fbnet"
    default_C = BASE_STEM

    def block_shapes(self, chain: ChainCell, C: int) -> tuple[Widths, list[Shape]]:
        assert isinstance(chain, FBNetChain)
        return block_shapes(chain, C)

    def build_stem(self, chain: ChainCell, widths: Widths) -> None:
        self.first_conv = ConvBNReLU(3, widths.stem, 3, chain.stem_stride)

    def build_head(self, widths: Widths) -> None:
        self.last_conv = ConvBNReLU(widths.stages[-1], widths.head, 1)
        self.avg_pool = nn.AdaptiveAvgPool2d(1)

    def stem(self, x: Tensor) -> Tensor:
        out: Tensor = self.first_conv(x)
        return out

    def last(self, x: Tensor) -> Tensor:
        out: Tensor = self.last_conv(x)
        return out

    def pool(self, x: Tensor) -> Tensor:
        out: Tensor = self.avg_pool(x)
        return out


SUPERNETS[FBNetSupernet.family] = FBNetSupernet.build
