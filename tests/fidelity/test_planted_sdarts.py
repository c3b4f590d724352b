"""Planted bugs in SDARTS (applied in memory) make its comparison with the recorded outputs of
the reference fail, naming the rows they move: the suite catches what it claims to."""

from __future__ import annotations

import pytest

from experiments.fidelity import common as F
from experiments.fidelity import sdarts as script
from nas.strategies.components import sdarts

pytestmark = pytest.mark.slow

EPOCHS = f"epochs 0-{script.EPOCHS - 1}"


def failed_rows() -> set[str]:
    return {r.quantity for r in F.replay(script).failed}


def rows(kinds: tuple[str, ...], *quantities: str) -> set[str]:
    return {f"{kind}: {q}, {EPOCHS}" for kind in kinds for q in quantities}


def test_zero_weight_ops_skipped(monkeypatch):
    # the bug: the components leave Supernet.zero_weight_ops_run off, so an op whose perturbed
    # weight the clip made exactly 0 does not run (no zero gradient: weight decay and momentum
    # skip its parameters; ADV's sign step sees no gradient at a zero entry)
    monkeypatch.setattr(sdarts._Perturbation, "prepare_supernet", lambda self, supernet: None)
    failed = failed_rows()
    assert rows(("RS", "ADV"), "weight gradient (clipped, of the weight step)",
                "network (weights, running statistics)") <= failed  # fmt: skip
    assert "forward (softmax mixing)" not in failed
    assert not failed & rows(("RS", "ADV"), "epsilon (train_search.py:170)",
                             "the draws' bounds (-eps, eps)")  # fmt: skip
    assert not any(q.startswith("setting:") for q in failed)


def test_epsilon_schedule_one_epoch_ahead(monkeypatch):
    def ahead(epoch: int, epochs: int, epsilon_min: float, epsilon_max: float) -> float:
        # the bug: eps_e = eps_min + (eps_max - eps_min) * (e + 1) / T (epoch 0 already ramped)
        return epsilon_min + (epsilon_max - epsilon_min) * (epoch + 1) / epochs

    monkeypatch.setattr(sdarts, "epsilon_at", ahead)
    failed = failed_rows()
    assert rows(("RS", "ADV"), "epsilon (train_search.py:170)", "the draws' bounds (-eps, eps)",
                "perturbed weights", "weight gradient (clipped, of the weight step)") <= failed  # fmt: skip
    assert "forward (softmax mixing)" not in failed
    assert not any(q.startswith("setting:") for q in failed)
