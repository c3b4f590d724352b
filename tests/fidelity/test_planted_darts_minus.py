"""Planted bugs in DARTS- (applied in memory) make its comparison with the recorded outputs of
the reference fail, naming the rows they move: the suite catches what it claims to."""

from __future__ import annotations

import pytest

from experiments.fidelity import common as F
from experiments.fidelity import darts_minus as script
from nas.strategies.components import darts_minus
from nas.strategies.components.darts_minus import AuxiliarySkip

pytestmark = pytest.mark.slow


def failed_rows() -> set[str]:
    return {r.quantity for r in F.replay(script).failed}


def test_beta_decay_one_epoch_ahead(monkeypatch):
    beta_at = darts_minus.aux_beta_at

    def ahead(epoch, **kwargs):
        return beta_at(epoch + 1, **kwargs)  # the bug: stepped at the end of the epoch

    monkeypatch.setattr(darts_minus, "aux_beta_at", ahead)
    failed = failed_rows()
    assert {
        "beta of epochs 0-49 (DecayScheduler.step)",
        "forward, epoch 0 (beta 1)",
        "forward, epoch 10 (beta 0.8)",
        "architecture gradient, epoch 10",
        "weights after 3 steps (auxiliary ops included)",
    } <= failed
    assert not any(q.startswith(("setting:", "genotype (")) for q in failed)


def test_beta_not_given_to_the_edges(monkeypatch):
    def set_beta(self, beta):
        self.beta = beta  # the bug: the mixed ops keep aux_scale 0, the skip is never added

    monkeypatch.setattr(AuxiliarySkip, "_set", set_beta)
    failed = failed_rows()
    assert {
        "forward, epoch 0 (beta 1)",
        "forward, epoch 10 (beta 0.8)",
        "architecture gradient, epoch 10",
        "alphas after 3 steps",
        "weights after 3 steps (auxiliary ops included)",
    } <= failed
    assert "beta of epochs 0-49 (DecayScheduler.step)" not in failed  # the component's beta
    assert not any(q.startswith(("setting:", "genotype (")) for q in failed)
