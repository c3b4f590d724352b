"""Figures that compare several runs (seeds, methods): collapse, sharpening, curves.

Analysis layer, after the pipeline; what the search-dynamics notebook draws. The collapse of
DARTS to parameter-free ``skip_connect`` cells (Zela et al., "Understanding and Robustifying
DARTS", ICLR 2020; Wang et al., DARTS-PT, ICLR 2021) shows as the share of edges whose strongest
op is ``skip_connect`` rising over the epochs; how decided the weights are as their mean
normalised entropy (1: uniform, 0: one-hot).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from nas.analysis.plots import argmax_shares, mean_op_weight
from nas.analysis.run import RunData
from nas.analysis.style import new_figure
from nas.bench import SEARCH_LOG_PREFIX
from search_spaces.families import FAMILIES

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def weight_entropy(weights_TEO: np.ndarray) -> np.ndarray:
    """Mean over edges of the normalised entropy of each edge's weights, per epoch."""
    w = np.clip(np.asarray(weights_TEO, dtype=float), 1e-12, None)
    w = w / w.sum(axis=-1, keepdims=True)
    entropy = -(w * np.log(w)).sum(axis=-1) / np.log(w.shape[-1])
    return np.asarray(entropy.mean(axis=-1))


def main_cell_type(run: RunData) -> str | None:
    """The cell type a collapse shows in: a family's main cell type (``Family.cell_types``:
    ``normal`` in DARTS-style spaces, ``cell`` in NB201), else the first logged."""
    weights = run.arch_weights
    for ct in (f.cell_types[0] for f in FAMILIES.values()):
        if ct in weights:
            return ct
    return next(iter(weights), None)


def skip_connect_trajectory(run: RunData, cell_type: str | None = None) -> dict[str, np.ndarray]:
    """Per epoch: ``epoch`` (1-based), ``argmax_share`` of ``skip_connect``, its mean weight
    relative to uniform ``mean_weight`` (1: 1/ops; NaN where the space has no skip_connect)
    and the weights' ``entropy``."""
    ct = cell_type or main_cell_type(run)
    if ct is None or ct not in run.arch_weights:
        return {}
    w = run.arch_weights[ct]
    space = run.space
    cell = space.cells.get(ct) if space is not None else None
    shares = argmax_shares(w, cell, family=run.family)
    mean = mean_op_weight(w, cell, "skip_connect")
    return {
        "epoch": np.asarray(run.weight_epochs) + 1,
        "argmax_share": shares.get("skip_connect", np.zeros(w.shape[0])),
        # relative to a uniform edge (1 / ops), so that spaces with 5 and 8 ops compare
        "mean_weight": mean * w.shape[-1] if mean is not None else np.full(w.shape[0], np.nan),
        "entropy": weight_entropy(w),
    }


def plot_collapse(runs: Sequence[RunData], *, title: str | None = None) -> Figure:
    """One line per run: share of edges won by ``skip_connect``, its mean weight, and the
    weights' entropy, over the epochs (normal cell / NB201 cell)."""
    from matplotlib.ticker import MaxNLocator  # optional, heavy: on first use

    fig = new_figure(13.0, 3.6)
    axes = fig.subplots(1, 3)
    panels = (
        ("argmax_share", "edges won by skip_connect"),
        ("mean_weight", "mean skip_connect weight (1 = uniform)"),
        ("entropy", "weight entropy (1 = uniform)"),
    )
    for run in runs:
        traj = skip_connect_trajectory(run)
        if not traj:
            continue
        for ax, (key, _) in zip(axes, panels):
            ax.plot(traj["epoch"], traj[key], marker="o", markersize=3, label=run.label)
    for ax, (_, label) in zip(axes, panels):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.ticklabel_format(axis="y", useOffset=False)
        ax.set_xlabel("epoch")
        ax.set_title(label, fontsize=10)
        ax.grid(alpha=0.3)
    axes[0].set_ylim(-0.02, 1.02)
    handles, labels = axes[0].get_legend_handles_labels()
    if handles:
        fig.legend(
            handles,
            labels,
            loc="outside lower center",
            ncol=min(len(labels), 4),
            fontsize=8,
            frameon=False,
        )
    fig.suptitle(title or "collapse to skip_connect at a glance", fontsize=11)
    return fig


def plot_search_curves(
    runs: Sequence[RunData],
    keys: Sequence[str] = ("train_loss", "val_loss", "eval_acc"),
    *,
    title: str | None = None,
) -> Figure:
    """Per-epoch means of the search (losses, accuracies), one line per run and key panel."""
    fig = new_figure(4.3 * len(keys), 3.4)
    axes = fig.subplots(1, len(keys), squeeze=False)[0]
    for run in runs:
        for ax, key in zip(axes, keys):
            xs, ys = run.series(key)
            if xs:
                ax.plot(xs, ys, marker="o", markersize=3, label=run.label)
    from matplotlib.ticker import MaxNLocator  # optional, heavy: on first use

    for ax, key in zip(axes, keys):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(key, fontsize=10)
        ax.set_xlabel("epoch")
        ax.grid(alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    if handles:
        fig.legend(
            handles,
            labels,
            loc="outside lower center",
            ncol=min(len(labels), 4),
            fontsize=8,
            frameon=False,
        )
    fig.suptitle(title or "the supernet over the search", fontsize=11)
    return fig


def plot_nb201_search(
    runs: Sequence[RunData],
    *,
    key: str = f"{SEARCH_LOG_PREFIX}cifar10/test",
    title: str | None = None,
) -> Figure:
    """NB201 accuracy of each run's argmax cell over the epochs (NB201 runs only)."""
    fig = new_figure(7.0, 3.6)
    ax = fig.add_subplot(1, 1, 1)
    for run in runs:
        xs, ys = run.series(key)
        if xs:
            ax.plot(xs, ys, marker="o", markersize=3, label=run.label)
    ax.set_xlabel("epoch")
    ax.set_ylabel(f"{key} (%)")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    ax.set_title(title or f"NB201 accuracy of the argmax cell ({key})", fontsize=10)
    return fig


__all__ = [
    "main_cell_type",
    "plot_collapse",
    "plot_nb201_search",
    "plot_search_curves",
    "skip_connect_trajectory",
    "weight_entropy",
]
