"""Planted bugs in GDAS (applied in memory) make its comparison with the recorded outputs of
the reference fail, naming the rows they move: the suite catches what it claims to."""

from __future__ import annotations

import torch

import nas.strategies.gdas as gdas_module
from experiments.fidelity import common as F
from experiments.fidelity import gdas as script
from nas.strategies.gdas import GDAS
from nas.strategies.sampling import SamplingStrategy, linear_tau

SPACES = ("NB201", "DARTS space")


def failed_rows() -> set[str]:
    return {r.quantity for r in F.replay(script).failed}


def test_tau_schedule_one_epoch_ahead(monkeypatch):
    def tau(self):  # the bug: epoch + 1, as if the epochs counted from 1
        return linear_tau(self.epoch + 1, self.ctx.epochs, self.tau_max, self.tau_min)

    monkeypatch.setattr(GDAS, "tau", property(tau))
    failed = failed_rows()
    assert "tau of epochs 0-249 (GDAS.py:237-239)" in failed
    for tag in SPACES:  # tau scales the straight-through gradient
        assert f"{tag}: architecture gradient, step 1" in failed
        # the hard sample's value is one-hot whatever tau: the forward does not move
        assert f"{tag}: forward (hard sample, tau of epoch 40)" not in failed
    assert "weight lr of epochs 0-249 (CosineAnnealingLR)" not in failed
    assert not any(q.startswith("setting:") for q in failed)


def test_tau_divides_the_noise_only(monkeypatch):
    def gdas_sample(alpha, tau, generator):
        log_p = torch.log_softmax(alpha, dim=-1)
        g = gdas_module.gumbel(alpha.shape, generator, alpha.device)
        h = torch.softmax(log_p + g / tau, dim=-1)  # the bug: (log_p + g) / tau
        index = h.detach().argmax(-1, keepdim=True)
        one_hot = torch.zeros_like(h).scatter_(-1, index, 1.0)
        return one_hot - h.detach() + h, index.squeeze(-1)

    monkeypatch.setattr(gdas_module, "gdas_sample", gdas_sample)
    failed = failed_rows()
    for tag in SPACES:  # the draws are no longer Cat(softmax(alpha)): other ops are sampled
        assert f"{tag}: forward (hard sample, tau of epoch 40)" in failed
        assert f"{tag}: architecture gradient, step 1" in failed
    assert "tau of epochs 0-249 (GDAS.py:237-239)" not in failed
    assert not any(q.startswith("setting:") for q in failed)


def test_stale_architecture_gradient_left_out_of_the_clip(monkeypatch):
    # the bug: the weight step's clip over the weights and alpha (clip_arch_with_weights) sees
    # only this step's gradient of alpha, not the last architecture step's that the
    # reference's alpha.grad still holds (GDAS.py:50-54)
    monkeypatch.setattr(GDAS, "weight_step", SamplingStrategy.weight_step)
    failed = failed_rows()
    for tag in SPACES:  # the first step has no earlier architecture gradient: it still passes
        assert f"{tag}: architecture gradient, step 1" not in failed
        assert f"{tag}: architecture gradients, steps 2-3" in failed
        assert f"{tag}: weights after 3 steps" in failed
        assert f"{tag}: forward (hard sample, tau of epoch 40)" not in failed
