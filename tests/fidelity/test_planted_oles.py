"""Planted bugs in operation-level early stopping (applied in memory) make its comparison with
the recorded scores and decisions of confopt's ``update_gradient_matching_scores`` fail."""

from __future__ import annotations

import pytest
import torch

from experiments.fidelity import common as F
from experiments.fidelity import oles as script
from nas.strategies.components import oles as module
from nas.strategies.components.oles import OLES

pytestmark = pytest.mark.slow

SETTING = "frequency 2, threshold 0.55"
SCORES = f"{SETTING}: each op's score at each step (running_sim.val)"
FROZEN = f"{SETTING}: frozen ops after each step (freeze)"
WEIGHTS = f"{SETTING}: weights after {script.STEPS} steps"


def failed_rows() -> set[str]:
    return {r.quantity for r in F.replay(script).failed}


def test_the_window_mean_over_all_its_scores(monkeypatch):
    """The window's sum divided by its frequency + 1 scores, where confopt divides by
    ``frequency``."""
    real = OLES.update

    def update(self, key, score):
        if self._count.get(key, 0) != self.frequency:
            return real(self, key, score)
        before = self.threshold
        self.threshold = before * (self.frequency + 1) / self.frequency  # sum / (f + 1) < t
        try:
            return real(self, key, score)
        finally:
            self.threshold = before

    monkeypatch.setattr(OLES, "update", update)
    failed = failed_rows()
    assert FROZEN in failed and WEIGHTS in failed


def test_the_papers_cosine_in_place_of_confopts(monkeypatch):
    """cos(g_val, g_train), where confopt's ``.grad`` holds g_train + g_val."""
    real = module.op_score
    monkeypatch.setattr(
        module, "op_score", lambda grads, kept, accumulated: real(grads, kept, False)
    )
    assert SCORES in failed_rows()


def test_the_cosine_of_whole_tensors(monkeypatch):
    """One cosine of the flattened tensors, where confopt takes it along the first dimension
    and averages."""

    def flat(g, g_train):
        return torch.cosine_similarity(g.reshape(-1), g_train.reshape(-1), dim=0)

    monkeypatch.setattr(module, "tensor_cosine", flat)
    assert SCORES in failed_rows()


def test_frozen_ops_still_trained(monkeypatch):
    """Frozen ops keep their gradient in the weight step."""
    monkeypatch.setattr(OLES, "frozen_weights", lambda self, strategy: [])
    assert WEIGHTS in failed_rows()
