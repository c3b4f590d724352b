"""How well a latency table predicts whole networks: nn-Meter's metrics, and a linear fix.

Hardware-aware search (``nas.hardware``). nn-Meter (Zhang et al., MobiSys 2021;
``nn_meter/utils/evaluation.py``) reports RMSE, RMSPE and the share of models predicted within
+-5 / 10 / 15 %; ranks matter as much to a search, so Spearman and Kendall are added. A sum of
per-op latencies misses what the network does between ops (allocations, framework overhead per
call, fused kernels), so where the plain sum is biased ``fit_correction`` fits
``y ~ a * sum + b`` on one half of the sample and it is judged on the other.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nas.proxies.correlation import kendall, spearman


@dataclass(frozen=True)
class PredictionMetrics:
    n: int
    rmse: float
    rmspe: float  # %
    within: dict[int, float]  # threshold % -> share of models (%)
    spearman: float
    kendall: float
    mean_ratio: float  # mean of predicted / measured

    def row(self) -> dict[str, float]:
        out = {
            "n": self.n,
            "rmse_ms": self.rmse,
            "rmspe_pct": self.rmspe,
            "spearman": self.spearman,
            "kendall": self.kendall,
            "mean_pred_over_measured": self.mean_ratio,
        }
        out.update({f"within_{t}pct": v for t, v in self.within.items()})
        return out


def prediction_metrics(measured: np.ndarray, predicted: np.ndarray) -> PredictionMetrics:
    y, p = np.asarray(measured, float), np.asarray(predicted, float)
    if y.shape != p.shape or y.size < 2 or (y <= 0).any():
        raise ValueError("expected two equal-length arrays of >= 2 positive latencies")
    rel = (y - p) / y
    return PredictionMetrics(
        n=int(y.size),
        rmse=float(np.sqrt(np.mean((y - p) ** 2))),
        rmspe=float(np.sqrt(np.mean(rel**2)) * 100),
        within={t: float(np.mean(np.abs(rel) <= t / 100) * 100) for t in (5, 10, 15)},
        spearman=spearman(p, y),
        kendall=kendall(p, y),
        mean_ratio=float(np.mean(p / y)),
    )


def fit_correction(measured: np.ndarray, predicted: np.ndarray) -> tuple[float, float]:
    """Least-squares ``(a, b)`` of ``measured ~ a * predicted + b``."""
    A = np.stack([np.asarray(predicted, float), np.ones(len(predicted))], 1)
    (a, b), *_ = np.linalg.lstsq(A, np.asarray(measured, float), rcond=None)
    return float(a), float(b)
