"""Shared look of the analysis figures: one colour per operation, node names, the backend.

Analysis layer (after the pipeline). Every figure colours an operation the same way, so a
reader learns it once: ``skip_connect`` is red everywhere (a collapse to it shows as red),
parameter-free pools are blues, convolutions greens / oranges / purples, ``none`` grey.
Node names follow the DARTS paper's figures: ``c_{k-2}``, ``c_{k-1}``, intermediate nodes
``0..3``, output ``c_{k}``; NB201 nodes are ``0`` (input) .. ``3`` (output).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Literal

from search_spaces.genotype import family_of_cell_types, genotype_type

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from search_spaces.space import Space

OP_COLORS: dict[str, str] = {
    "none": "#9e9e9e",
    "skip_connect": "#d62728",
    "max_pool_3x3": "#1f77b4",
    "avg_pool_3x3": "#17becf",
    "sep_conv_3x3": "#2ca02c",
    "sep_conv_5x5": "#0b5d1e",
    "dil_conv_3x3": "#ff7f0e",
    "dil_conv_5x5": "#8c564b",
    "nor_conv_1x1": "#9467bd",
    "nor_conv_3x3": "#2ca02c",
    "noise": "#e377c2",
}
OP_SHORT: dict[str, str] = {
    "none": "none",
    "skip_connect": "skip",
    "max_pool_3x3": "max3",
    "avg_pool_3x3": "avg3",
    "sep_conv_3x3": "sep3",
    "sep_conv_5x5": "sep5",
    "dil_conv_3x3": "dil3",
    "dil_conv_5x5": "dil5",
    "nor_conv_1x1": "conv1",
    "nor_conv_3x3": "conv3",
    "noise": "noise",
}
_EXTRA = ("#bcbd22", "#7f7f7f", "#aec7e8", "#ffbb78", "#c5b0d5")

DPI = 110


def op_color(op: str) -> str:
    """The colour of an operation (a stable fallback for ops not listed)."""
    if op in OP_COLORS:
        return OP_COLORS[op]
    return _EXTRA[sum(map(ord, op)) % len(_EXTRA)]


def op_short(op: str) -> str:
    """A short name for crowded axes (``sep_conv_3x3`` -> ``sep3``)."""
    return OP_SHORT.get(op, op)


def node_name(space_family: str, node: int) -> str:
    """The display name of a node index of a cell (indices as in ``Edge.src`` / ``Edge.dst``),
    with matplotlib mathtext for ``$c_{k-2}$`` / ``$c_{k-1}$``."""
    return genotype_type(space_family).node_label(node)


def edge_name(space_family: str, src: int, dst: int) -> str:
    return f"{node_name(space_family, src)}→{node_name(space_family, dst)}"


def space_family(space: Space | None, cell_types: Iterable[str] = ()) -> str:
    """The space's family; without a space, the family whose cells these are (e.g. the keys of
    logged weights: ``family_of_cell_types``)."""
    return space.family if space is not None else family_of_cell_types(cell_types)


def cell_title(space_family: str, cell_type: str) -> str:
    """A cell panel's title: ``normal cell``, ``NB201 cell``."""
    return genotype_type(space_family).cell_title(cell_type)


def new_figure(
    width: float, height: float, *, layout: Literal["constrained"] | None = "constrained"
) -> Figure:
    """A figure outside pyplot's state machine: no GUI backend, nothing leaks between calls,
    and ``savefig`` renders PNGs with Agg whatever backend a process has chosen."""
    from matplotlib.figure import Figure  # optional, heavy: on first use

    return Figure(figsize=(width, height), dpi=DPI, layout=layout)


def fixed_layout(
    fig: Figure,
    *,
    left: float,
    right: float,
    bottom: float,
    top: float,
    ncols: int = 1,
    nrows: int = 1,
    wspace: float = 0.0,
    hspace: float = 0.0,
) -> None:
    """Margins and gaps given in inches, for figures laid out without a layout engine (a
    constrained layout measures every tick label twice: half the time of a heat map)."""
    width, height = fig.get_size_inches()
    axes_w = max((width - left - right - wspace * (ncols - 1)) / ncols, 0.1)
    axes_h = max((height - top - bottom - hspace * (nrows - 1)) / nrows, 0.1)
    fig.subplots_adjust(
        left=left / width,
        right=1 - right / width,
        bottom=bottom / height,
        top=1 - top / height,
        wspace=wspace / axes_w,
        hspace=hspace / axes_h,
    )


def suptitle(fig: Figure, text: str, *, fontsize: float = 11) -> None:
    """A figure title 0.12 in below the top edge (figures with a fixed layout)."""
    height = fig.get_size_inches()[1]
    fig.suptitle(text, fontsize=fontsize, y=1 - 0.1 / height, va="top")


def save_figure(fig: Figure, path: str) -> None:
    fig.savefig(path, dpi=DPI, facecolor="white")


__all__ = [
    "DPI",
    "cell_title",
    "OP_COLORS",
    "OP_SHORT",
    "edge_name",
    "fixed_layout",
    "new_figure",
    "node_name",
    "op_color",
    "op_short",
    "save_figure",
    "space_family",
    "suptitle",
]
