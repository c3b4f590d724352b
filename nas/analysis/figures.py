"""Writing a run's figures into its folder (and TensorBoard): what ``nas-search`` calls at the
end of a search and ``nas-plot`` calls on any finished run or genotype.

Analysis layer, after the pipeline. ``write_run_figures(run_dir)`` reads ``metrics.jsonl``,
``genotype.json`` and ``checkpoints/last.pt`` and writes into ``run_dir/figures/``:

* ``cell_normal.png`` / ``cell_reduce.png`` (DARTS-style spaces) or ``cell.png`` (NB201): the
  selected genotype's cells (graphviz where ``dot`` is installed, else matplotlib);
* ``weights_final.png``: the last epoch's architecture weights, the selected ops boxed;
* ``weights_trajectory_<cell type>.png``: every edge's weights over the epochs;
* ``argmax_ops.png``: the strongest op of every edge per epoch (a skip_connect collapse shows);
* ``nb201_accuracy.png``: NB201 searches, the benchmark accuracy over the epochs;
* ``decisions.png``: runs whose selector logs its decisions (``Selector.decision_event``), the
  decision trace;
* ``concentration.png``: runs whose strategy declares concentrations
  (``SearchStrategy.concentrations_of``), those of the checkpoint's parameters at the end.

A missing artefact only removes the figures that need it; a figure that fails is skipped with
a warning. Nothing here raises except for a ``run_dir`` that is not a folder.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nas.analysis.cells import cell_types, render_cell
from nas.analysis.plots import (
    plot_argmax_ops,
    plot_concentrations,
    plot_decisions,
    plot_nb201_accuracy,
    plot_weight_trajectories,
    plot_weights_heatmap,
)
from nas.analysis.run import RunData, load_run
from nas.analysis.style import save_figure
from search_spaces.families import family_of
from search_spaces.genotype import AnyGenotype, family_of_cell_types

if TYPE_CHECKING:
    from matplotlib.figure import Figure

FIGURES_DIR = "figures"


def cell_figure_name(cell_type: str) -> str:
    """``cell_<type>.png``, or ``cell.png`` for the only cell type of its family (NB201's)."""
    family = family_of(family_of_cell_types([cell_type]))
    return "cell.png" if family.cell_types == (cell_type,) else f"cell_{cell_type}.png"


def write_cell_figures(
    genotype: AnyGenotype,
    out_dir: str | Path,
    *,
    engine: str = "auto",
    fmt: str = "png",
    prefix: str = "",
) -> list[Path]:
    """One diagram per cell type of a genotype (``cell_normal.png``, ``cell_reduce.png`` or
    ``cell.png``) in ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for ct in cell_types(genotype):
        name = prefix + Path(cell_figure_name(ct)).with_suffix(f".{fmt}").name
        path, _ = render_cell(genotype, ct, out / name, engine=engine)
        written.append(path)
    return written


def _save(fig: Figure, path: Path) -> Path:
    save_figure(fig, str(path))
    return path


def run_figures(run: RunData) -> list[tuple[str, Callable[[], Figure]]]:
    """(file stem, figure factory) of every matplotlib figure the run's artefacts allow."""
    space = run.space
    family = run.family
    genotype = run.final_genotype
    weights = run.arch_weights
    epochs = run.weight_epochs
    out: list[tuple[str, Callable[[], Figure]]] = []
    if weights:
        title = f"architecture weights at the end of the search ({run.label})"
        out.append(
            (
                "weights_final",
                lambda: plot_weights_heatmap(
                    run.final_weights, space, genotype=genotype, title=title
                ),
            )
        )
        for ct, w in weights.items():
            cell = space.cells.get(ct) if space is not None else None

            def trajectory(w: Any = w, cell: Any = cell, ct: str = ct) -> Figure:
                return plot_weight_trajectories(
                    w, cell, family=family, epochs=epochs, genotype=genotype, cell_type=ct
                )

            out.append((f"weights_trajectory_{ct}", trajectory))
        out.append(("argmax_ops", lambda: plot_argmax_ops(weights, space, epochs=epochs)))
    if run.nb201_keys:
        out.append(
            (
                "nb201_accuracy",
                lambda: plot_nb201_accuracy(
                    run.epochs, selected=run.genotype, selector=run.selector
                ),
            )
        )
    decisions = run.decisions
    if decisions:
        metric = run.decision_metric
        out.append(("decisions", lambda: plot_decisions(decisions, space, metric=metric)))
    if run.strategy_class is not None:

        def concentration() -> Figure:
            conc = run.concentrations()
            if not conc:
                raise _Missing("no concentrations declared, or no checkpoint")
            return plot_concentrations(conc, space, genotype=genotype)

        out.append(("concentration", concentration))
    return out


class _Missing(Exception):
    """An optional artefact is absent: the figure is skipped without a warning."""


def write_run_figures(
    run_dir: Path,
    tb_writer: Any = None,
    *,
    engine: str = "auto",
    out_dir: Path | None = None,
) -> list[Path]:
    """Write a run's figures into ``run_dir/figures/`` (or ``out_dir``) and return their paths.

    With ``tb_writer`` (a ``torch.utils.tensorboard.SummaryWriter``), each figure is also
    added as an image under ``figures/<name>`` at the run's last step; the writer is flushed,
    not closed. Never raises on a missing optional artefact; a figure that cannot be drawn is
    skipped with a warning."""
    run = load_run(run_dir)
    out_dir = Path(out_dir) if out_dir is not None else run.path / FIGURES_DIR
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    genotype = run.final_genotype
    if genotype is not None:
        try:
            written += write_cell_figures(genotype, out_dir, engine=engine)
        except Exception as e:  # a figure must never fail the search that asked for it
            warnings.warn(f"cell diagrams skipped: {e}", stacklevel=2)
    for stem, factory in run_figures(run):
        try:
            written.append(_save(factory(), out_dir / f"{stem}.png"))
        except _Missing:
            continue
        except Exception as e:
            warnings.warn(f"figure {stem}.png skipped: {type(e).__name__}: {e}", stacklevel=2)
    if tb_writer is not None:
        try:
            add_images_to_tensorboard(tb_writer, written, step=run.last_step)
        except Exception as e:
            warnings.warn(f"figures not added to TensorBoard: {e}", stacklevel=2)
    return written


def add_images_to_tensorboard(tb_writer: Any, paths: list[Path], *, step: int) -> None:
    """Add PNG files to TensorBoard as images ``figures/<stem>`` (RGB, HWC)."""
    from matplotlib.image import imread  # optional, heavy: on first use

    for path in paths:
        if path.suffix.lower() != ".png":
            continue
        image = imread(str(path))
        if image.ndim == 3 and image.shape[2] == 4:
            image = image[:, :, :3]
        formats = "HW" if image.ndim == 2 else "HWC"
        tb_writer.add_image(f"figures/{path.stem}", image, step, dataformats=formats)
    tb_writer.flush()


__all__ = [
    "FIGURES_DIR",
    "add_images_to_tensorboard",
    "cell_figure_name",
    "run_figures",
    "write_cell_figures",
    "write_run_figures",
]
