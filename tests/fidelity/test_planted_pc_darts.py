"""Planted bugs in PC-DARTS (applied in memory) make its comparison with the recorded outputs of
the reference fail, naming the rows they move: the suite catches what it claims to."""

from __future__ import annotations

import pytest
import torch

from experiments.fidelity import common as F
from experiments.fidelity import pc_darts as script
from nas.strategies.components import pc_darts
from nas.strategies.components.pc_darts import EdgeNormalisation

pytestmark = pytest.mark.slow

STEPS = {
    "architecture gradient (alphas, betas)",
    "architecture step (alphas, betas)",
    "alphas and betas after 3 steps",
    "weights after 3 steps",
}
WARMUP = "architecture steps at epochs 14, 15 (train(): epoch>=15)"


def failed_rows() -> set[str]:
    return {r.quantity for r in F.replay(script).failed}


def test_edge_normalisation_not_installed(monkeypatch):
    prepare = EdgeNormalisation.prepare_supernet

    def forgotten(self, supernet):
        prepare(self, supernet)
        supernet.edge_weights = None  # the bug: no ``supernet.edge_weights = self.edge_weights``

    monkeypatch.setattr(EdgeNormalisation, "prepare_supernet", forgotten)
    failed = failed_rows()
    assert {"forward (partial channels, edge normalisation)", *STEPS} <= failed
    assert WARMUP not in failed
    assert "genotype (Network.genotype)" not in failed  # the betas still weigh the derivation
    assert not any(q.startswith("setting:") for q in failed)


def test_edge_softmax_over_the_whole_cell(monkeypatch):
    # the bug: one softmax over all 14 edges of a cell instead of one per node's inputs
    monkeypatch.setattr(pc_darts, "node_softmax", lambda beta_E, groups: torch.softmax(beta_E, 0))
    failed = failed_rows()
    assert {"forward (partial channels, edge normalisation)", *STEPS} <= failed
    assert WARMUP not in failed
    assert not any(q.startswith("setting:") for q in failed)


def test_warmup_one_epoch_too_long(monkeypatch):
    # the bug: ``epoch > warmup_epochs``, so epoch 15 still takes no architecture step
    monkeypatch.setattr(EdgeNormalisation, "updates_arch", lambda self, e: e > self.warmup_epochs)
    failed = failed_rows()
    assert {WARMUP, *STEPS} <= failed
    assert not failed & {"forward (partial channels, edge normalisation)",
                         "genotype (Network.genotype)"}  # fmt: skip
    assert not any(q.startswith("setting:") for q in failed)
