"""Planted bugs in beta-DARTS (applied in memory) make its comparison with the recorded outputs
of the reference fail, naming the rows they move: the suite catches what it claims to."""

from __future__ import annotations

import pytest
import torch

from experiments.fidelity import beta_darts as script
from experiments.fidelity import common as F
from nas.strategies.components import beta_darts as component


def failed_rows() -> set[str]:
    return {r.quantity for r in F.replay(script).failed}


@pytest.mark.slow
def test_lambda_ramp_one_epoch_ahead(monkeypatch):
    def ahead(epoch: int, ramp_epochs: int, lambda_max: float) -> float:
        return lambda_max * (epoch + 1) / ramp_epochs  # the bug: epoch 0 already regularised

    monkeypatch.setattr(component, "lambda_at", ahead)
    failed = failed_rows()
    for space, epochs in (("NB201", (0, 1, 33, 66, 99)), ("DARTS space", (0, 1, 25, 49))):
        for e in epochs:
            assert f"{space}, epoch {e}: architecture gradient" in failed
    assert "beta_darts_nb201: lambda of epochs 0-99 (architect.py:81)" in failed
    assert "beta_darts_darts_cifar10: lambda of epochs 0-49 (architect.py:81)" in failed
    assert "NB201: forward (softmax mixing)" not in failed
    assert "DARTS space: forward (softmax mixing)" not in failed


def test_beta_decay_summed_over_edges(monkeypatch):
    def summed(alphas):
        # the bug: the log-sum-exp summed over the edges, not averaged (1 / E dropped)
        return torch.cat([torch.logsumexp(a, dim=-1) for a in alphas]).sum()

    monkeypatch.setattr(component, "beta_decay", summed)
    failed = failed_rows()
    for space, epochs in (("NB201", (1, 33, 66, 99)), ("DARTS space", (1, 25, 49))):
        for e in epochs:
            assert f"{space}, epoch {e}: architecture gradient" in failed
    # lambda is 0 at epoch 0 (no term), and the schedule itself is right
    assert "NB201, epoch 0: architecture gradient" not in failed
    assert "DARTS space, epoch 0: architecture gradient" not in failed
    assert not any("lambda of epochs" in q for q in failed)
