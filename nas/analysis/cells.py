"""Cell diagrams: a genotype's cells as graphs, drawn with graphviz or with matplotlib.

Analysis layer, after the pipeline's genotype stage. A DARTS-style cell (Liu et al., ICLR 2019,
fig. 4-5) is drawn as the paper draws it: inputs ``c_{k-2}``, ``c_{k-1}``, intermediate nodes
``0..3``, each with its two input edges labelled by their operation, and the concatenation
into ``c_{k}``; an NB201 cell (Dong & Yang, ICLR 2020) as nodes ``0`` (input) .. ``3``
(output) with all six edges, ``none`` edges dotted.

``engine="graphviz"`` runs the ``dot`` program (the DARTS reference's ``visualize.py`` look);
``engine="matplotlib"`` draws a fixed layered layout with curved edges and needs nothing else;
``engine="auto"`` takes graphviz where ``dot`` is on the PATH and matplotlib otherwise.
"""

from __future__ import annotations

import math
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from nas.analysis.style import new_figure, op_color, save_figure
from search_spaces.genotype import AnyGenotype, genotype_type, is_genotype

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

ENGINES = ("auto", "graphviz", "matplotlib")
NODE_FILL = {"input": "#b4eeb4", "node": "#add8e6", "output": "#eee8aa"}  # DARTS visualize.py


@dataclass(frozen=True)
class CellGraph:
    """The drawable graph of one cell: named nodes and labelled edges (``op`` None: concat)."""

    family: str  # the space family (its genotype class draws the cell: layout, labels, size)
    cell_type: str
    nodes: tuple[tuple[str, str], ...]  # (name, kind), kind: input / node / output
    edges: tuple[tuple[str, str, str | None], ...]  # (src, dst, op)


def cell_types(genotype: AnyGenotype) -> tuple[str, ...]:
    """The cell types a genotype defines: ``("normal", "reduce")`` or ``("cell",)``."""
    return tuple(genotype.cell_types)


def cell_graph(genotype: AnyGenotype, cell_type: str | None = None) -> CellGraph:
    """The graph of ``cell_type`` (default: the first) of a genotype."""
    if not is_genotype(genotype):
        raise ValueError(f"expected a genotype, got {type(genotype).__name__}")
    ct = cell_type or genotype.cell_types[0]
    nodes, edges = genotype.drawing(ct)
    return CellGraph(genotype.family, ct, tuple(nodes), tuple(edges))


# ------------------------------------------------------------------------------- graphviz


def graphviz_available() -> bool:
    """Whether the graphviz ``dot`` program is on the PATH."""
    return shutil.which("dot") is not None


def _dot_id(name: str) -> str:
    return '"' + name.replace('"', r"\"") + '"'


def to_dot(graph: CellGraph, *, title: str | None = None) -> str:
    """The graph in the DOT language, styled as the DARTS reference's ``plot``."""
    lines = [
        "digraph cell {",
        '  rankdir=LR; bgcolor="white"; nodesep=0.25; ranksep=0.6;',
        '  node [style="filled,rounded", shape=rect, align=center, fontsize=16, height=0.5, '
        'width=0.5, penwidth=2, fontname="Helvetica"];',
        '  edge [fontsize=13, fontname="Helvetica", penwidth=1.6];',
    ]
    if title:
        lines.append(f'  labelloc="t"; label={_dot_id(title)}; fontsize=16; fontname="Helvetica";')
    for name, kind in graph.nodes:
        lines.append(f"  {_dot_id(name)} [fillcolor={_dot_id(NODE_FILL[kind])}];")
    for src, dst, op in graph.edges:
        if op is None:
            lines.append(f'  {_dot_id(src)} -> {_dot_id(dst)} [color="gray45"];')
        elif op == "none":
            lines.append(
                f"  {_dot_id(src)} -> {_dot_id(dst)} "
                '[label="none", style=dotted, color="gray60", fontcolor="gray50"];'
            )
        else:
            color = op_color(op)
            lines.append(
                f"  {_dot_id(src)} -> {_dot_id(dst)} [label={_dot_id(op)}, "
                f'color="{color}", fontcolor="{color}"];'
            )
    lines.append("}")
    return "\n".join(lines) + "\n"


def render_dot(dot_source: str, path: str | Path, *, timeout: float = 30.0) -> Path:
    """Run ``dot`` on DOT text; the output format follows the file suffix (png, svg, pdf)."""
    path = Path(path)
    exe = shutil.which("dot")
    if exe is None:
        raise FileNotFoundError(
            "graphviz's dot program is not installed (e.g. apt-get install graphviz); "
            "use engine='matplotlib'"
        )
    fmt = path.suffix.lstrip(".") or "png"
    proc = subprocess.run(
        [exe, f"-T{fmt}", "-Gdpi=110", "-o", str(path)],
        input=dot_source,
        text=True,
        capture_output=True,
        timeout=timeout,
    )
    if proc.returncode != 0 or not path.is_file():
        message = (proc.stderr.strip().splitlines() or ["no output"])[0]
        raise RuntimeError(f"dot failed on {path.name}: {message}")
    return path


# ------------------------------------------------------------------------------ matplotlib


def _layout(graph: CellGraph) -> dict[str, tuple[float, float]]:
    return genotype_type(graph.family).layout(graph.nodes)


def _bezier(
    p0: tuple[float, float], c: tuple[float, float], p2: tuple[float, float], t: float
) -> tuple[float, float]:
    u = 1 - t
    return (
        u * u * p0[0] + 2 * u * t * c[0] + t * t * p2[0],
        u * u * p0[1] + 2 * u * t * c[1] + t * t * p2[1],
    )


def _trim(
    p0: tuple[float, float], c: tuple[float, float], p2: tuple[float, float], r: float
) -> tuple[tuple[float, float], tuple[float, float], tuple[float, float]]:
    """The part of a quadratic Bezier outside circles of radius ``r`` around its ends."""

    def solve(end: tuple[float, float], near_start: bool) -> float:
        lo, hi = (0.0, 0.5) if near_start else (0.5, 1.0)
        for _ in range(40):  # bisection on the distance to the end point
            mid = (lo + hi) / 2
            x, y = _bezier(p0, c, p2, mid)
            inside = math.hypot(x - end[0], y - end[1]) < r
            if near_start == inside:
                lo = mid
            else:
                hi = mid
        return (lo + hi) / 2

    t0, t1 = solve(p0, True), solve(p2, False)
    # the control point of the sub-curve [t0, t1] is the blossom B(t0, t1)
    ctrl = (
        (1 - t0) * (1 - t1) * p0[0] + ((1 - t0) * t1 + t0 * (1 - t1)) * c[0] + t0 * t1 * p2[0],
        (1 - t0) * (1 - t1) * p0[1] + ((1 - t0) * t1 + t0 * (1 - t1)) * c[1] + t0 * t1 * p2[1],
    )
    return _bezier(p0, c, p2, t0), ctrl, _bezier(p0, c, p2, t1)


def _curvature(a: tuple[float, float], b: tuple[float, float]) -> float:
    """How far an edge bows: edges between two nodes of one row that skip a node bow
    outwards, around the nodes in between; the others stay (nearly) straight."""
    dx = b[0] - a[0]
    same_row = abs(a[1] - b[1]) < 0.3 and abs(a[1]) > 0.3
    if same_row and dx > 2.5:
        return -0.22 if a[1] > 0 else 0.22
    return 0.06


def draw_cell(graph: CellGraph, ax: Axes, *, title: str | None = None) -> None:
    """Draw a cell graph on matplotlib axes (a layered left-to-right layout)."""
    from matplotlib.patches import Circle, FancyArrowPatch  # optional, heavy: on first use
    from matplotlib.path import Path as MplPath  # optional, heavy: on first use

    pos = _layout(graph)
    radius = 0.36
    curve_ys: list[float] = []
    for src, dst, op in graph.edges:
        a, b = pos[src], pos[dst]
        rad = 0.0 if op is None else _curvature(a, b)
        dx, dy = b[0] - a[0], b[1] - a[1]
        mid = ((a[0] + b[0]) / 2, (a[1] + b[1]) / 2)
        ctrl = (mid[0] + rad * dy * 2, mid[1] - rad * dx * 2)
        p0, c, p2 = _trim(a, ctrl, b, radius)
        color = "#777777" if op is None else op_color(op)
        dotted = op == "none"
        arrow = FancyArrowPatch(
            path=MplPath([p0, c, p2], [MplPath.MOVETO, MplPath.CURVE3, MplPath.CURVE3]),
            arrowstyle="-|>",
            mutation_scale=12,
            color="#aaaaaa" if dotted else color,
            linewidth=1.0 if op is None or dotted else 1.8,
            linestyle=":" if dotted else "-",
            zorder=1,
        )
        ax.add_patch(arrow)
        if op is not None:
            # the label sits on the edge, along it, nearer the node it feeds: the two labels
            # of a node come from two directions, and long edges do not pile up mid-figure
            long_edge = math.hypot(dx, dy) > 3.0
            t_label = genotype_type(graph.family).long_edge_label_at if long_edge else 0.5
            lx, ly = _bezier(a, ctrl, b, t_label)
            tx = 2 * (1 - t_label) * (ctrl[0] - a[0]) + 2 * t_label * (b[0] - ctrl[0])
            ty = 2 * (1 - t_label) * (ctrl[1] - a[1]) + 2 * t_label * (b[1] - ctrl[1])
            angle = math.degrees(math.atan2(ty, tx))
            if angle > 90:
                angle -= 180
            elif angle < -90:
                angle += 180
            ax.text(
                lx,
                ly,
                op,
                ha="center",
                va="center",
                rotation=angle,
                rotation_mode="anchor",
                fontsize=7.5,
                color="#888888" if dotted else color,
                zorder=3,
                bbox={"boxstyle": "round,pad=0.12", "fc": "white", "ec": "none", "alpha": 0.9},
            )
        curve_ys.extend(_bezier(a, ctrl, b, k / 10)[1] for k in range(11))
    for name, kind in graph.nodes:
        x, y = pos[name]
        ax.add_patch(
            Circle((x, y), radius, facecolor=NODE_FILL[kind], edgecolor="#333333", lw=1.5, zorder=4)
        )
        label = f"${name}$" if name.startswith("c_") else name
        ax.text(x, y, label, ha="center", va="center", fontsize=10, zorder=5)
    xs = [p[0] for p in pos.values()]
    ys = [p[1] for p in pos.values()] + curve_ys
    ax.set_xlim(min(xs) - 0.5, max(xs) + 0.5)
    ax.set_ylim(min(ys) - 0.5, max(ys) + 0.5)
    ax.set_aspect("equal")
    ax.axis("off")
    if title:
        ax.set_title(title, fontsize=11)


def plot_cell(
    genotype: AnyGenotype, cell_type: str | None = None, *, title: str | None = None
) -> Figure:
    """A matplotlib figure of one cell (displays inline in a notebook)."""
    graph = cell_graph(genotype, cell_type)
    fig = new_figure(*genotype_type(graph.family).figure_size)
    draw_cell(graph, fig.add_subplot(1, 1, 1), title=title or _default_title(graph))
    return fig


def plot_cells(genotype: AnyGenotype, *, title: str | None = None) -> Figure:
    """All cell types of a genotype in one matplotlib figure (normal above reduce)."""
    types = cell_types(genotype)
    graphs = [cell_graph(genotype, ct) for ct in types]
    fig = new_figure(genotype.figure_size[0], 3.4 * len(types))
    for i, graph in enumerate(graphs):
        draw_cell(graph, fig.add_subplot(len(types), 1, i + 1), title=_default_title(graph))
    if title:
        fig.suptitle(title, fontsize=11)
    return fig


def _default_title(graph: CellGraph) -> str:
    return genotype_type(graph.family).cell_title(graph.cell_type)


def resolve_engine(engine: str) -> str:
    """``auto`` -> ``graphviz`` where ``dot`` is installed, else ``matplotlib``."""
    if engine not in ENGINES:
        raise ValueError(f"unknown cell-diagram engine {engine!r}; expected one of {ENGINES}")
    if engine == "auto":
        return "graphviz" if graphviz_available() else "matplotlib"
    if engine == "graphviz" and not graphviz_available():
        raise FileNotFoundError(
            "engine 'graphviz' needs graphviz's dot program, which is not on the PATH "
            "(e.g. apt-get install graphviz); use engine 'matplotlib' or 'auto'"
        )
    return engine


def render_cell(
    genotype: AnyGenotype,
    cell_type: str | None,
    path: str | Path,
    *,
    engine: str = "auto",
    title: str | None = None,
) -> tuple[Path, str]:
    """Write one cell's diagram to ``path`` (png, svg or pdf by suffix).

    Returns the path and the engine used. With ``auto``, a ``dot`` that fails falls back to
    matplotlib, so a diagram is always written."""
    path = Path(path)
    graph = cell_graph(genotype, cell_type)
    used = resolve_engine(engine)
    if used == "graphviz":
        try:
            render_dot(to_dot(graph, title=title or _default_title(graph)), path)
            return path, used
        except (RuntimeError, OSError, subprocess.TimeoutExpired):
            if engine != "auto":
                raise
            used = "matplotlib"
    fig = plot_cell(genotype, cell_type, title=title)
    save_figure(fig, str(path))
    return path, used


__all__ = [
    "ENGINES",
    "CellGraph",
    "cell_graph",
    "cell_types",
    "draw_cell",
    "graphviz_available",
    "plot_cell",
    "plot_cells",
    "render_cell",
    "render_dot",
    "resolve_engine",
    "to_dot",
]
