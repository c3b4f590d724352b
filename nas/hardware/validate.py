"""How well a latency table predicts whole networks: nn-Meter's metrics, and a linear fix.

Hardware-aware search (``nas.hardware``). nn-Meter (Zhang et al., MobiSys 2021;
``nn_meter/utils/evaluation.py``) reports RMSE, RMSPE and the share of models predicted within
+-5 / 10 / 15 %; ranks matter as much to a search, so Spearman and Kendall are added. A sum of
per-op latencies misses what the network does between ops (allocations, framework overhead per
call, fused kernels), so where the plain sum is biased ``fit_correction`` fits
``y ~ a * sum + b`` on one half of the sample and it is judged on the other.

``calibrate`` (``nas-profile --calibrate N``) measures a seeded sample of whole networks and
stores such a line in the table, scaled up to over-predict a chosen share of the sample, so
that the search's cost term and the budget selector use the whole network's latency.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from nas.hardware.profiler import Timing, time_module
from nas.hardware.table import LatencyTable, now_iso
from nas.proxies.correlation import kendall, spearman
from search_spaces.families import family_of
from search_spaces.genotype import AnyGenotype
from search_spaces.space import get_space


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


# ------------------------------------------------------------------ whole networks, calibration


def random_genotypes(space: str, n: int, seed: int = 0) -> list[AnyGenotype]:
    """A seeded sample of ``n`` discrete cells of ``space``, drawn by its family
    (``Family.random_genotypes``: NB201 benchmark cells without replacement; DARTS-family
    genotypes with two distinct input edges per node and a non-``none`` op on each, as the
    space's discrete cells have)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 2:
        raise ValueError(f"expected a sample of at least 2 networks, got {n!r}")
    sp = get_space(space)
    return family_of(sp).random_genotypes(sp, n, random.Random(seed))


def measure_network(
    table: LatencyTable,
    genotype: AnyGenotype,
    *,
    device: str | torch.device = "cpu",
    warmup: int = 20,
    repeats: int = 50,
) -> Timing:
    """The whole discrete network of ``genotype`` at the table's size, timed with the table's
    protocol (batch, dtype, memory format; eval, no_grad, median of ``repeats`` calls)."""
    from nas.hardware.export import Logits

    net_cfg, env = table.network, table.environment
    family = family_of(genotype)
    net, spec = family.network(
        genotype,
        C=int(net_cfg["C"]),
        layers=int(net_cfg["layers"]),
        num_classes=int(net_cfg["num_classes"]),
        image_size=int(net_cfg["image_size"]),
    )
    size = int(net_cfg["image_size"])
    return time_module(
        Logits(net, spec.family),
        (int(table.protocol["batch"]), 3, size, size),
        device=torch.device(device),
        dtype=str(env.get("dtype", "float32")),
        channels_last=bool(env.get("channels_last", False)),
        warmup=warmup,
        repeats=repeats,
    )


def calibrate(
    table: LatencyTable,
    n: int,
    *,
    seed: int = 0,
    quantile: float = 1.0,
    device: str | torch.device = "cpu",
    warmup: int = 20,
    repeats: int = 50,
    progress: Callable[[int, int, AnyGenotype, float, float], None] | None = None,
    done: Sequence[float] = (),
) -> dict[str, Any]:
    """Measure ``n`` seeded whole networks and fit the table's latency calibration.
    ``done``: the medians of the first networks, measured by a stopped run with the same
    settings (the networks are seeded: the same ones), taken as they are.

    The least-squares line ``measured ~ a0 * sum + b0`` is scaled by the ``quantile`` of
    measured / fitted over the sample (1: the largest), so that the stored prediction
    ``a * sum + b`` (``a = r * a0``, ``b = r * b0``) over-predicts that share of the networks:
    a budget met by it is met by the measured latency of as many (a safety margin relative to
    the fit, as the errors are relative). Returns the ``calibration`` record of the table,
    with the sample's metrics before and after. Where the least-squares line does not rise or
    predicts a non-positive latency inside the sample, the line through the origin is used."""
    if not 0.5 <= quantile <= 1.0:
        raise ValueError(f"quantile must be in [0.5, 1], got {quantile}")
    from nas.hardware.cost import CostModel

    raw = CostModel.from_table(table, "latency", calibrated=False)
    genotypes = random_genotypes(str(table.network["space"]), n, seed)
    measured, summed = [], []
    for k, g in enumerate(genotypes):
        if k < len(done):
            median = float(done[k])
        else:
            median = measure_network(table, g, device=device, warmup=warmup,
                                     repeats=repeats).median_ms  # fmt: skip
        measured.append(median)
        summed.append(raw.of_genotype(g))
        if progress is not None:
            progress(k, n, g, median, summed[-1])
    cal = fit_calibration(np.array(measured), np.array(summed), quantile)
    cal.update(seed=seed, warmup=warmup, repeats=repeats)
    return cal


def fit_calibration(measured: np.ndarray, summed: np.ndarray, quantile: float = 1.0) -> dict:
    """The calibration record of ``calibrate`` from measured whole-network latencies and the
    table's plain sums of the same networks (also usable on a validation run's records)."""
    if not 0.5 <= quantile <= 1.0:
        raise ValueError(f"quantile must be in [0.5, 1], got {quantile}")
    y, s = np.asarray(measured, float), np.asarray(summed, float)
    a0, b0 = fit_correction(y, s)
    model = "affine"
    if a0 <= 0 or np.any(a0 * s + b0 <= 0):
        # a noisy or tiny sample can fit a line that does not rise or goes below zero; the
        # whole-network latency is then modelled as proportional to the sum (least squares)
        a0, b0, model = float(np.dot(s, y) / np.dot(s, s)), 0.0, "proportional"
    r = float(np.quantile(y / (a0 * s + b0), quantile))
    a, b = r * a0, r * b0
    return {
        "a": a,
        "b_ms": b,
        "fit_a": a0,
        "fit_b_ms": b0,
        "model": model,
        "quantile": quantile,
        "margin": r,
        "n": int(y.size),
        "plain_sum": prediction_metrics(y, s).row(),
        "fit": prediction_metrics(y, a0 * s + b0).row(),
        "calibrated": prediction_metrics(y, a * s + b).row(),
        "share_over_pct": float(np.mean(y > a * s + b + 1e-12) * 100),
        "created": now_iso(),
        "load_average": os.getloadavg()[0],
    }
