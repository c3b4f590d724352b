"""Figures of a search: architecture weights, their trajectories, a strategy's concentrations,
a selector's decision trace and NB201 accuracy over the search.

Analysis layer, after the pipeline. Each function takes plain data (arrays, the events of
``metrics.jsonl``, a ``Space``) and returns a matplotlib ``Figure`` built outside pyplot, so it
displays inline in a notebook and saves with Agg anywhere. Shapes: ``weights_EO`` = [edges,
ops], ``weights_TEO`` = [epochs, edges, ops]; edges and ops in the space's order
(``CellSpace.edges``, ``Edge.ops``).

* heat map: the weights of every edge (rows) and op (columns) per cell type, the selected
  genotype's ops boxed (DARTS, Liu et al., ICLR 2019, derives the genotype from them);
* trajectories: one small panel per edge, laid out as the cell (row = node, column = input),
  a line per op over epochs;
* argmax share: per epoch, which op wins each edge; the collapse to ``skip_connect`` that
  RobustDARTS / DARTS-PT describe shows as a growing red band;
* concentrations: what a strategy that samples its mixing weights declares per op
  (``SearchStrategy.concentrations_of``, e.g. the Dirichlet's of Chen et al., ICLR 2021, eq. 2)
  and their sum per edge (how certain the distribution is);
* decision trace: for each decision a selector logs (``Selector.decision_event``; a projection
  in the manner of Wang et al., ICLR 2021, Alg. 1-2) the supernet's accuracy or loss with each
  candidate removed, the kept op boxed; topology rounds with the removed edge crossed;
* NB201 accuracy: the benchmark accuracy of the argmax cell at every epoch (Dong & Yang,
  ICLR 2020), with the selected cell and the benchmark's best for reference.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from nas.analysis.style import (
    cell_title,
    edge_name,
    fixed_layout,
    new_figure,
    node_name,
    op_color,
    op_short,
    space_family,
    suptitle,
)
from nas.bench import NB201, SEARCH_LOG_KEYS, SEARCH_LOG_PREFIX, is_benchmark_cell, search_log_entry
from nas.bench.search_log import default_bench
from search_spaces.families import first_family
from search_spaces.genotype import AnyGenotype, genotype_type, is_genotype
from search_spaces.space import CellSpace, Space

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


def selected_ops(genotype: AnyGenotype | None, cell: CellSpace, cell_type: str) -> dict[int, int]:
    """Edge index -> op index (in ``cell``'s order) of the ops a genotype keeps in a cell."""
    out: dict[int, int] = {}
    if genotype is None:
        return out
    try:
        if not is_genotype(genotype):
            return out
        if cell_type not in genotype.cell_types:  # NB201: its one cell, whatever the name
            cell_type = genotype.cell_types[0]
        for op, src, dst in genotype.edges(cell_type):
            edge = cell.edge(src, dst)
            if op in edge.ops:
                out[edge.index] = edge.ops.index(op)
    except ValueError:  # a genotype of another space: nothing to mark
        return {}
    return out


def _uniform_ops(cell: CellSpace) -> tuple[str, ...] | None:
    """The op list when every edge has the same one (S1 has per-edge lists)."""
    ops = {e.ops for e in cell.edges}
    return next(iter(ops)) if len(ops) == 1 else None


def _cell_fits(cell: CellSpace | None, shape: tuple[int, ...]) -> bool:
    return cell is not None and (cell.num_edges, cell.num_ops) == tuple(shape[-2:])


def _edge_labels(cell: CellSpace | None, family: str, num_edges: int) -> list[str]:
    if cell is None:
        return [f"edge {e}" for e in range(num_edges)]
    return [edge_name(family, e.src, e.dst) for e in cell.edges]


def _annotate_grid(image: Any, values: np.ndarray, fmt: str, *, texts: Any = None) -> None:
    """Write each value on its cell of a heat map, black or white by the cell's brightness."""
    ax = image.axes
    for (r, c), v in np.ndenumerate(values):
        label = "" if not np.isfinite(v) else format(v, fmt)
        if texts is not None:
            label = f"{texts[r][c]}\n{label}" if label else texts[r][c]
        if not label:
            continue
        red, green, blue, _ = image.cmap(image.norm(v)) if np.isfinite(v) else (1, 1, 1, 1)
        bright = 0.299 * red + 0.587 * green + 0.114 * blue > 0.5
        ax.text(
            c,
            r,
            label,
            ha="center",
            va="center",
            fontsize=6.5,
            color="black" if bright else "white",
            in_layout=False,  # inside the axes anyway; measuring them doubles the layout time
        )


def _box(ax: Axes, row: int, col: int, color: str = "#ff2d2d") -> None:
    from matplotlib.patches import Rectangle  # optional, heavy: on first use

    ax.add_patch(
        Rectangle((col - 0.5, row - 0.5), 1, 1, fill=False, edgecolor=color, linewidth=2.2)
    )


def _heatmap(
    ax: Axes,
    values_EO: np.ndarray,
    cell: CellSpace | None,
    family: str,
    *,
    fmt: str = ".2f",
    cmap: str = "viridis",
    vmin: float | None = None,
    vmax: float | None = None,
    marks: Mapping[int, int] | None = None,
) -> Any:
    fits = _cell_fits(cell, values_EO.shape)
    cell = cell if fits else None
    image = ax.imshow(values_EO, cmap=cmap, aspect="auto", vmin=vmin, vmax=vmax)
    ops = _uniform_ops(cell) if cell is not None else None
    texts = None
    if cell is not None and ops is None:  # per-edge op lists: name each cell
        texts = [[op_short(op) for op in e.ops] for e in cell.edges]
        ax.set_xticks(range(values_EO.shape[1]), [f"op {k + 1}" for k in range(values_EO.shape[1])])
    elif ops is not None:
        ax.set_xticks(range(len(ops)), list(ops), rotation=45, ha="right", fontsize=8)
    else:
        ax.set_xticks(range(values_EO.shape[1]), [f"op {k}" for k in range(values_EO.shape[1])])
    ax.set_yticks(
        range(values_EO.shape[0]), _edge_labels(cell, family, values_EO.shape[0]), fontsize=8
    )
    _annotate_grid(image, values_EO, fmt, texts=texts)
    for e, k in (marks or {}).items():
        _box(ax, e, k)
    return image


# ------------------------------------------------------------------------------ weights


def plot_weights_heatmap(
    weights: Mapping[str, np.ndarray],
    space: Space | None,
    *,
    genotype: AnyGenotype | None = None,
    title: str | None = None,
) -> Figure:
    """Heat map of ``weights_EO`` per cell type; the genotype's kept ops boxed in red."""
    family = space_family(space, weights)
    cts = list(weights)
    num_edges = max(np.asarray(w).shape[0] for w in weights.values())
    num_ops = max(np.asarray(w).shape[1] for w in weights.values())
    panel = 0.45 * num_ops + 0.9  # the map and its colour bar
    fig = new_figure(len(cts) * (panel + 2.0) + 0.0, 0.3 * num_edges + 1.9, layout=None)
    fixed_layout(fig, left=1.1, right=0.9, bottom=1.1, top=0.8, ncols=len(cts), wspace=2.0)
    axes = fig.subplots(1, len(cts), squeeze=False)[0]
    for ax, ct in zip(axes, cts):
        w = np.asarray(weights[ct], dtype=float)
        cell = space.cells.get(ct) if space is not None else None
        marks = selected_ops(genotype, cell, ct) if cell is not None else {}
        image = _heatmap(
            ax, w, cell, family, vmin=0.0, vmax=max(float(np.nanmax(w)), 1e-9), marks=marks
        )
        ax.set_title(cell_title(family, ct), fontsize=10)
        fig.colorbar(image, ax=ax, fraction=0.08, pad=0.03, label="weight")
    suptitle(fig, title or "architecture weights (boxed: the selected genotype)")
    return fig


def plot_weight_trajectories(
    weights_TEO: np.ndarray,
    cell: CellSpace | None,
    *,
    family: str | None = None,
    epochs: Sequence[int] | None = None,
    genotype: AnyGenotype | None = None,
    cell_type: str | None = None,
    title: str | None = None,
) -> Figure:
    """One panel per edge (row: the node it feeds, column: its input), one line per op; the
    panels share their axes (the weights' range, so that small moves stay visible).
    ``cell_type``: the weights' cell type (None: the main one of the first family, DARTS's
    normal cell); ``family``: the space family (None: the one whose cells have
    ``cell_type``)."""
    from matplotlib.lines import Line2D  # optional, heavy: on first use
    from matplotlib.ticker import MaxNLocator  # optional, heavy: on first use

    cell_type = cell_type or first_family().cell_types[0]
    family = family or space_family(None, (cell_type,))
    w = np.asarray(weights_TEO, dtype=float)
    if w.ndim != 3:
        raise ValueError(f"expected weights of shape [epochs, edges, ops], got {w.shape}")
    num_epochs, num_edges, num_ops = w.shape
    x = np.asarray(list(epochs) if epochs is not None else range(num_epochs)) + 1
    if not _cell_fits(cell, w.shape):
        cell = None
    if cell is not None:
        dsts = sorted({e.dst for e in cell.edges})
        srcs = sorted({e.src for e in cell.edges})
        where = {e.index: (dsts.index(e.dst), srcs.index(e.src)) for e in cell.edges}
        nrows, ncols = len(dsts), len(srcs)
    else:
        ncols = min(num_edges, 5)
        nrows = -(-num_edges // ncols)
        where = {e: divmod(e, ncols) for e in range(num_edges)}
    marks = selected_ops(genotype, cell, cell_type) if cell is not None else {}
    width, height = 2.3 * ncols + 0.6, 1.7 * nrows + 1.3
    # fixed margins (in inches) instead of a layout engine: a grid of up to 20 panels lays
    # out twice as fast, which keeps the figures of a search's end within seconds
    fig = new_figure(width, height, layout=None)
    fig.subplots_adjust(
        left=0.75 / width,
        right=1 - 0.15 / width,
        bottom=0.95 / height,
        top=1 - 0.55 / height,
        hspace=0.45,
        wspace=0.12,
    )
    axes = fig.subplots(nrows, ncols, squeeze=False, sharex=True, sharey=True)
    used = set(where.values())
    lo, hi = float(np.nanmin(w)), float(np.nanmax(w))
    pad = max((hi - lo) * 0.08, 1e-4)
    handles: dict[str, Any] = {}
    for e in range(num_edges):
        ax = axes[where[e]]
        ops = cell.edges[e].ops if cell is not None else tuple(f"op {k}" for k in range(num_ops))
        for k, op in enumerate(ops):
            chosen = marks.get(e) == k
            ax.plot(
                x,
                w[:, e, k],
                color=op_color(op),
                linewidth=2.6 if chosen else 1.2,
                marker="o" if num_epochs < 3 else None,
                markersize=3,
            )
            if op not in handles:
                handles[op] = Line2D([], [], color=op_color(op), linewidth=1.6)
        name = edge_name(family, cell.edges[e].src, cell.edges[e].dst) if cell else f"edge {e}"
        if e in marks and cell is not None:
            op = cell.edges[e].ops[marks[e]]
            ax.set_title(
                f"{name}: {op_short(op)}", fontsize=8.5, color=op_color(op), fontweight="bold"
            )
        else:
            ax.set_title(name, fontsize=8.5)
        ax.set_ylim(lo - pad, hi + pad)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=7)
    for r in range(nrows):
        for c in range(ncols):
            if (r, c) not in used:
                axes[r, c].set_visible(False)
    fig.supxlabel("epoch", fontsize=9, y=0.42 / height)
    fig.supylabel("weight", fontsize=9, x=0.12 / width)
    fig.legend(
        list(handles.values()),
        list(handles),
        loc="lower center",
        ncol=min(len(handles), 6),
        fontsize=8,
        frameon=False,
        bbox_to_anchor=(0.5, 0.0),
    )
    label = cell_title(family, cell_type)
    fig.suptitle(
        title or f"{label}: architecture weights over the search (bold: the selected op)",
        fontsize=11,
        y=1 - 0.12 / height,
    )
    return fig


def argmax_shares(
    weights_TEO: np.ndarray, cell: CellSpace | None, *, family: str | None = None
) -> dict[str, np.ndarray]:
    """Op -> fraction of edges whose strongest op it is, per epoch (DARTS-style spaces skip
    ``none``, as the genotype derivation does). ``family``: the space family (None: the
    first, DARTS)."""
    family = family or first_family().name
    w = np.asarray(weights_TEO, dtype=float)
    if not _cell_fits(cell, w.shape):
        cell = None
    num_epochs, num_edges, num_ops = w.shape
    shares: dict[str, np.ndarray] = {}
    for e in range(num_edges):
        ops = cell.edges[e].ops if cell is not None else tuple(f"op {k}" for k in range(num_ops))
        row = w[:, e, :].copy()
        if not genotype_type(family).keeps_every_edge:  # `none` is never a derived op
            row[:, [k for k, op in enumerate(ops) if op == "none"]] = -np.inf
        winners = row.argmax(axis=1)
        for k, op in enumerate(ops):
            shares.setdefault(op, np.zeros(num_epochs))
            shares[op] += winners == k  # counts first: exact fractions at the end
    return {op: count / num_edges for op, count in shares.items()}


def mean_op_weight(weights_TEO: np.ndarray, cell: CellSpace | None, op: str) -> np.ndarray | None:
    """The mean weight of ``op`` over the edges that offer it, per epoch (None: no such op)."""
    w = np.asarray(weights_TEO, dtype=float)
    if not _cell_fits(cell, w.shape) or cell is None:
        return None
    cols = [(e.index, e.ops.index(op)) for e in cell.edges if op in e.ops]
    if not cols:
        return None
    return np.mean([w[:, e, k] for e, k in cols], axis=0)


def plot_argmax_ops(
    weights: Mapping[str, np.ndarray],
    space: Space | None,
    *,
    epochs: Sequence[int] | None = None,
    title: str | None = None,
) -> Figure:
    """Per cell type: which op wins the edges, epoch by epoch (stacked shares), and the mean
    ``skip_connect`` weight (dashed): a collapse to skip connections at a glance."""
    from matplotlib.ticker import MaxNLocator  # optional, heavy: on first use

    family = space_family(space, weights)
    cts = list(weights)
    fig = new_figure(4.6 * len(cts) + 1.6, 3.4)
    axes = fig.subplots(1, len(cts), squeeze=False)[0]
    handles: dict[str, Any] = {}
    for ax, ct in zip(axes, cts):
        w = np.asarray(weights[ct], dtype=float)
        cell = space.cells.get(ct) if space is not None else None
        x = np.asarray(list(epochs) if epochs is not None else range(w.shape[0])) + 1
        shares = argmax_shares(w, cell, family=family)
        ops = [op for op in shares if shares[op].any()]
        if len(x) == 1:  # one epoch: bars instead of an area of zero width
            bottom = 0.0
            for op in ops:
                bar = ax.bar(x, shares[op], bottom=bottom, color=op_color(op), width=0.6)
                handles.setdefault(op, bar)
                bottom += float(shares[op][0])
        else:
            polys = ax.stackplot(
                x, *[shares[op] for op in ops], colors=[op_color(op) for op in ops], alpha=0.85
            )
            for op, poly in zip(ops, polys):
                handles.setdefault(op, poly)
        skip = mean_op_weight(w, cell, "skip_connect")
        if skip is not None:
            (line,) = ax.plot(x, skip, "k--", linewidth=1.5)
            handles.setdefault("mean skip_connect weight", line)
        ax.set_ylim(0, 1)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("epoch")
        ax.set_ylabel("share of edges")
        ax.set_title(cell_title(family, ct), fontsize=10)
        ax.grid(alpha=0.3)
    fig.legend(
        list(handles.values()), list(handles), loc="outside right center", fontsize=8, frameon=False
    )
    fig.suptitle(title or "strongest op per edge over the search", fontsize=11)
    return fig


# --------------------------------------------------------------------- concentrations


def plot_concentrations(
    concentrations: Mapping[str, np.ndarray],
    space: Space | None,
    *,
    genotype: AnyGenotype | None = None,
    title: str | None = None,
) -> Figure:
    """The concentration of every op (``RunData.concentrations``: what the strategy declares,
    pruned ops blank) and, per edge, their sum (the larger, the more certain the edge's
    distribution)."""
    family = space_family(space, concentrations)
    cts = list(concentrations)
    num_edges = max(np.asarray(c).shape[0] for c in concentrations.values())
    num_ops = max(np.asarray(c).shape[1] for c in concentrations.values())
    panel_h = 0.3 * num_edges
    fig = new_figure(0.45 * num_ops + 5.2, (panel_h + 1.5) * len(cts) + 0.4, layout=None)
    fixed_layout(
        fig,
        left=1.1,
        right=0.2,
        bottom=1.1,
        top=0.8,
        ncols=2,
        nrows=len(cts),
        wspace=1.2,
        hspace=1.5,
    )
    axes = fig.subplots(len(cts), 2, squeeze=False, width_ratios=[0.45 * num_ops + 0.9, 1.6])
    for (ax_map, ax_bar), ct in zip(axes, cts):
        conc = np.asarray(concentrations[ct], dtype=float)
        cell = space.cells.get(ct) if space is not None else None
        marks = selected_ops(genotype, cell, ct) if cell is not None else {}
        image = _heatmap(ax_map, conc, cell, family, cmap="magma", marks=marks)
        fig.colorbar(image, ax=ax_map, fraction=0.08, pad=0.03, label="concentration")
        ax_map.set_title(cell_title(family, ct), fontsize=10)
        total = np.nansum(conc, axis=1)
        ax_bar.barh(range(len(total)), total, color="#555555")
        ax_bar.set_ylim(len(total) - 0.5, -0.5)
        ax_bar.set_yticks([])
        ax_bar.set_xlabel("sum per edge", fontsize=8)
        ax_bar.tick_params(labelsize=7)
        ax_bar.grid(axis="x", alpha=0.3)
    suptitle(fig, title or "concentrations of the architecture distribution")
    return fig


# -------------------------------------------------------------------------- decisions


def plot_decisions(
    decisions: Sequence[Mapping[str, Any]],
    space: Space | None,
    *,
    metric: str = "acc",
    title: str | None = None,
) -> Figure:
    """A selector's decision trace (``RunData.decisions``): each op decision (rows, in order)
    with the supernet's ``metric`` when each candidate is removed, the kept op boxed; each
    topology round with the metric when each input edge is removed, the removed edge crossed.

    A decision is a record ``{"kind": "op", "cell_type", "src", "dst", "candidates", <metric>:
    one value per candidate, "chosen", "projection"}`` or ``{"kind": "edge", "cell_type",
    "node", "rounds": [{"edges", <metric>: one value per edge, "removed"}], "projection"}``."""
    if metric not in ("acc", "loss"):
        raise ValueError(f"metric must be 'acc' or 'loss', got {metric!r}")
    family = space_family(space, {str(d["cell_type"]) for d in decisions if "cell_type" in d})
    op_rows = [d for d in decisions if d.get("kind") == "op"]
    topo_rows = [
        (d, k, r)
        for d in decisions
        if d.get("kind") == "edge"
        for k, r in enumerate(d.get("rounds", []))
    ]
    if not op_rows and not topo_rows:
        raise ValueError("no op or edge decisions to plot")
    scale = 100.0 if metric == "acc" else 1.0
    unit = "accuracy (%)" if metric == "acc" else "loss"
    space_ops = list(space.ops) if space is not None else []
    columns = [op for op in space_ops if any(op in d.get("candidates", []) for d in op_rows)]
    for d in op_rows:
        columns += [op for op in d.get("candidates", []) if op not in columns]
    heights = [max(len(op_rows), 1) * 0.24]
    if topo_rows:
        heights.append(len(topo_rows) * 0.24)
    fig = new_figure(8.5, sum(heights) + 1.45 * len(heights) + 0.5, layout=None)
    fixed_layout(fig, left=2.0, right=0.9, bottom=0.75, top=0.75, nrows=len(heights), hspace=1.35)
    axes = fig.subplots(len(heights), 1, squeeze=False, height_ratios=heights)[:, 0]
    cmap = "RdYlGn" if metric == "acc" else "RdYlGn_r"
    if op_rows:
        ax = axes[0]
        values = np.full((len(op_rows), len(columns)), np.nan)
        labels = []
        for r, d in enumerate(op_rows):
            for op, v in zip(d.get("candidates", []), d.get(metric, [])):
                values[r, columns.index(op)] = float(v) * scale
            labels.append(
                f"{int(d.get('projection', r)) + 1}. {d.get('cell_type', '')} "
                f"{edge_name(family, int(d['src']), int(d['dst'])) if 'src' in d else ''}"
            )
        image = ax.imshow(values, cmap=cmap, aspect="auto")
        _annotate_grid(image, values, ".1f" if metric == "acc" else ".3f")
        for r, d in enumerate(op_rows):
            if d.get("chosen") in columns:
                _box(ax, r, columns.index(d["chosen"]), color="black")
        ax.set_xticks(range(len(columns)), columns, rotation=30, ha="right", fontsize=8)
        ax.set_yticks(range(len(labels)), labels, fontsize=7)
        ax.set_title(
            f"op projection: supernet {unit} without the candidate (boxed: the op kept)",
            fontsize=9,
        )
        fig.colorbar(image, ax=ax, fraction=0.05, pad=0.02, label=unit)
    else:
        axes[0].set_visible(False)
    if topo_rows:
        ax = axes[-1]
        srcs = sorted({int(s) for d, _, r in topo_rows for s in _round_sources(d, r, space)})
        values = np.full((len(topo_rows), len(srcs)), np.nan)
        labels = []
        for i, (d, k, rnd) in enumerate(topo_rows):
            sources = _round_sources(d, rnd, space)
            for s, v in zip(sources, rnd.get(metric, [])):
                values[i, srcs.index(s)] = float(v) * scale
            labels.append(
                f"{int(d.get('projection', 0)) + 1}. {d.get('cell_type', '')} node "
                f"{node_name(family, int(d['node']))} round {k + 1}"
            )
        image = ax.imshow(values, cmap=cmap, aspect="auto")
        _annotate_grid(image, values, ".1f" if metric == "acc" else ".3f")
        for i, (d, _, rnd) in enumerate(topo_rows):
            removed = _edge_source(d, int(rnd.get("removed", -1)), space)
            if removed in srcs:
                col = srcs.index(removed)
                for y0, y1 in ((i - 0.42, i + 0.42), (i + 0.42, i - 0.42)):
                    ax.plot([col - 0.45, col + 0.45], [y0, y1], color="black", lw=0.9, alpha=0.7)
        ax.set_xticks(range(len(srcs)), [f"from {node_name(family, s)}" for s in srcs], fontsize=8)
        ax.set_yticks(range(len(labels)), labels, fontsize=7)
        ax.set_title(
            f"topology projection: supernet {unit} without the input edge (crossed: removed)",
            fontsize=9,
        )
        fig.colorbar(image, ax=ax, fraction=0.05, pad=0.02, label=unit)
    suptitle(fig, title or f"selection decisions ({len(decisions)})")
    return fig


def _edge_source(decision: Mapping[str, Any], edge: int, space: Space | None) -> int:
    """The source node of edge ``edge`` of the decision's cell type (the edge index if unknown)."""
    if space is not None:
        cell = space.cells.get(str(decision.get("cell_type")))
        if cell is not None and 0 <= edge < cell.num_edges:
            return cell.edges[edge].src
    return edge


def _round_sources(
    decision: Mapping[str, Any], rnd: Mapping[str, Any], space: Space | None
) -> list[int]:
    return [_edge_source(decision, int(e), space) for e in rnd.get("edges", [])]


# ------------------------------------------------------------------------------ NB201

NB201_PANELS = (
    ("cifar10", "CIFAR-10"),
    ("cifar100", "CIFAR-100"),
    ("ImageNet16-120", "ImageNet16-120"),
)


def plot_nb201_accuracy(
    epochs: Sequence[Mapping[str, Any]],
    *,
    selected: AnyGenotype | None = None,
    selector: str | None = None,
    title: str | None = None,
) -> Figure:
    """NB201 accuracy (200-epoch benchmark mean, %) of the argmax cell after every search epoch:
    valid and test per dataset; a star for the finally selected cell, a dotted line for the
    best cell of the benchmark."""
    from matplotlib.ticker import MaxNLocator  # optional, heavy: on first use

    chosen = f"selected ({selector})" if selector else "selected"

    series: dict[str, tuple[list[int], list[float]]] = {}
    for e in epochs:
        for key, value in e.items():
            if key.startswith(SEARCH_LOG_PREFIX) and isinstance(value, (int, float)):
                xs, ys = series.setdefault(key, ([], []))
                xs.append(int(e["epoch"]) + 1)
                ys.append(float(value))
    if not series:
        raise ValueError(f"the epochs hold no {SEARCH_LOG_PREFIX}<dataset>/<split> accuracies")
    final: dict[str, float] = {}
    best: dict[str, float] = {}
    try:
        bench: NB201 = default_bench()
        if is_benchmark_cell(selected):
            final = search_log_entry(selected, bench=bench)
        for key, (dataset, split) in SEARCH_LOG_KEYS.items():
            if key in series:
                best[key] = bench.best(dataset=dataset, split=split).accuracy
    except (ValueError, OSError):  # no benchmark file at hand: the curves alone
        pass
    fig = new_figure(12.0, 3.6)
    axes = fig.subplots(1, len(NB201_PANELS), squeeze=False)[0]
    last = max(max(xs) for xs, _ in series.values())
    for ax, (key, label) in zip(axes, NB201_PANELS):
        for split, style in (("valid", "-o"), ("test", "-s")):
            name = f"{SEARCH_LOG_PREFIX}{key}/{split}"
            if name not in series:
                continue
            xs, ys = series[name]
            (line,) = ax.plot(xs, ys, style, markersize=3, label=f"argmax cell, {split}")
            if name in final:
                ax.plot(
                    [last + 0.3],
                    [final[name]],
                    "*",
                    markersize=13,
                    color=line.get_color(),
                    markeredgecolor="black",
                    label=f"{chosen}, {split}: {final[name]:.2f}",
                )
            if name in best and split == "test":
                ax.axhline(
                    best[name],
                    color="gray",
                    linestyle=":",
                    label=f"best NB201 cell, test: {best[name]:.2f}",
                )
        ax.set_title(label, fontsize=10)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("search epoch")
        ax.set_ylabel("NB201 accuracy (%)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    fig.suptitle(title or "NAS-Bench-201 accuracy of the cell over the search", fontsize=11)
    return fig


__all__ = [
    "NB201_PANELS",
    "argmax_shares",
    "mean_op_weight",
    "plot_argmax_ops",
    "plot_concentrations",
    "plot_decisions",
    "plot_nb201_accuracy",
    "plot_weight_trajectories",
    "plot_weights_heatmap",
    "selected_ops",
]
