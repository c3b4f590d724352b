"""The supernet of a chain space: a stem, one mixed block per searchable block, a head.

Second stage of the pipeline (``nas.supernet``), shared by the families whose space is a chain
of blocks (``search_spaces.chain``): the layout of the search network of Cai, Zhu & Han (ICLR
2019), the pattern Wu et al. (CVPR 2019) describe as their stochastic super net. The stem (and
any fixed block after it), then each searchable block as one mixed edge over its candidates
(every candidate of a block run and summed with its mixing weight), plus the block's identity
shortcut where it has one (stride 1, equal widths), then the last 1x1 conv, pooling and the
classifier.

The blocks form one cell type whose edge ``i`` is block ``i``; each mixed edge is a
``ChainMixedOp`` whose candidates go from ``C_in`` to ``C_out`` channels. The skip op is listed
on every edge (architecture tensors are rectangular), a never-run placeholder of the mixed op:
where it alone is active the block passes its input on. It is masked from the start where the
block cannot be skipped, so it never takes a share of the mixing weights there
(``SearchStrategy.apply_mask``) and is never derived there. A family's supernet subclasses
``ChainMixedOp`` (its candidates) and ``ChainSupernet`` (its stem and head) and registers
``ChainSupernet.build`` in ``SUPERNETS``.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from nas.supernet.mixed_op import MixedOp
from nas.supernet.network import ArchWeights, Supernet, refuse_options
from search_spaces.chain import ChainCell, Shape, Widths, chain_cell_of
from search_spaces.space import Space

# the base MixedOp's own name for a candidate it never runs (a placeholder module)
_PLACEHOLDER = "none"


class ChainMixedOp(MixedOp):
    """A ``MixedOp`` whose candidates (``candidate``) go from ``C_in`` to ``C_out`` channels at
    ``stride``, and the never-run placeholder for the skip op; full width only (no partial
    channels). ``kept`` False: a block beyond the supernet's depth, which only ever passes its
    input on (no candidate is built)."""

    skip_op: str  # the chain's skip op
    takes_aux = False  # a block changes width and has its own skip: no DARTS- auxiliary term

    def __init__(
        self,
        C_in: int,
        C_out: int,
        stride: int,
        ops: tuple[str, ...],
        track_running_stats: bool,
        kept: bool = True,
    ) -> None:
        # the base's attributes, with placeholders; then the candidates in their place
        super().__init__(C_out, stride, (_PLACEHOLDER,) * len(ops))
        self.C_in, self.C_out = C_in, C_out
        self.op_names = ops
        self.ops = nn.ModuleList(
            nn.Identity()  # a placeholder keeps module indices equal to op indices
            if name == self.skip_op or not kept
            else self.candidate(name, C_in, C_out, stride, track_running_stats)
            for name in ops
        )
        self._runnable = [name != self.skip_op and kept for name in ops]

    def candidate(
        self, op: str, C_in: int, C_out: int, stride: int, track_running_stats: bool
    ) -> nn.Module:
        """The candidate ``op`` of the block, without its shortcut."""
        raise NotImplementedError


class ChainSupernet(Supernet):
    """The search network of a chain space: stem, one mixed block per searchable block, head.

    ``C``: the stem width at multiplier 1. ``depth``: the blocks kept per stage, 1..4 (the
    config's ``space.layers`` counts the blocks kept, ``ChainCell.depth_of``); a block beyond
    it has no candidate and only the skip op unmasked, so it passes its input on. The stem and
    stage strides are the space's. A subclass sets ``family``, ``cell_type``, ``mixed_op``,
    ``head_text`` (what ``build`` refuses a layout option with) and the defaults of ``space``
    and ``C``, and builds and runs its stem and head: ``block_shapes``, ``build_stem``,
    ``build_head``, ``stem``, ``last``, ``pool`` (and ``init_weights``)."""

    cell_type: str  # the chain's cell type
    mixed_op: type[ChainMixedOp]
    head_text: str
    default_space: str  # ``space`` when None: the family's ImageNet space
    default_C: int  # ``C`` when None: the stem width at multiplier 1

    def __init__(
        self,
        *,
        space: Space | str | None = None,
        C: int | None = None,
        depth: int = 4,
        num_classes: int = 1000,
        track_running_stats: bool = True,
    ) -> None:
        super().__init__()
        self.space = self.own_space(self.default_space if space is None else space)
        C = self.default_C if C is None else C
        if C < 1 or num_classes < 1:
            raise ValueError(f"C and num_classes must be positive, got {C}, {num_classes}")
        chain = self.chain
        self.kept = chain.kept(depth)
        self.C, self.depth, self.num_classes = C, depth, num_classes
        widths, shapes = self.block_shapes(chain, C)
        self.build_stem(chain, widths)
        self.cells = nn.ModuleList(
            self.mixed_op(c_in, c_out, stride, e.ops, track_running_stats, kept)
            for e, (c_in, c_out, stride), kept in zip(chain.edges, shapes, self.kept)
        )
        self.shortcut = list(chain.skippable)
        self.build_head(widths)
        self.classifier = nn.Linear(widths.head, num_classes)
        self.init_weights()
        self._init_masks()

    @property
    def chain(self) -> ChainCell:
        return chain_cell_of(self.space, self.cell_type, ChainCell)

    # ---- what a subclass builds and runs

    def block_shapes(self, chain: ChainCell, C: int) -> tuple[Widths, list[Shape]]:
        """The widths at ``C`` and the searchable blocks' ``(C_in, C_out, stride)``."""
        raise NotImplementedError

    def build_stem(self, chain: ChainCell, widths: Widths) -> None:
        """Add the modules before the searchable blocks."""
        raise NotImplementedError

    def build_head(self, widths: Widths) -> None:
        """Add the last 1x1 conv and the pooling (the classifier follows them)."""
        raise NotImplementedError

    def init_weights(self) -> None:
        """Initialise the modules (after they are all built); by default as built."""

    def stem(self, x: Tensor) -> Tensor:
        """The input of the first searchable block."""
        raise NotImplementedError

    def last(self, x: Tensor) -> Tensor:
        """The last 1x1 conv: the feature map before the pooling."""
        raise NotImplementedError

    def pool(self, x: Tensor) -> Tensor:
        """The global pooling."""
        raise NotImplementedError

    # ---- the shared search network

    def _init_masks(self) -> None:
        """Every op, but the skip op on the blocks that cannot be skipped; only the skip op on
        the blocks beyond the depth."""
        chain = self.chain
        mask = torch.ones(chain.num_edges, chain.num_ops, dtype=torch.bool)
        for e in chain.edges:
            skip = e.ops.index(chain.skip_op)
            if not chain.skippable[e.index]:
                mask[e.index, skip] = False
            if not self.kept[e.index]:
                mask[e.index] = False
                mask[e.index, skip] = True
        self.register_buffer(f"mask_{self.cell_type}", mask)

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
        return [self.cell_type] * len(self.cells)

    def _run_blocks(self, x: Tensor, weights: ArchWeights, blocks: range) -> Tensor:
        if not len(blocks):
            return x
        active = self.active_ops(weights)[self.cell_type]
        w_E = weights[self.cell_type].unbind(0)
        edge_w = self.current_edge_weights()
        for i in blocks:
            op = self.cells[i]
            skip = x if self.shortcut[i] else None
            active_i = active[i]
            if skip is None and not any(active_i):
                # every weight of a block that changes the shape is 0 (architecture dropout
                # dropped a one-hot sample): its output is 0 * op(x), of the block's shape, so
                # the first allowed op runs at weight 0
                allowed = self.op_mask(self.cell_type)[i].tolist()
                first = allowed.index(True)
                active_i = [k == first for k in range(len(active_i))]
            out = op(x, w_E[i], active_i, None)
            if edge_w is not None and out is not None:  # PC-DARTS's edge normalisation
                out = out * edge_w[self.cell_type][i]
            if out is None:  # only the skip op is active: the block passes its input on
                assert skip is not None
                x = skip
            else:
                x = out if skip is None else out + skip
        return x

    def run_prefix(self, x: Tensor, weights: ArchWeights, stop: int) -> Tensor:
        return self._run_blocks(self.stem(x), weights, range(stop))

    def run_suffix(self, state: Tensor, weights: ArchWeights, start: int) -> Tensor:
        x = self._run_blocks(state, weights, range(start, len(self.cells)))
        logits: Tensor = self.classifier(self.pool(self.last(x)).flatten(1))
        return logits

    def features(self, x: Tensor, weights: ArchWeights) -> Tensor:
        return self.last(self.run_prefix(x, weights, len(self.cells)))

    @classmethod
    def build(
        cls,
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
        """The builder ``SUPERNETS`` holds: ``stem`` (from the data's image size) is not read
        (the space fixes its layout); ``layers``: the searchable blocks kept (all of them; or,
        per stage, 3, 2, 1 or a depth 1..4)."""
        refuse_options(space.name, cls.head_text, lastact=lastact, pool_bn=pool_bn)
        net = cls(
            space=space,
            C=C,
            depth=chain_cell_of(space, cls.cell_type, ChainCell).depth_of(layers),
            num_classes=num_classes,
            track_running_stats=track_running_stats,
        )
        net.check_partial_channels(partial_channels)
        return net
