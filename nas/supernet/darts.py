"""The DARTS search network: the supernet of the DARTS-style spaces (``darts``, ``s1``..``s5``).

Second stage of the pipeline (``nas.supernet``), the DARTS family's own module there (the
family's other hooks are ``search_spaces.darts_family``'s). Liu et al., ICLR 2019,
``model_search.py``: stem Conv3x3(3 -> 3C) + BN (``stem="imagenet"``: PC-DARTS / DrNAS's three
stride-2 convs 3 -> 3C/2 -> 3C -> 3C), ``layers`` cells with reductions at ``layers // 3`` and
``2 * layers // 3``, each cell's 4 nodes summing mixed ops over all earlier states, output =
concat of the 4 nodes; BN without affine parameters throughout the cells, and a BN after each
pool. At C=16, 8 layers, 10 classes: 1,930,618 parameters, as the reference. Two options give
the layout of GDAS's DARTS-space search network (AutoDL ``search_model_gdas_nasnet.py``):
``lastact`` (BN + ReLU before the global pooling, its ``lastact``) and ``pool_bn=False`` (no
BN after the pools, as its ``POOLING`` op); the defaults (``lastact=False``, ``pool_bn=True``)
are DARTS's layout.

Fused ops (``fuse``, ``nas.supernet.fused``): the ``sep_conv_kxk`` ops of all the edges that read
one state run as one chain (a depthwise conv with every op's filters per channel, a pointwise
conv with one group per op, a BN over their channels, then the second stage on the
concatenation), and so do the ``dil_conv_kxk`` ops of each kernel size (stride-2 edges from the
inputs of a reduction cell form kinds of their own); pools, ``skip_connect`` (its
``FactorizedReduce`` at stride 2) and the cells' preprocessing run as before. The per-op modules
keep their parameters, and the results are the same to float rounding (not bit for bit in
float32). Off by default: on the 2-core CPU of ``docs/performance.md`` it measured no clear gain,
and it would change fixed-seed results; ``DartsSupernet(fuse=True)`` or ``supernet.fuse = True``
turns it on.
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
)
from search_spaces.ops import FactorizedReduce, ReLUConvBN
from search_spaces.space import CellSpace, Space, get_space


class DartsSearchCell(FusingCell):
    """A supernet cell of a DARTS-style space (4 nodes, 14 mixed edges).

    ``fuse``: the ``sep_conv`` and ``dil_conv`` ops that run on the edges leaving one state are
    computed together, one chain per kind (``nas.supernet.fused``), when the state is first
    read."""

    def __init__(
        self,
        cell: CellSpace,
        C_prev_prev: int,
        C_prev: int,
        C: int,
        reduction: bool,
        reduction_prev: bool,
        partial_channels: int,
        bn_after_pool: bool = True,
    ) -> None:
        super().__init__()
        self.reduction = reduction
        self.cell_type = "reduce" if reduction else "normal"
        if reduction_prev:
            self.preprocess0: nn.Module = FactorizedReduce(C_prev_prev, C, affine=False)
        else:
            self.preprocess0 = ReLUConvBN(C_prev_prev, C, 1, 1, 0, affine=False)
        self.preprocess1 = ReLUConvBN(C_prev, C, 1, 1, 0, affine=False)
        self.num_input_nodes = cell.num_input_nodes
        self.edges_into = [[e.index for e in cell.edges_into(n)] for n in cell.intermediate_nodes]
        self.edge_src = [e.src for e in cell.edges]
        self.edges_from = {
            n: [e.index for e in cell.edges if e.src == n] for n in {e.src for e in cell.edges}
        }
        self.ops = nn.ModuleList(
            MixedOp(
                C,
                2 if reduction and e.src < cell.num_input_nodes else 1,
                e.ops,
                partial_channels=partial_channels,
                bn_after_pool=bn_after_pool,
            )
            for e in cell.edges
        )
        self.multiplier = len(self.edges_into)

    def forward(
        self,
        s0: Tensor,
        s1: Tensor,
        weights_EO: Tensor,
        active: list[list[bool]],
        edge_weights_E: Tensor | None = None,
    ) -> Tensor:
        states = [self.preprocess0(s0), self.preprocess1(s1)]
        relu = SharedReLU(states)
        pools = SharedPools(states)
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
                    out = op(states[src], w_E[e], active[e], None, r, given, pools.of(src))
                    node = add_scaled(node, out, edge_weights_E[e])
                    continue
                node = op(states[src], w_E[e], active[e], node, r, given, pools.of(src))
            if node is None:  # every op into this node is off: the node is zero
                ref = states[1] if not self.reduction else states[1][:, :, ::2, ::2]
                node = torch.zeros_like(ref)
            states.append(node)
        return torch.cat(states[self.num_input_nodes :], dim=1)


class DartsSupernet(Supernet):
    """The DARTS search network for a DARTS-style space (darts, s1..s5)."""

    family = "darts"

    def __init__(
        self,
        *,
        space: Space | str = "darts",
        C: int = 16,
        layers: int = 8,
        num_classes: int = 10,
        partial_channels: int = 1,
        stem_multiplier: int = 3,
        stem: str = "cifar",
        lastact: bool = False,
        pool_bn: bool = True,
        fuse: bool = False,
    ) -> None:
        super().__init__()
        self.space = get_space(space) if isinstance(space, str) else space
        if stem not in ("cifar", "imagenet"):
            raise ValueError(f"stem must be 'cifar' or 'imagenet', got {stem!r}")
        for key, value in (("lastact", lastact), ("pool_bn", pool_bn)):
            if not isinstance(value, bool):
                raise ValueError(f"space.{key} must be true or false, got {value!r}")
        if self.space.family != self.family:
            raise ValueError(f"DartsSupernet needs a DARTS-style space, got {self.space.name!r}")
        if layers < 3:
            raise ValueError(f"layers must be at least 3 (two reduction cells), got {layers}")
        if C < 1 or num_classes < 1:
            raise ValueError(f"C and num_classes must be positive, got C={C}, {num_classes}")
        self.C, self.layers, self.num_classes = C, layers, num_classes
        self.stem_kind = stem
        if stem == "cifar":
            C_curr = stem_multiplier * C
            self.stem = nn.Sequential(
                nn.Conv2d(3, C_curr, 3, padding=1, bias=False), nn.BatchNorm2d(C_curr)
            )
            C_prev_prev, C_prev, C_curr = C_curr, C_curr, C
            reduction_prev = False
        else:  # PC-DARTS / DrNAS ImageNet search: three stride-2 convs take 224 to 28, at
            # stem_multiplier x C channels (DrNAS model_search_imagenet.py: C_curr = 3C, so
            # 3 -> 72 -> 144 -> 144 at C=48)
            C_stem = stem_multiplier * C
            self.stem0 = nn.Sequential(
                nn.Conv2d(3, C_stem // 2, 3, stride=2, padding=1, bias=False),
                nn.BatchNorm2d(C_stem // 2),
                nn.ReLU(inplace=True),
                nn.Conv2d(C_stem // 2, C_stem, 3, stride=2, padding=1, bias=False),
                nn.BatchNorm2d(C_stem),
            )
            self.stem1 = nn.Sequential(
                nn.ReLU(inplace=True),
                nn.Conv2d(C_stem, C_stem, 3, stride=2, padding=1, bias=False),
                nn.BatchNorm2d(C_stem),
            )
            C_prev_prev, C_prev, C_curr = C_stem, C_stem, C
            reduction_prev = True
        self.cells = nn.ModuleList()
        for i in range(layers):
            reduction = i in (layers // 3, 2 * layers // 3)
            if reduction:
                C_curr *= 2
            cell = DartsSearchCell(
                self.space.cells["reduce" if reduction else "normal"],
                C_prev_prev,
                C_prev,
                C_curr,
                reduction,
                reduction_prev,
                partial_channels,
                bn_after_pool=pool_bn,
            )
            reduction_prev = reduction
            self.cells.append(cell)
            C_prev_prev, C_prev = C_prev, cell.multiplier * C_curr
        # GDAS's search network: BN + ReLU on the last cell's output before the pooling (AutoDL
        # search_model_gdas_nasnet.py:77,192); DARTS pools the last cell directly (None)
        self.lastact: nn.Module | None = None
        if lastact:
            self.lastact = nn.Sequential(nn.BatchNorm2d(C_prev), nn.ReLU(inplace=True))
        self.global_pooling = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(C_prev, num_classes)
        self._init_masks()
        self.fuse = fuse

    @property
    def cell_types(self) -> list[str]:
        """The cell type of every cell, in order."""
        return ["reduce" if c.reduction else "normal" for c in self.cells]

    def first_cell_of(self, cell_type: str) -> int:
        return self.cell_types.index(cell_type)

    def _run_cells(
        self, s0: Tensor, s1: Tensor, weights: ArchWeights, cells: range
    ) -> tuple[Tensor, Tensor]:
        types = {self.cell_types[i] for i in cells}
        active = self.active_ops({ct: weights[ct] for ct in types})
        edge_w = self.current_edge_weights() if len(cells) else None
        for i in cells:
            ct = self.cell_types[i]
            ew = None if edge_w is None else edge_w[ct]
            s0, s1 = s1, self.cells[i](s0, s1, weights[ct], active[ct], ew)
        return s0, s1

    def run_prefix(self, x: Tensor, weights: ArchWeights, stop: int) -> tuple[Tensor, Tensor]:
        if self.stem_kind == "cifar":
            s0 = s1 = self.stem(x)
        else:
            s0 = self.stem0(x)
            s1 = self.stem1(s0)
        return self._run_cells(s0, s1, weights, range(stop))

    def run_suffix(self, state: tuple[Tensor, Tensor], weights: ArchWeights, start: int) -> Tensor:
        s0, s1 = self._run_cells(state[0], state[1], weights, range(start, len(self.cells)))
        return self.classifier(self.global_pooling(self.head_input(s1)).flatten(1))

    def head_input(self, last: Tensor) -> Tensor:
        """The map the global pooling reads: the last cell's output, through ``lastact`` if
        the supernet has one."""
        return last if self.lastact is None else self.lastact(last)

    def features(self, x: Tensor, weights: ArchWeights) -> Tensor:
        return self.head_input(self.run_prefix(x, weights, len(self.cells))[1])


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
    return DartsSupernet(
        space=space,
        C=C,
        layers=layers,
        num_classes=num_classes,
        partial_channels=partial_channels,
        stem=stem,
        lastact=False if lastact is None else lastact,
        pool_bn=True if pool_bn is None else pool_bn,
    )


SUPERNETS[DartsSupernet.family] = build
