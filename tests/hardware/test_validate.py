"""nn-Meter's metrics on hand-made numbers; the correction recovers a known linear bias."""

import numpy as np
import pytest

from nas.hardware.validate import fit_correction, prediction_metrics


def test_metrics_by_hand():
    y = np.array([10.0, 20.0, 40.0, 80.0])
    p = np.array([11.0, 18.0, 40.0, 100.0])  # +10 %, -10 %, 0 %, +25 %
    m = prediction_metrics(y, p)
    assert m.rmspe == pytest.approx(np.sqrt((0.01 + 0.01 + 0 + 0.0625) / 4) * 100)
    assert m.within == {5: 25.0, 10: 75.0, 15: 75.0}
    assert m.spearman == pytest.approx(1.0) and m.kendall == pytest.approx(1.0)
    assert m.rmse == pytest.approx(np.sqrt((1 + 4 + 0 + 400) / 4))
    with pytest.raises(ValueError, match="positive"):
        prediction_metrics(np.array([1.0, 0.0]), np.array([1.0, 1.0]))


def test_correction_recovers_a_linear_bias():
    rng = np.random.default_rng(0)
    p = rng.uniform(1, 10, 50)
    y = 0.7 * p + 0.4
    a, b = fit_correction(y, p)
    assert (a, b) == (pytest.approx(0.7), pytest.approx(0.4))
    assert prediction_metrics(y, a * p + b).rmspe < 1e-6
