"""Genotype statistics: operations, topology, parameters, distances, NAS-Bench-201 position.

Analysis layer, after the pipeline's genotype stage; what the genotype-analysis notebook
tabulates across seeds and methods. Topology follows the DARTS cell (Liu et al., ICLR 2019):
``depth`` is the longest chain of edges from the cell inputs to an output node (a "deep"
cell), ``from_inputs`` how many of the 8 kept edges read ``c_{k-2}`` / ``c_{k-1}`` (a "wide"
cell; Shu et al., ICLR 2020, observed that DARTS prefers wide, shallow cells). NB201 cells
(Dong & Yang, ICLR 2020) also report whether the output is connected at all. Parameter counts
are those of the papers' evaluation networks: ``NetworkCIFAR(36, 10, 20)`` (auxiliary head
excluded) and NB201's ``TinyNetwork(16, 5)`` (the benchmark's own count).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from functools import cache
from typing import TYPE_CHECKING, Any

import numpy as np

from nas.analysis.style import new_figure, op_color
from nas.bench import NUM_CELLS, is_benchmark_cell
from nas.bench.search_log import default_bench
from search_spaces.genotype import AnyGenotype

if TYPE_CHECKING:
    from matplotlib.figure import Figure

PARAMETER_FREE = frozenset({"none", "skip_connect", "max_pool_3x3", "avg_pool_3x3"})
NB201_TEST_SPLITS = (
    ("cifar10", "ori-test"),
    ("cifar100", "x-test"),
    ("ImageNet16-120", "x-test"),
)


def genotype_edges(genotype: AnyGenotype) -> dict[str, list[tuple[str, int, int]]]:
    """Cell type -> the kept edges ``(op, src, dst)`` (node indices as in the space's edges)."""
    return {ct: genotype.edges(ct) for ct in genotype.cell_types}


def op_counts(genotype: AnyGenotype, cell_type: str | None = None) -> Counter[str]:
    """How often each op appears in one cell type (or in all of them)."""
    edges = genotype_edges(genotype)
    cts = [cell_type] if cell_type is not None else list(edges)
    return Counter(op for ct in cts for op, _, _ in edges[ct])


def _longest_path(edges: Sequence[tuple[str, int, int]], sources: set[int], sink: int) -> int:
    """Edges on the longest path from any source to ``sink`` (-1: unreachable)."""
    best: dict[int, int] = {s: 0 for s in sources}
    for _, src, dst in sorted(edges, key=lambda e: e[2]):
        if src in best:
            best[dst] = max(best.get(dst, -1), best[src] + 1)
    return best.get(sink, -1)


def topology_stats(genotype: AnyGenotype) -> dict[str, dict[str, Any]]:
    """Cell type -> depth, width and op-kind counts of the cell."""
    out: dict[str, dict[str, Any]] = {}
    for ct, edges in genotype_edges(genotype).items():
        ops = [op for op, _, _ in edges]
        stats: dict[str, Any] = {
            "parameter_free": sum(op in PARAMETER_FREE for op in ops),
            "skip_connect": ops.count("skip_connect"),
            "conv": sum("conv" in op for op in ops),
        }
        sources = set(genotype.input_nodes)
        outputs = genotype.output_nodes(ct)
        if genotype.keeps_every_edge:  # NB201: `none` edges cut the cell
            live = [e for e in edges if e[0] != "none"]
            depth = max(_longest_path(live, sources, node) for node in outputs)
            stats.update(
                depth=max(depth, 0), connected=depth > 0, none=ops.count("none"), edges=len(live)
            )
        else:  # DARTS: two inputs per node, from the two cell inputs or earlier nodes
            stats.update(
                depth=max(_longest_path(edges, sources, node) for node in outputs),
                from_inputs=sum(src in sources for _, src, _ in edges),
                from_c_k2=sum(src == 0 for _, src, _ in edges),
                from_c_k1=sum(src == 1 for _, src, _ in edges),
            )
        out[ct] = stats
    return out


def genotype_distance(a: AnyGenotype, b: AnyGenotype) -> int:
    """Edges (with their op) that one genotype keeps and the other does not: for NB201 the
    number of the 6 edges whose op differs, for DARTS cells the kept (op, input, node)
    triples of ``a`` missing in ``b``, summed over cell types (0 .. 16)."""
    ea, eb = genotype_edges(a), genotype_edges(b)
    if set(ea) != set(eb):
        raise ValueError("cannot compare an NB201 genotype with a DARTS-style one")
    # a cell that keeps every edge (NB201) differs where the ops differ; one that keeps some
    # (DARTS) by the kept triples (the same triples in another order are the same cell)
    return sum(len(Counter(ea[ct]) - Counter(eb[ct])) for ct in ea)


def distance_matrix(genotypes: Sequence[AnyGenotype]) -> np.ndarray:
    """Pairwise ``genotype_distance``."""
    n = len(genotypes)
    out = np.zeros((n, n), dtype=int)
    for i in range(n):
        for j in range(n):
            out[i, j] = genotype_distance(genotypes[i], genotypes[j])
    return out


@cache
def _params(genotype: AnyGenotype, C: int, layers: int, num_classes: int) -> int:
    # torch on first use only: nas.analysis reads run folders and draws without it
    from nas.summary import count_parameters
    from search_spaces.families import family_of

    net, _ = family_of(genotype).network(
        genotype, C=C, layers=layers, num_classes=num_classes, auxiliary=True
    )
    return count_parameters(net)


def param_count(
    genotype: AnyGenotype,
    *,
    C: int | None = None,
    layers: int | None = None,
    num_classes: int = 10,
) -> int:
    """Parameters of the paper's evaluation network for this genotype (auxiliary head
    excluded): ``NetworkCIFAR(36, 10, 20)`` or NB201 ``TinyNetwork(16, 5)``; an NB201 cell at
    the benchmark's size is read from the benchmark when it is at hand."""
    from search_spaces.families import family_of  # torch on first use (see _params)

    paper_C, paper_layers = family_of(genotype).paper_size
    C, layers = C or paper_C, layers or paper_layers
    if is_benchmark_cell(genotype) and (C, layers, num_classes) == (16, 5, 10):
        try:
            return int(default_bench().params(genotype, dataset="cifar10"))
        except (ValueError, OSError):  # no benchmark at hand: count the network
            pass
    return _params(genotype, C, layers, num_classes)


# ------------------------------------------------------------------------------- NAS-Bench-201


def nb201_accuracies(dataset: str = "cifar10", split: str = "test") -> np.ndarray:
    """The 200-epoch mean accuracy (%) of all 15,625 NB201 cells, by benchmark index."""
    bench = default_bench()
    values = np.full(NUM_CELLS, np.nan)
    for index in range(NUM_CELLS):
        try:
            values[index] = bench.query(index, dataset=dataset, split=split)
        except ValueError:  # a cell without this result stays NaN
            continue
    return values


def nb201_position(genotype: AnyGenotype) -> dict[str, Any]:
    """An NB201 cell's benchmark index and, per dataset (test split), its accuracy, rank among
    the 15,625 cells (1 = best) and percentile (100 = best)."""
    if not is_benchmark_cell(genotype):
        raise ValueError("NB201 positions exist only for NB201 genotypes")
    bench = default_bench()
    out: dict[str, Any] = {"index": bench.index(genotype)}
    for dataset, split in NB201_TEST_SPLITS:
        out[f"{dataset}/acc"] = bench.query(genotype, dataset=dataset, split=split)
        out[f"{dataset}/rank"] = bench.rank(genotype, dataset=dataset, split=split)
        out[f"{dataset}/percentile"] = bench.percentile(genotype, dataset=dataset, split=split)
    return out


def plot_nb201_distribution(
    genotypes: Mapping[str, AnyGenotype],
    *,
    dataset: str = "cifar10",
    split: str = "test",
    title: str | None = None,
) -> Figure:
    """Histogram of all 15,625 NB201 cells' accuracies with the given cells marked."""
    values = nb201_accuracies(dataset, split)
    fig = new_figure(8.0, 3.6)
    ax = fig.add_subplot(1, 1, 1)
    finite = values[np.isfinite(values)]
    ax.hist(finite, bins=80, color="#bbbbbb", label=f"all {finite.size:,} cells")
    bench = default_bench()
    colors = ["#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2"]
    for k, (label, g) in enumerate(genotypes.items()):
        if not is_benchmark_cell(g):
            continue
        acc = bench.query(g, dataset=dataset, split=split)
        pct = bench.percentile(g, dataset=dataset, split=split)
        ax.axvline(
            acc,
            color=colors[k % len(colors)],
            linewidth=1.6,
            label=f"{label}: {acc:.2f} (percentile {pct:.1f})",
        )
    ax.set_yscale("log")
    ax.set_xlabel(f"NB201 {dataset} {split} accuracy (%), 200-epoch mean")
    ax.set_ylabel("cells")
    ax.legend(fontsize=7, loc="upper left")
    ax.set_title(title or f"found cells among all NB201 cells ({dataset})", fontsize=10)
    return fig


# ----------------------------------------------------------------------------------- tables


def plot_op_counts(counts: Mapping[str, Mapping[str, int]], *, title: str | None = None) -> Figure:
    """Stacked bars: for each genotype (label), how many of its edges use each op."""
    labels = list(counts)
    ops: list[str] = []
    for c in counts.values():
        ops += [op for op in c if op not in ops]
    fig = new_figure(max(5.0, 0.55 * len(labels) + 3.0), 3.8)
    ax = fig.add_subplot(1, 1, 1)
    bottom = np.zeros(len(labels))
    for op in ops:
        heights = np.array([counts[label].get(op, 0) for label in labels], dtype=float)
        ax.bar(range(len(labels)), heights, bottom=bottom, color=op_color(op), label=op)
        bottom += heights
    ax.set_xticks(range(len(labels)), labels, rotation=35, ha="right", fontsize=8)
    ax.set_ylabel("edges")
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)
    ax.set_title(title or "operations of the found cells", fontsize=10)
    return fig


def plot_distance_matrix(
    labels: Sequence[str], matrix: np.ndarray, *, title: str | None = None
) -> Figure:
    """Heat map of pairwise genotype distances (0: the same cell)."""
    n = len(labels)
    fig = new_figure(max(4.0, 0.5 * n + 2.5), max(3.2, 0.45 * n + 1.8))
    ax = fig.add_subplot(1, 1, 1)
    image = ax.imshow(matrix, cmap="Blues")
    for (r, c), v in np.ndenumerate(matrix):
        ax.text(c, r, str(v), ha="center", va="center", fontsize=8)
    ax.set_xticks(range(n), labels, rotation=35, ha="right", fontsize=8)
    ax.set_yticks(range(n), labels, fontsize=8)
    fig.colorbar(image, ax=ax, shrink=0.8, label="edges that differ")
    ax.set_title(title or "how far apart the found cells are", fontsize=10)
    return fig


def format_table(rows: Sequence[Mapping[str, Any]], *, floatfmt: str = ".2f") -> str:
    """A Markdown table of dicts (columns: the union of their keys, in first-seen order)."""
    columns: list[str] = []
    for row in rows:
        columns += [k for k in row if k not in columns]

    def cell(value: Any) -> str:
        if isinstance(value, float):
            return format(value, floatfmt)
        return str(value).replace("|", "\\|") if value is not None else ""

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(row.get(c)) for c in columns) + " |" for row in rows]
    return "\n".join(lines)


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for a single value)."""
    arr = np.asarray(values, dtype=float)
    if arr.size == 0:
        return float("nan"), float("nan")
    return float(arr.mean()), float(arr.std(ddof=1)) if arr.size > 1 else 0.0


__all__ = [
    "NB201_TEST_SPLITS",
    "PARAMETER_FREE",
    "distance_matrix",
    "format_table",
    "genotype_distance",
    "genotype_edges",
    "mean_std",
    "nb201_accuracies",
    "nb201_position",
    "op_counts",
    "param_count",
    "plot_distance_matrix",
    "plot_nb201_distribution",
    "plot_op_counts",
    "topology_stats",
]
