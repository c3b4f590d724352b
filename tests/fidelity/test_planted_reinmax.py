"""Planted bugs in ReinMax (applied in memory) make its comparison with the recorded outputs of
the reference package fail, naming the rows they move: the suite catches what it claims to."""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from experiments.fidelity import common as F
from experiments.fidelity import reinmax as script
from nas.strategies.reinmax import ReinMaxSample, _jvp_softmax

SAMPLES = [f"K={k}: sample and pi0 (ReinMax_Auto.forward)" for k in (2, 5, 8)]
NB201 = [
    "NB201: architecture gradient, step 1",
    "NB201: architecture gradients, steps 2-3",
    "NB201: alphas after 3 steps",
]


def failed_rows() -> set[str]:
    return {r.quantity for r in F.replay(script).failed}


def plant(monkeypatch, backward) -> None:
    monkeypatch.setattr(ReinMaxSample, "backward", staticmethod(once_differentiable(backward)))


def test_pi1_without_temperature(monkeypatch):
    def backward(ctx, g, g_p):
        theta, pi0, d = ctx.saved_tensors
        pi1 = 0.5 * (torch.softmax(theta, dim=-1) + d)  # the bug: softmax(theta / tau)
        grad = _jvp_softmax(pi1, 2 * g) + _jvp_softmax(pi0, g_p - 0.5 * g)
        return grad - grad.mean(-1, keepdim=True), None, None

    plant(monkeypatch, backward)
    failed = failed_rows()
    assert "K=5, tau=0.5: gradient (ReinMax_Auto.backward)" in failed
    assert "K=8, tau=4: gradient (ReinMax_Auto.backward)" in failed
    assert "K=2, tau=1: gradient (ReinMax_Auto.backward)" not in failed  # tau = 1: no change
    assert all(q in failed for q in NB201)  # tau of epoch 150 is about 4
    assert not any(q in failed for q in SAMPLES)  # the forward is untouched
    assert not any(q.startswith("setting:") for q in failed)


def test_half_of_the_straight_through_term_dropped(monkeypatch):
    def backward(ctx, g, g_p):
        theta, pi0, d = ctx.saved_tensors
        pi1 = 0.5 * (torch.softmax(theta / ctx.tau, dim=-1) + d)
        grad = _jvp_softmax(pi1, 2 * g) + _jvp_softmax(pi0, g_p - g)  # the bug: g_p - g / 2
        return grad - grad.mean(-1, keepdim=True), None, None

    plant(monkeypatch, backward)
    failed = failed_rows()
    for k, tau in ((2, 1), (5, 0.5), (8, 4)):
        assert f"K={k}, tau={tau:g}: gradient (ReinMax_Auto.backward)" in failed
    assert all(q in failed for q in NB201)
    assert not any(q in failed for q in SAMPLES)
    assert not any(q.startswith("setting:") for q in failed)
