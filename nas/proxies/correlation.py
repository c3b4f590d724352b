"""How well zero-cost proxies rank NAS-Bench-201 cells: rank correlations, samples, the report.

Part of ``nas.proxies`` (``nas-proxy``). Abdelfattah et al. (ICLR 2021) score all 15,625 NB201
cells and report the Spearman rho of each proxy against the benchmark's 200-epoch accuracies:
CIFAR-10 read from the ``cifar10-valid`` training (its ``test-accuracy`` = ``ori-test``, the
10k test images; ZC ``nasbench2_pred.py:103-107``), CIFAR-100 and ImageNet16-120 from their
``x-test`` halves. We use exactly those splits, from the embedded table (``nas.bench.NB201``),
and report signed rho (ZC's notebook prints |rho|) and Kendall's tau-b. Both are computed here
with numpy (ties get average ranks; tau-b as scipy's default); NaN scores are left out, as the
reference's ``nan_policy='omit'``. Numbers only: the scatter plots of the report are drawn in
the analysis layer (``nas.analysis.proxy_figures``).
"""

from __future__ import annotations

import numpy as np

from nas.bench.search_log import default_bench

# (label, dataset, split) of the ground truth, as the ZC NB201 script reads it
TARGETS: tuple[tuple[str, str, str], ...] = (
    ("CIFAR-10", "cifar10-valid", "ori-test"),
    ("CIFAR-100", "cifar100", "x-test"),
    ("ImageNet16-120", "ImageNet16-120", "x-test"),
)


def rankdata(a: np.ndarray) -> np.ndarray:
    """Ranks 1..n of ``a``, ties sharing their average rank (scipy's ``rankdata``)."""
    a = np.asarray(a, dtype=np.float64)
    order = np.argsort(a, kind="mergesort")
    sorted_a = a[order]
    starts = np.r_[True, sorted_a[1:] != sorted_a[:-1]]
    group = np.cumsum(starts) - 1
    first = np.flatnonzero(starts)
    counts = np.diff(np.r_[first, len(a)])
    avg = first + (counts + 1) / 2.0
    ranks = np.empty(len(a))
    ranks[order] = avg[group]
    return ranks


def _finite_pairs(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"expected two 1-D arrays of one length, got {x.shape} and {y.shape}")
    keep = np.isfinite(x) & np.isfinite(y)
    return x[keep], y[keep]


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rho: Pearson's r of the (average) ranks; non-finite pairs omitted."""
    x, y = _finite_pairs(x, y)
    if len(x) < 2:
        return float("nan")
    rx, ry = rankdata(x), rankdata(y)
    rx -= rx.mean()
    ry -= ry.mean()
    denom = np.sqrt((rx * rx).sum() * (ry * ry).sum())
    return float((rx * ry).sum() / denom) if denom > 0 else float("nan")


def kendall(x: np.ndarray, y: np.ndarray, *, block: int = 2048) -> float:
    """Kendall's tau-b, (C - D) / sqrt((n0 - n1)(n0 - n2)); non-finite pairs omitted.

    Every pair's signs, block by block: O(n^2) work but vectorised (15,625 cells in seconds)."""
    x, y = _finite_pairs(x, y)
    n = len(x)
    if n < 2:
        return float("nan")
    concordance = 0.0
    untied_x = 0.0
    untied_y = 0.0
    for start in range(0, n, block):
        stop = min(start + block, n)
        sx = np.sign(x[start:stop, None] - x[None, :])
        sy = np.sign(y[start:stop, None] - y[None, :])
        concordance += float((sx * sy).sum())
        untied_x += float(np.abs(sx).sum())
        untied_y += float(np.abs(sy).sum())
    # every unordered pair was counted twice (i, j) and (j, i), with the same sign product
    denom = np.sqrt(untied_x * untied_y)
    return float(concordance / denom) if denom > 0 else float("nan")


def sample_cells(n: int, seed: int, *, total: int = 15625) -> list[int]:
    """``n`` distinct benchmark indices drawn by ``seed`` (all of them, in order, if n = total)."""
    if not 1 <= n <= total:
        raise ValueError(f"sample size must be in 1..{total}, got {n}")
    if n == total:
        return list(range(total))
    rng = np.random.default_rng(seed)
    return [int(i) for i in rng.choice(total, size=n, replace=False)]


def ground_truth(indices: list[int]) -> dict[str, np.ndarray]:
    """The 200-epoch mean accuracies (%) of ``indices`` on each of ``TARGETS``."""
    bench = default_bench()
    return {
        label: np.array(
            [bench.query(i, dataset=ds, split=split, hp="200") for i in indices], dtype=np.float64
        )
        for label, ds, split in TARGETS
    }


def correlation_table(
    scores: dict[str, np.ndarray], truth: dict[str, np.ndarray]
) -> dict[str, dict[str, dict[str, float]]]:
    """proxy -> target label -> {"rho", "tau", "n"} (n: cells with a finite score)."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for proxy, s in scores.items():
        out[proxy] = {}
        for label, acc in truth.items():
            finite = int((np.isfinite(s) & np.isfinite(acc)).sum())
            out[proxy][label] = {
                "rho": spearman(s, acc),
                "tau": kendall(s, acc),
                "n": float(finite),
            }
    return out


# |Spearman rho| over all 15,625 cells, ZC notebook "Table 1";
# zen: computed from NASLib's released scores. No published NB201 figure for naswot, params,
# flops with this protocol.
PUBLISHED_RHO: dict[str, tuple[float, float, float]] = {
    "grad_norm": (0.594, 0.637, 0.578),
    "snip": (0.596, 0.637, 0.578),
    "grasp": (0.514, 0.547, 0.549),
    "fisher": (0.360, 0.385, 0.327),
    "synflow": (0.737, 0.763, 0.751),
    "jacob_cov": (0.731, 0.704, 0.701),
    "zen": (0.355, 0.361, 0.400),
}


def format_markdown(
    table: dict[str, dict[str, dict[str, float]]],
    times: dict[str, float] | None = None,
) -> str:
    """The correlation table in Markdown: rho / tau per target, published |rho|, s per cell."""
    labels = [label for label, _, _ in TARGETS]
    head = "| proxy | n | " + " | ".join(f"{lb} rho / tau" for lb in labels)
    head += " | published rho (C10 / C100 / IN16) | s per cell |"
    lines = [head, "|" + "---|" * (len(labels) + 4)]
    for proxy, row in table.items():
        n = int(min(row[lb]["n"] for lb in labels))
        cells = [f"{row[lb]['rho']:+.3f} / {row[lb]['tau']:+.3f}" for lb in labels]
        pub = PUBLISHED_RHO.get(proxy)
        pub_text = " / ".join(f"{v:.3f}" for v in pub) if pub else "-"
        t = f"{times[proxy]:.3f}" if times and proxy in times else "-"
        lines.append(f"| {proxy} | {n} | " + " | ".join(cells) + f" | {pub_text} | {t} |")
    return "\n".join(lines) + "\n"


__all__ = [
    "PUBLISHED_RHO",
    "TARGETS",
    "correlation_table",
    "format_markdown",
    "ground_truth",
    "kendall",
    "rankdata",
    "sample_cells",
    "spearman",
]
