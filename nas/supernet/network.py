"""Supernets: every candidate operation on every edge, mixed by architecture weights.

Second stage of the pipeline (``nas.supernet``), built from a ``search_spaces.Space`` and
knowing nothing about search strategies: ``forward(x, weights)`` takes the mixing weights of
each cell type (``ArchWeights``: cell type -> ``weights_EO`` = [edges, ops]).

This module is what every supernet shares: the ``Supernet`` interface (op masks, partial
channels, the prefix / suffix forwards DARTS-PT needs, ``cell_types`` and ``features``), the
ReLU a cell computes once per state, and the registry of each space family's supernet
(``SUPERNETS``, which ``build_supernet`` reads). A family's supernet is a module of its own
that registers itself (``nas.supernet.darts``: DARTS's search network for the DARTS-style
spaces; ``nas.supernet.nb201``: NAS-Bench-201's); ``nas.supernet`` imports them all.

Edge normalisation (PC-DARTS, H2): ``edge_weights``, None unless a search component sets it,
returns a weight per edge and cell type each forward; an edge's whole output (bypassed partial
channels included) is scaled by it before its node sums.

Every supernet also carries per-edge op masks (a buffer per cell type; masked ops never run)
and partial channels (``partial_channels`` = K, see ``mixed_op``), which DrNAS's progressive
learning uses.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from nas.supernet.fused import FusingCell
from nas.supernet.mixed_op import MixedOp, pool_key
from nas.supernet.widen import widen_mixed_op
from search_spaces.space import Space, get_space

ArchWeights = dict[str, Tensor]  # cell type -> weights_EO [num_edges, num_ops]


class Supernet(nn.Module):
    """Common interface: the space, op masks, partial channels and ``forward(x, weights)``."""

    space: Space
    family: str  # the space family a subclass searches (``Space.family``)
    # PC-DARTS's edge normalisation (nas.strategies.components.pc_darts): cell type -> [edges]
    edge_weights: Callable[[], dict[str, Tensor]] | None = None
    # Whether an unmasked op whose weight is exactly zero still runs (see ``active_ops``):
    # set by the components and strategies whose reference computes ``w * op(x)`` for every
    # op while their weights can be exactly zero (SDARTS's clip, SNAS's low temperatures);
    # strategies of one-hot samples keep it off (GDAS, ReinMax: their zeros are ops not drawn)
    zero_weight_ops_run: bool = False

    def own_space(self, space: Space | str) -> Space:
        """``space`` (a name or a ``Space``), refused in one line unless of ``self.family``."""
        resolved = get_space(space) if isinstance(space, str) else space
        if resolved.family != self.family:
            raise ValueError(
                f"{type(self).__name__} needs a space of the {self.family} family, got "
                f"{resolved.name!r} (of the {resolved.family} family)"
            )
        return resolved

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

    @property
    def fuse(self) -> bool:
        """Whether the cells fuse the ops of the edges that read one state
        (``nas.supernet.fused``); False for a supernet without such cells."""
        cells = [c for c in self.modules() if isinstance(c, FusingCell)]
        return bool(cells) and all(c.fuse for c in cells)

    @fuse.setter
    def fuse(self, on: bool) -> None:
        if not isinstance(on, bool):
            raise ValueError(f"fuse must be true or false, got {on!r}")
        cells = [c for c in self.modules() if isinstance(c, FusingCell)]
        if on and not cells:
            raise ValueError(f"{type(self).__name__} has no cells that fuse the ops of a state")
        for c in cells:
            c.fuse = on

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

    @property
    def cell_types(self) -> Sequence[str | None]:
        """The cell type of every module of ``cells``, in order (None: a fixed block with no
        candidates, e.g. NB201's residual reductions)."""
        raise NotImplementedError

    def features(self, x: Tensor, weights: ArchWeights) -> Tensor:
        """The map the global pooling reads (Zen-NAS's ``forward_pre_GAP``; the zero-cost
        proxies), at architecture weights ``weights``."""
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


class SharedPools:
    """The pools of each state of one cell forward, run on first use (``MixedOp``'s
    ``pooled``): once per state and pool setting (``mixed_op.pool_key``) instead of once per
    edge that pools the state."""

    def __init__(self, states: list[Tensor]) -> None:
        self.states = states
        self.pooled: dict[tuple[object, ...], Tensor] = {}

    def of(self, src: int) -> Callable[[nn.Module], Tensor]:
        """``pool -> pool(states[src])``, computed the first time a pool of its setting asks."""

        def run(pool: nn.Module) -> Tensor:
            key = (src, *pool_key(pool))
            y = self.pooled.get(key)
            if y is None:
                y = self.pooled[key] = pool(self.states[src])
            return y

        return run


def add_scaled(node: Tensor | None, out: Tensor | None, scale: Tensor) -> Tensor | None:
    """``node + scale * out`` (either may be None: nothing there yet / an edge with no op)."""
    if out is None:
        return node
    scaled = out * scale
    return scaled if node is None else node + scaled


# Space family -> its supernet's builder (search_spaces.families holds the rest of a family's
# behaviour; the supernet is this stage's). Each family's supernet module registers its own
# (nas.supernet imports them all); a builder takes build_supernet's arguments, and refuses in one
# line a layout option its supernet does not have, given as anything but None.
SUPERNETS: dict[str, Callable[..., Supernet]] = {}


def refuse_options(space_name: str, has: str, **options: object) -> None:
    """A builder's one-line refusal of the layout options (``space.<key>``, not None) that
    its supernet does not have; ``has`` says what it has instead."""
    given = [k for k, v in options.items() if v is not None]
    if given:
        raise ValueError(
            f"space.{given[0]} is not an option of the {space_name} supernet, which {has}: "
            "remove it"
        )


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
    """The supernet of ``space``, by its family (``SUPERNETS``): ``layers`` = cells for DARTS
    spaces, N for NB201; ``track_running_stats`` applies to the NB201 cells, whose reference BN
    tracks them. ``lastact`` / ``pool_bn`` (``space.lastact`` / ``space.pool_bn``): the
    DARTS-style supernet's BN + ReLU before the pooling and BN after pools; None = the family's
    layout."""
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
