"""nas.analysis: looking at searches after (or while) they run: cell diagrams, weight plots,
a strategy's concentrations, a selector's decision trace, NB201 curves, genotype statistics.

Analysis layer, after the pipeline (``search_spaces -> nas/supernet -> nas/strategies ->
nas/selection -> genotype -> nas/training -> nas/bench``); it only reads run folders and
genotypes. ``write_run_figures(run_dir, tb_writer)`` is what ``nas-search`` calls at the end of a
search; ``nas-plot`` renders the same figures for any finished run or genotype; the notebooks in
``notebooks/`` build on ``load_runs`` and the statistics of ``nas.analysis.stats``.
"""

from nas.analysis.cells import (
    cell_graph,
    cell_types,
    graphviz_available,
    plot_cell,
    plot_cells,
    render_cell,
    to_dot,
)
from nas.analysis.compare import (
    plot_collapse,
    plot_nb201_search,
    plot_search_curves,
    skip_connect_trajectory,
    weight_entropy,
)
from nas.analysis.figures import write_cell_figures, write_run_figures
from nas.analysis.plots import (
    argmax_shares,
    plot_argmax_ops,
    plot_concentrations,
    plot_decisions,
    plot_nb201_accuracy,
    plot_weight_trajectories,
    plot_weights_heatmap,
)
from nas.analysis.run import RunData, find_runs, load_run, load_runs
from nas.analysis.stats import (
    distance_matrix,
    format_table,
    genotype_distance,
    mean_std,
    nb201_accuracies,
    nb201_position,
    op_counts,
    param_count,
    plot_distance_matrix,
    plot_nb201_distribution,
    plot_op_counts,
    topology_stats,
)

__all__ = [
    "RunData",
    "argmax_shares",
    "cell_graph",
    "cell_types",
    "distance_matrix",
    "find_runs",
    "format_table",
    "genotype_distance",
    "graphviz_available",
    "load_run",
    "load_runs",
    "mean_std",
    "nb201_accuracies",
    "nb201_position",
    "op_counts",
    "param_count",
    "plot_argmax_ops",
    "plot_cell",
    "plot_cells",
    "plot_collapse",
    "plot_concentrations",
    "plot_decisions",
    "plot_distance_matrix",
    "plot_nb201_accuracy",
    "plot_nb201_distribution",
    "plot_nb201_search",
    "plot_op_counts",
    "plot_search_curves",
    "plot_weight_trajectories",
    "plot_weights_heatmap",
    "render_cell",
    "skip_connect_trajectory",
    "to_dot",
    "topology_stats",
    "weight_entropy",
    "write_cell_figures",
    "write_run_figures",
]
