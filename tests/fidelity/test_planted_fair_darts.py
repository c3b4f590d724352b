"""Planted bugs in FairDARTS (applied in memory) make its comparison with the recorded outputs of
the reference fail, naming the rows they move: the suite catches what it claims to."""

from __future__ import annotations

import pytest
import torch

from experiments.fidelity import common as F
from experiments.fidelity import fair_darts as script
from nas.selection import threshold as threshold_module
from nas.strategies.components import fair_darts
from nas.strategies.components.fair_darts import FairDARTS

pytestmark = pytest.mark.slow

STEPS = {
    "architecture gradient (CE + 10 L_01)",
    "architecture step",
    "alphas after 3 steps",
    "weights after 3 steps",
}
GENOTYPES = {"genotype (threshold_sparse, 0.85)", "genotype after 3 steps"}


def failed_rows() -> set[str]:
    return {r.quantity for r in F.replay(script).failed}


def no_setting_moves(failed: set[str]) -> bool:
    return not any(q.startswith("setting:") for q in failed)


def test_softmax_over_the_edge(monkeypatch):
    # the bug: the ops of an edge compete for one unit of weight, as in DARTS
    monkeypatch.setattr(FairDARTS, "mixing", lambda self, alpha: torch.softmax(alpha, -1))
    failed = failed_rows()
    assert {"forward (sigmoid mixing)", *STEPS, *GENOTYPES} <= failed
    assert no_setting_moves(failed)


def test_zero_one_loss_in_its_l1_form(monkeypatch):
    def l1(sigmoids):  # the bug: |s - 0.5| where the reference squares it
        return -torch.cat([s.reshape(-1) for s in sigmoids]).sub(0.5).abs().mean()

    monkeypatch.setattr(fair_darts, "zero_one_loss", l1)
    failed = failed_rows()
    assert failed >= STEPS
    assert "forward (sigmoid mixing)" not in failed  # the loss, not the mixing
    assert no_setting_moves(failed)


def test_none_kept_in_the_zero_one_loss(monkeypatch):
    # the bug: the space's 'none' ops stay (the reference's op set has none), so their sigmoids
    # join the zero-one loss's mean
    monkeypatch.setattr(FairDARTS, "prepare_supernet", lambda self, supernet: None)
    failed = failed_rows()
    assert failed >= STEPS
    assert no_setting_moves(failed)


def test_threshold_keeps_the_weakest_inputs(monkeypatch):
    cell_of = threshold_module.threshold_cell

    def weakest(cell, w_EO, mask_EO, threshold, top=2):
        # the bug: each node's candidates ranked the wrong way round (lowest weight first)
        return cell_of(cell, -w_EO, mask_EO, -1.0, top)

    monkeypatch.setattr(threshold_module, "threshold_cell", weakest)
    failed = failed_rows()
    assert failed >= GENOTYPES
    assert not (STEPS & failed)  # the derivation only
    assert no_setting_moves(failed)
