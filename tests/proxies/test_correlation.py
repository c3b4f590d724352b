"""Rank correlations (numpy) against values worked out by hand, and the NB201 sample."""

from __future__ import annotations

import math

import numpy as np
import pytest

from nas.proxies.correlation import kendall, rankdata, sample_cells, spearman


def test_rankdata_averages_ties():
    assert rankdata(np.array([5.0, 6, 7, 8, 7])).tolist() == [1, 2, 3.5, 5, 3.5]


def test_spearman_and_kendall_tau_b_with_ties():
    x = np.array([1.0, 2, 3, 4, 5])
    y = np.array([5.0, 6, 7, 8, 7])
    # ranks of y: 1, 2, 3.5, 5, 3.5 -> rho = 8 / sqrt(10 * 9.5)
    assert spearman(x, y) == pytest.approx(8 / math.sqrt(95))
    # 8 concordant, 1 discordant, one pair tied in y: (8 - 1) / sqrt(10 * 9)
    assert kendall(x, y) == pytest.approx(7 / math.sqrt(90))
    assert kendall(x, y, block=2) == pytest.approx(7 / math.sqrt(90))
    assert spearman(x, -x) == pytest.approx(-1.0) and kendall(x, -x) == pytest.approx(-1.0)


def test_non_finite_scores_are_omitted():
    x = np.array([1.0, np.nan, 3, 4, np.inf])
    y = np.array([1.0, 9, 2, 3, 0])
    assert spearman(x, y) == pytest.approx(1.0)
    assert kendall(x, y) == pytest.approx(1.0)


def test_sample_is_seeded_and_distinct():
    a = sample_cells(100, 0)
    assert a == sample_cells(100, 0) and len(set(a)) == 100 and a != sample_cells(100, 1)
    assert sample_cells(15625, 3) == list(range(15625))
    with pytest.raises(ValueError, match="sample size must be in 1..15625"):
        sample_cells(0, 0)
