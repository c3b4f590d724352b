"""Supernets: every candidate operation on every edge, mixed by architecture weights.

Second stage of the pipeline (``nas.supernet``), built from a ``search_spaces.Space`` and
knowing nothing about search strategies: ``forward(x, weights)`` takes the mixing weights of
each cell type (``ArchWeights``: cell type -> ``weights_EO`` = [edges, ops]).

* ``DartsSupernet``: the search network of DARTS (Liu et al., ICLR 2019, ``model_search.py``):
  stem Conv3x3(3 -> 3C) + BN (``stem="imagenet"``: PC-DARTS / DrNAS's three stride-2 convs
  3 -> 3C/2 -> 3C -> 3C), ``layers`` cells with reductions at ``layers // 3`` and
  ``2 * layers // 3``, each cell's 4 nodes summing mixed ops over all earlier states, output =
  concat of the 4 nodes; BN without affine parameters throughout the cells, and a BN after each
  pool. At C=16, 8 layers, 10 classes: 1,930,618 parameters, as the reference. Two options give
  the layout of GDAS's DARTS-space search network (AutoDL ``search_model_gdas_nasnet.py``):
  ``lastact`` (BN + ReLU before the global pooling, its ``lastact``) and ``pool_bn=False`` (no
  BN after the pools, as its ``POOLING`` op); the defaults (``lastact=False``,
  ``pool_bn=True``) are DARTS's layout.
* ``NB201Supernet``: the NAS-Bench-201 search network (Dong & Yang, ICLR 2020): the
  ``TinyNetwork`` layout with searchable cells (BN without affine parameters that tracks
  running statistics, ``affine=False, track_running_stats=True`` as the search models of
  DARTS-PT and DrNAS, so eval mode normalises with them; no BN after pools) and ResNet-block
  reductions.

Edge normalisation (PC-DARTS, H2): ``edge_weights``, None unless a search component sets it,
returns a weight per edge and cell type each forward; an edge's whole output (bypassed partial
channels included) is scaled by it before its node sums.

Both also carry per-edge op masks (a buffer per cell type; masked ops never run) and partial
channels (``partial_channels`` = K, see ``mixed_op``), which DrNAS's progressive learning uses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from nas.supernet.mixed_op import MixedOp
from nas.supernet.widen import widen_mixed_op
from search_spaces.nb201 import ResNetBasicblock
from search_spaces.ops import FactorizedReduce, ReLUConvBN
from search_spaces.space import CellSpace, Space, get_space

ArchWeights = dict[str, Tensor]  # cell type -> weights_EO [num_edges, num_ops]


class Supernet(nn.Module):
    """Common interface: the space, op masks, partial channels and ``forward(x, weights)``."""

    space: Space
    # PC-DARTS's edge normalisation (nas.search.components.pc_darts): cell type -> [edges]
    edge_weights: Callable[[], dict[str, Tensor]] | None = None
    # Whether an unmasked op whose weight is exactly zero still runs (see ``active_ops``):
    # set by the components and strategies whose reference computes ``w * op(x)`` for every
    # op while their weights can be exactly zero (SDARTS's clip, SNAS's low temperatures);
    # strategies of one-hot samples keep it off (GDAS, ReinMax: their zeros are ops not drawn)
    zero_weight_ops_run: bool = False

    def current_edge_weights(self) -> dict[str, Tensor] | None:
        return None if self.edge_weights is None else self.edge_weights()

    def _init_masks(self) -> None:
        for cell_type, cell in self.space.cells.items():
            self.register_buffer(
                f"mask_{cell_type}", torch.ones(cell.num_edges, cell.num_ops, dtype=torch.bool)
            )

    def op_mask(self, cell_type: str) -> Tensor:
        """Bool [edges, ops]: which operations may run (False = pruned or projected away)."""
        mask: Tensor = getattr(self, f"mask_{cell_type}")
        return mask

    def set_op_mask(self, cell_type: str, mask_EO: Tensor) -> None:
        current = self.op_mask(cell_type)
        if mask_EO.shape != current.shape:
            raise ValueError(
                f"op mask for {cell_type!r} has shape {tuple(mask_EO.shape)}; "
                f"expected {tuple(current.shape)}"
            )
        current.copy_(mask_EO.to(torch.bool))

    def active_ops(self, weights: ArchWeights) -> dict[str, list[list[bool]]]:
        """Per cell type and edge, which ops run: unmasked and with a non-zero weight.

        ``zero_weight_ops_run``: every unmasked op runs, whatever its weight, as the
        references that compute ``sum_k w_k * op_k(x)`` (an op of weight 0 then takes part in
        autograd: its parameters get zero gradients, so weight decay and momentum still move
        them, its batch norm updates its running statistics, and its weight gets the gradient
        ``<dL/do, op_k(x)>``). In eval mode without autograd such an op changes nothing but
        the time (its output is multiplied by 0), so it is skipped there all the same. Off (the
        default): skipped, which is what hard one-hot weights need (GDAS, ReinMax, RS-WS run
        only the sampled op). Masked ops never run.

        One host transfer per cell type and forward (not one per op). Under ``compile_supernet``
        they are computed eagerly before the compiled forward and read from
        ``_preset_active`` here (Python constants to the compiled graph, no graph break)."""
        preset = self.__dict__.get("_preset_active")
        if preset is not None:
            return {cell_type: preset[cell_type] for cell_type in weights}
        every = self.zero_weight_ops_run and (self.training or torch.is_grad_enabled())
        out = {}
        for cell_type, w in weights.items():
            expected = self.op_mask(cell_type).shape
            if w.shape != expected:
                raise ValueError(
                    f"architecture weights for {cell_type!r} have shape {tuple(w.shape)}; "
                    f"expected {tuple(expected)}"
                )
            mask = self.op_mask(cell_type)
            out[cell_type] = (mask if every else (w.detach() != 0) & mask).tolist()
        return out

    def mixed_ops(self) -> list[MixedOp]:
        return [m for m in self.modules() if isinstance(m, MixedOp)]

    # ---- hard mixing weights (H1), begin
    def set_unselected_scalars(self, on: bool) -> None:
        """Whether, under one-hot mixing weights with a gradient, every edge adds its
        unselected ops' weights as scalar terms of value 0 (GDAS's NB201 forward; see
        ``MixedOp.add_unselected_scalars``). Off: only the selected op's term (the default,
        and GDAS's DARTS-space forward)."""
        for mixed in self.mixed_ops():
            mixed.unselected_scalars = bool(on)

    # ---- hard mixing weights, end

    @property
    def partial_channels(self) -> int:
        """K: each op sees 1/K of its edge's channels."""
        return self.mixed_ops()[0].k

    def check_partial_channels(self, k: int) -> None:
        """A one-line ValueError if some edge cannot run with partial-channel fraction 1/k."""
        for mixed in self.mixed_ops():
            if k < 1 or mixed.C % k:
                raise ValueError(
                    f"partial-channel K={k} does not divide the {mixed.C} channels of an edge; "
                    "choose C and K so that every cell's channel count is a multiple of K"
                )
            if mixed.stride == 2 and (mixed.C // k) % 2 and "skip_connect" in mixed.op_names:
                raise ValueError(
                    f"partial-channel K={k} leaves {mixed.C // k} channels on a reduction "
                    "edge, but skip_connect at stride 2 needs an even count"
                )

    def set_partial_channels(self, k: int, generator: torch.Generator) -> dict[nn.Parameter, Any]:
        """Widen every op to C/k channels (Net2Wider); returns each parameter's expander."""
        self.check_partial_channels(k)
        expanders: dict[nn.Parameter, Any] = {}
        for mixed in self.mixed_ops():
            expanders.update(widen_mixed_op(mixed, k, generator))
        return expanders

    def arch_shapes(self) -> dict[str, tuple[int, int]]:
        return {ct: (c.num_edges, c.num_ops) for ct, c in self.space.cells.items()}

    def forward(self, x: Tensor, weights: ArchWeights) -> Tensor:
        return self.run_suffix(
            self.run_prefix(x, weights, len(self.cells)), weights, len(self.cells)
        )

    # Prefix / suffix: DARTS-PT evaluates many weight variants that differ only in one cell
    # type; the cells before the first cell of that type compute the same thing for all.
    cells: nn.ModuleList

    def first_cell_of(self, cell_type: str) -> int:
        """Index of the first cell whose output depends on ``cell_type``'s weights."""
        raise NotImplementedError

    def run_prefix(self, x: Tensor, weights: ArchWeights, stop: int) -> Any:
        """The stem and cells ``0 .. stop-1``; returns the state entering cell ``stop``."""
        raise NotImplementedError

    def run_suffix(self, state: Any, weights: ArchWeights, start: int) -> Tensor:
        """Cells ``start ..`` and the classifier, from a state of ``run_prefix``."""
        raise NotImplementedError


class SharedReLU:
    """The ReLU of each state of one cell forward, taken on first use (``MixedOp``'s
    ``relu_x``): once per state instead of once per op that starts with one."""

    def __init__(self, states: list[Tensor]) -> None:
        self.states = states
        self.relued: dict[int, Tensor] = {}

    def of(self, op: nn.Module, src: int, active_O: list[bool]) -> Tensor | None:
        """``relu(states[src])`` if ``op`` runs an op that starts with a ReLU, else None."""
        if not (isinstance(op, MixedOp) and op.wants_relu(active_O)):
            return None
        r = self.relued.get(src)
        if r is None:
            r = self.relued[src] = torch.relu(self.states[src])
        return r


def _add_scaled(node: Tensor | None, out: Tensor | None, scale: Tensor) -> Tensor | None:
    """``node + scale * out`` (either may be None: nothing there yet / an edge with no op)."""
    if out is None:
        return node
    scaled = out * scale
    return scaled if node is None else node + scaled


class DartsSearchCell(nn.Module):
    """A supernet cell of a DARTS-style space (4 nodes, 14 mixed edges)."""

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
        w_E = weights_EO.unbind(0)
        for edges in self.edges_into:
            node: Tensor | None = None
            for e in edges:
                src, op = self.edge_src[e], self.ops[e]
                r = relu.of(op, src, active[e])
                if edge_weights_E is not None:  # PC-DARTS: the whole edge output scaled
                    out = op(states[src], w_E[e], active[e], None, r)
                    node = _add_scaled(node, out, edge_weights_E[e])
                    continue
                node = op(states[src], w_E[e], active[e], node, r)
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


class NB201SearchCell(nn.Module):
    """A searchable NAS-Bench-201 cell: node j sums the mixed ops of edges from all i < j."""

    def __init__(
        self, cell: CellSpace, C: int, partial_channels: int, track_running_stats: bool
    ) -> None:
        super().__init__()
        self.edges_into = [[e.index for e in cell.edges_into(n)] for n in cell.intermediate_nodes]
        self.edge_src = [e.src for e in cell.edges]
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
        w_E = weights_EO.unbind(0)
        for edges in self.edges_into:
            node: Tensor | None = None
            for e in edges:
                src, op = self.edge_src[e], self.ops[e]
                r = relu.of(op, src, active[e])
                if edge_weights_E is not None:  # PC-DARTS: the whole edge output scaled
                    out = op(nodes[src], w_E[e], active[e], None, r)
                    node = _add_scaled(node, out, edge_weights_E[e])
                    continue
                node = op(nodes[src], w_E[e], active[e], node, r)
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
    ) -> None:
        super().__init__()
        self.space = get_space(space) if isinstance(space, str) else space
        if self.space.family != self.family:
            raise ValueError(f"NB201Supernet needs the nb201 space, got {self.space.name!r}")
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

    def first_cell_of(self, cell_type: str) -> int:
        return 0

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


def _darts_supernet(
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


def _nb201_supernet(
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
    given = [k for k, v in (("lastact", lastact), ("pool_bn", pool_bn)) if v is not None]
    if given:
        raise ValueError(
            f"space.{given[0]} is an option of the DARTS-style supernet; the {space.name} "
            "supernet always has BN + ReLU before the pooling and no BN after pools: remove it"
        )
    return NB201Supernet(
        space=space,
        C=C,
        N=layers,
        num_classes=num_classes,
        partial_channels=partial_channels,
        track_running_stats=track_running_stats,
    )


# Space family -> its supernet (search_spaces.families holds the rest of a family's behaviour;
# the supernet is this stage's, so a new family adds its builder here; a layout option it does
# not have, given as anything but None, is refused in one line).
SUPERNETS: dict[str, Callable[..., Supernet]] = {
    "darts": _darts_supernet,
    "nb201": _nb201_supernet,
}


def build_supernet(
    space: str,
    *,
    C: int,
    layers: int,
    num_classes: int,
    partial_channels: int = 1,
    track_running_stats: bool = True,
    stem: str = "cifar",
    lastact: bool | None = None,
    pool_bn: bool | None = None,
) -> Supernet:
    """The supernet of ``space`` (``layers`` = cells for DARTS spaces, N for NB201;
    ``track_running_stats`` applies to the NB201 cells, whose reference BN tracks them).
    ``lastact`` / ``pool_bn`` (``space.lastact`` / ``space.pool_bn``): the DARTS-style
    supernet's BN + ReLU before the pooling and BN after pools; None = the family's layout."""
    s = get_space(space)
    return SUPERNETS[s.family](
        s,
        C=C,
        layers=layers,
        num_classes=num_classes,
        partial_channels=partial_channels,
        track_running_stats=track_running_stats,
        stem=stem,
        lastact=lastact,
        pool_bn=pool_bn,
    )
