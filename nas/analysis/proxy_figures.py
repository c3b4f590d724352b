"""The figures of the zero-cost proxy study (``nas-proxy``): a proxy's scores against NB201.

Analysis layer: the scores and the rank correlations come from ``nas.proxies.correlation``
(numbers only); this module draws them, in the shared look of ``nas.analysis.style``.
"""

from __future__ import annotations

import numpy as np

from nas.analysis.style import new_figure, save_figure


def plot_scatter(
    proxy: str,
    scores: np.ndarray,
    truth: dict[str, np.ndarray],
    table: dict[str, dict[str, float]],
    path: str,
) -> None:
    """One figure per proxy: its score against each target's accuracy, rho and tau in titles."""
    fig = new_figure(4.0 * len(truth), 3.4)
    axes = fig.subplots(1, len(truth))
    for ax, (label, acc) in zip(np.atleast_1d(axes), truth.items()):
        keep = np.isfinite(scores) & np.isfinite(acc)
        s = scores[keep]
        # synflow spans dozens of orders of magnitude: plot it on a sign-preserving log scale
        if proxy == "synflow":
            s = np.sign(s) * np.log10(1.0 + np.abs(s))
        ax.scatter(s, acc[keep], s=4, alpha=0.5, color="#1f77b4", linewidths=0)
        r = table[label]
        ax.set_title(f"{label}: rho {r['rho']:+.3f}, tau {r['tau']:+.3f}", fontsize=9)
        ax.set_xlabel(f"{proxy}" + (" (log10)" if proxy == "synflow" else ""), fontsize=8)
        ax.set_ylabel("NB201 accuracy (%)", fontsize=8)
        ax.tick_params(labelsize=7)
    fig.suptitle(f"{proxy} on {int(np.isfinite(scores).sum())} NB201 cells", fontsize=10)
    save_figure(fig, path)


__all__ = ["plot_scatter"]
