"""Accuracy-latency fronts: the exact NB201 front from the benchmark and a latency table.

Hardware-aware search (``nas.hardware``); the reporting of ProxylessNAS / FBNet (accuracy over
latency, one search per target) made exact where it can be: NAS-Bench-201's 15,625 cells all
have a benchmark accuracy, and the latency table predicts each one's latency, so the best
accuracy reachable under every latency is known and a search's result can be placed against it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nas.bench import BENCHMARK_SPACE, NUM_CELLS
from nas.hardware.cost import CostModel
from search_spaces.families import family_of
from search_spaces.space import get_space


def nb201_costs(model: CostModel) -> np.ndarray:
    """The table cost of every NB201 cell, indexed by benchmark index (the cells of the
    benchmark's space, numbered by its family: ``Family.indexed_genotype``)."""
    if model.space != BENCHMARK_SPACE:
        raise ValueError(f"expected an {BENCHMARK_SPACE} table, got one of {model.space}")
    space = get_space(model.space)
    family = family_of(space)
    per_op = {ct: t.numpy() for ct, t in model.per_op.items()}
    out = np.empty(NUM_CELLS)
    for i in range(NUM_CELLS):
        genotype = family.indexed_genotype(i)
        chosen = [  # (cell type, edge, op) of every kept edge, in the genotype's edge order
            (ct, space.cells[ct].edge(src, dst), op)
            for ct in genotype.cell_types
            for op, src, dst in genotype.edges(ct)
        ]
        out[i] = model.fixed + sum(per_op[ct][e.index, e.ops.index(op)] for ct, e, op in chosen)
    return out


def pareto_front(cost: Sequence[float], accuracy: Sequence[float]) -> list[int]:
    """Indices of the front: sorted by cost (ties: best accuracy first), each point kept if its
    accuracy is strictly above every cheaper point's. NaN accuracies are skipped."""
    order = sorted(
        (i for i in range(len(cost)) if not np.isnan(accuracy[i])),
        key=lambda i: (cost[i], -accuracy[i]),
    )
    front, best = [], -np.inf
    for i in order:
        if accuracy[i] > best:
            front.append(i)
            best = accuracy[i]
    return front


def hypervolume(cost: Sequence[float], accuracy: Sequence[float], front: Sequence[int]) -> float:
    """Area dominated by ``front`` up to the reference (max cost, min accuracy of all points)."""
    ref_c = max(cost)
    ref_a = min(a for a in accuracy if not np.isnan(a))
    area, prev_a = 0.0, ref_a
    for i in front:  # ascending cost, ascending accuracy
        area += (ref_c - cost[i]) * (accuracy[i] - prev_a)
        prev_a = accuracy[i]
    return area


@dataclass(frozen=True)
class BudgetBest:
    budget: float
    index: int
    accuracy: float
    feasible: int  # cells within the budget


def best_within(
    cost: np.ndarray, accuracy: np.ndarray, budget: float
) -> tuple[BudgetBest, np.ndarray]:
    """The most accurate cell whose cost is within ``budget``, and the feasible cells' mask."""
    mask = (cost <= budget) & ~np.isnan(accuracy)
    if not mask.any():
        raise ValueError(f"no NB201 cell costs <= {budget:g}")
    idx = int(np.flatnonzero(mask)[np.argmax(accuracy[mask])])
    return BudgetBest(budget, idx, float(accuracy[idx]), int(mask.sum())), mask


def rank_within(index: int, cost: np.ndarray, accuracy: np.ndarray, budget: float) -> int:
    """1-based rank of cell ``index`` by accuracy among the cells within ``budget``."""
    _, mask = best_within(cost, accuracy, budget)
    return int((accuracy[mask] > accuracy[index]).sum()) + 1


@dataclass
class FoundCell:
    """A searched NB201 cell placed on the front: its target (None: unconstrained), predicted
    (table) and measured latency, benchmark accuracy and label."""

    index: int
    target: float | None
    predicted: float
    accuracy: float
    measured: float | None = None
    label: str = ""


def plot_nb201_front(
    cost: np.ndarray,
    accuracy: np.ndarray,
    found: Sequence[FoundCell],
    *,
    xlabel: str,
    path: str | Path,
) -> Path:
    """All 15,625 cells (accuracy over predicted latency), the exact front, the targets, and
    the found cells: o at their predicted latency, x at their measured one."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    front = pareto_front(cost.tolist(), accuracy.tolist())
    targets = sorted({f.target for f in found if f.target is not None})
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.scatter(cost, accuracy, s=2, c="0.8", label="all 15,625 cells")
    ax.plot(cost[front], accuracy[front], "-", c="k", lw=1.2, label="exact front")
    for k, t in enumerate(targets):
        ax.axvline(t, ls="--", c=f"C{k}", lw=0.8)
    for f in found:
        color = "C9" if f.target is None else f"C{targets.index(f.target)}"
        label = "unconstrained" if f.target is None else f"T = {f.target:g} ms"
        ax.scatter([f.predicted], [f.accuracy], c=color, marker="o", s=30, label=label)
        if f.measured is not None:
            ax.scatter([f.measured], [f.accuracy], c=color, marker="x", s=30)
    handles, labels = ax.get_legend_handles_labels()
    seen = dict(zip(labels, handles))
    ax.legend(seen.values(), seen.keys(), fontsize=7, loc="lower right")
    ax.set_xlabel(xlabel, fontsize=8)
    ax.set_ylabel("NB201 CIFAR-10 test accuracy (%)")
    ax.set_ylim(max(80.0, float(np.nanmin(accuracy[front]))) - 1, 95)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path
