"""The NAS-Bench-201 search network: the supernet of the space ``nb201``.

Second stage of the pipeline (``nas.supernet``), the NB201 family's own module there (the
family's other hooks are ``search_spaces.nb201_family``'s). Dong & Yang, ICLR 2020: the
``TinyNetwork`` layout with searchable cells (BN without affine parameters that tracks running
statistics, ``affine=False, track_running_stats=True`` as the search models of DARTS-PT and
DrNAS, so eval mode normalises with them; no BN after pools) and ResNet-block reductions.

Fused convolutions (``fuse``, ``nas.supernet.fused``): the ``nor_conv_3x3`` ops of all the edges
that read one state run as one convolution and one batch norm, and so do their ``nor_conv_1x1``
ops; the per-op modules keep their parameters, and the results are the same to float rounding.
Off by default: on the 2-core CPU of ``docs/performance.md`` it measured slower (the convolutions
take as long fused, and the edges then read channel slices); ``NB201Supernet(fuse=True)`` or
``supernet.fuse = True`` turns it on.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from nas.supernet.fused import FusedOutputs, FusingCell
from nas.supernet.mixed_op import MixedOp
from nas.supernet.network import (
    SUPERNETS,
    ArchWeights,
    SharedPools,
    SharedReLU,
    Supernet,
    add_scaled,
    refuse_options,
)
from search_spaces.nb201 import ResNetBasicblock
from search_spaces.space import CellSpace, Space


class NB201SearchCell(FusingCell):
    """A searchable NAS-Bench-201 cell: node j sums the mixed ops of edges from all i < j.

    ``fuse``: the ReLU-conv-BN ops that run on the edges leaving one state are computed
    together, one convolution per kernel size (``nas.supernet.fused``), when the state is
    first read."""

    def __init__(
        self, cell: CellSpace, C: int, partial_channels: int, track_running_stats: bool
    ) -> None:
        super().__init__()
        self.edges_into = [[e.index for e in cell.edges_into(n)] for n in cell.intermediate_nodes]
        self.edge_src = [e.src for e in cell.edges]
        self.edges_from = {
            n: [e.index for e in cell.edges if e.src == n] for n in {e.src for e in cell.edges}
        }
        self.ops = nn.ModuleList(
            MixedOp(
                C,
                1,
                e.ops,
                partial_channels=partial_channels,
                bn_after_pool=False,
                track_running_stats=track_running_stats,
            )
            for e in cell.edges
        )

    def forward(
        self,
        x: Tensor,
        weights_EO: Tensor,
        active: list[list[bool]],
        edge_weights_E: Tensor | None = None,
    ) -> Tensor:
        nodes = [x]
        relu = SharedReLU(nodes)
        pools = SharedPools(nodes)
        w_E = weights_EO.unbind(0)
        fused: FusedOutputs = {}
        fused_states: set[int] = set()
        for edges in self.edges_into:
            node: Tensor | None = None
            for e in edges:
                src, op = self.edge_src[e], self.ops[e]
                if self.fuse and src not in fused_states:  # the state's first reader
                    fused_states.add(src)
                    fused.update(self.fused_from(src, relu.of, active))
                r = relu.of(op, src, active[e])
                given = fused.pop(e, None)
                if edge_weights_E is not None:  # PC-DARTS: the whole edge output scaled
                    out = op(nodes[src], w_E[e], active[e], None, r, given, pools.of(src))
                    node = add_scaled(node, out, edge_weights_E[e])
                    continue
                node = op(nodes[src], w_E[e], active[e], node, r, given, pools.of(src))
            nodes.append(torch.zeros_like(x) if node is None else node)
        return nodes[-1]


class NB201Supernet(Supernet):
    """The NAS-Bench-201 search network: C, 2C, 4C stages of N searchable cells."""

    family = "nb201"

    def __init__(
        self,
        *,
        space: Space | str = "nb201",
        C: int = 16,
        N: int = 5,
        num_classes: int = 10,
        partial_channels: int = 1,
        track_running_stats: bool = True,
        fuse: bool = False,
    ) -> None:
        super().__init__()
        self.space = self.own_space(space)
        if C < 1 or N < 1 or num_classes < 1:
            raise ValueError(f"C, N and num_classes must be positive, got {C}, {N}, {num_classes}")
        self.C, self.N, self.num_classes = C, N, num_classes
        self.stem = nn.Sequential(nn.Conv2d(3, C, 3, padding=1, bias=False), nn.BatchNorm2d(C))
        channels = [C] * N + [2 * C] + [2 * C] * N + [4 * C] + [4 * C] * N
        reductions = [False] * N + [True] + [False] * N + [True] + [False] * N
        self.cells = nn.ModuleList()
        C_prev = C
        cell_space = self.space.cells["cell"]
        for C_curr, reduction in zip(channels, reductions):
            if reduction:
                self.cells.append(ResNetBasicblock(C_prev, C_curr, 2, True))
            else:
                self.cells.append(
                    NB201SearchCell(cell_space, C_curr, partial_channels, track_running_stats)
                )
            C_prev = C_curr
        self.lastact = nn.Sequential(nn.BatchNorm2d(C_prev), nn.ReLU(inplace=True))
        self.global_pooling = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(C_prev, num_classes)
        self._init_masks()
        self.fuse = fuse

    def first_cell_of(self, cell_type: str) -> int:
        return 0

    @property
    def cell_types(self) -> list[str | None]:
        """The space's one cell type for the searchable cells; None for the residual blocks."""
        (cell_type,) = self.space.cell_types
        return [cell_type if isinstance(c, NB201SearchCell) else None for c in self.cells]

    def _run_cells(self, feature: Tensor, weights: ArchWeights, cells: range) -> Tensor:
        if not len(cells):
            return feature
        active = self.active_ops(weights)["cell"]
        w = weights["cell"]
        edge_w = self.current_edge_weights()
        ew = None if edge_w is None else edge_w["cell"]
        for i in cells:
            cell = self.cells[i]
            if isinstance(cell, NB201SearchCell):
                feature = cell(feature, w, active, ew)
            else:
                feature = cell(feature)
        return feature

    def run_prefix(self, x: Tensor, weights: ArchWeights, stop: int) -> Tensor:
        return self._run_cells(self.stem(x), weights, range(stop))

    def run_suffix(self, state: Tensor, weights: ArchWeights, start: int) -> Tensor:
        feature = self._run_cells(state, weights, range(start, len(self.cells)))
        return self.classifier(self.global_pooling(self.lastact(feature)).flatten(1))

    def features(self, x: Tensor, weights: ArchWeights) -> Tensor:
        return self.lastact(self._run_cells(self.stem(x), weights, range(len(self.cells))))


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
    has = "always has BN + ReLU before the pooling and no BN after pools"
    refuse_options(space.name, has, lastact=lastact, pool_bn=pool_bn)
    return NB201Supernet(
        space=space,
        C=C,
        N=layers,
        num_classes=num_classes,
        partial_channels=partial_channels,
        track_running_stats=track_running_stats,
    )


SUPERNETS[NB201Supernet.family] = build
