"""Planted bugs in DrNAS (applied in memory) make its comparison with the recorded outputs of
the reference fail, naming the rows they move: the suite catches what it claims to."""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional as TF

from experiments.fidelity import common as F
from experiments.fidelity import drnas as script
from nas.strategies.drnas import DrNAS, _DirichletSample

pytestmark = pytest.mark.slow

BEFORE_STAGE_CHANGE = (
    "DARTS space K=6: forward at one Dirichlet sample",
    "DARTS space K=6: architecture gradient",
    "DARTS space K=6: beta after 3 steps",
    "DARTS space K=6: weights after 3 steps",
)
NB201 = (
    "NB201: forward at one Dirichlet sample",
    "NB201: architecture gradient",
    "NB201: beta after 3 steps (joint clip)",
)


def failed_rows() -> set[str]:
    return {r.quantity for r in F.replay(script).failed}


def test_pruned_betas_kept(monkeypatch):
    enter_stage = DrNAS.enter_stage

    def kept(self, stage):
        before = {ct: beta.detach().clone() for ct, beta in self.arch_params.items()}
        enter_stage(self, stage)
        with torch.no_grad():  # the bug: no ``beta.masked_fill_(~new_mask, 0.0)``
            for ct, beta in self.arch_params.items():
                mask = self.supernet.op_mask(ct)
                beta.copy_(torch.where(mask, beta, before[ct]))

    monkeypatch.setattr(DrNAS, "enter_stage", kept)
    failed = failed_rows()
    assert {
        "stage change: beta after pruning",
        "after the stage change (K=4, keep 4): architecture gradient",
        "after the stage change: beta after 2 steps",
        "DARTS space: concentrations at every draw, ours vs asked",
    } <= failed
    assert "stage change: masks (model.pruning(4))" not in failed
    assert not failed & {*BEFORE_STAGE_CHANGE, *NB201}


def test_concentration_relu_instead_of_elu(monkeypatch):
    # the bug: a = relu(beta) + 1 (eq. 2 has elu), equal for beta >= 0 only
    monkeypatch.setattr(DrNAS, "concentrations_of", classmethod(lambda cls, p: TF.relu(p) + 1))
    failed = failed_rows()
    assert {
        *BEFORE_STAGE_CHANGE,
        *NB201,
        "DARTS space: concentrations at every draw, ours vs asked",
        "NB201: concentrations at every draw, ours vs asked",
        "DARTS space, reg_type=kl: architecture gradient",
    } <= failed
    assert not any(q.startswith("setting:") for q in failed)


def test_sample_gradient_not_projected(monkeypatch):
    def unprojected(ctx, grad_output):
        x, concentration = ctx.saved_tensors
        total = concentration.sum(-1, True).expand_as(concentration)
        # the bug: the sample's normalisation (sum_i x_i = 1) left out of the chain rule
        return torch._dirichlet_grad(x, concentration, total) * grad_output, None

    monkeypatch.setattr(_DirichletSample, "backward", staticmethod(unprojected))
    failed = failed_rows()
    assert {
        "DARTS space K=6: architecture gradient",
        "DARTS space K=6: architecture step",
        "NB201: architecture gradient",
    } <= failed
    assert "DARTS space K=6: forward at one Dirichlet sample" not in failed
    assert "NB201: forward at one Dirichlet sample" not in failed


def test_masked_sample_not_renormalised(monkeypatch):
    def unnormalised(self, cell_type, weights_EO):
        return weights_EO * self.supernet.op_mask(cell_type)  # the bug: no ``/ w.sum(-1)``

    monkeypatch.setattr(DrNAS, "apply_mask", unnormalised)
    failed = failed_rows()
    assert {
        "after the stage change (K=4, keep 4): architecture gradient",
        "after the stage change: beta after 2 steps",
        "after the stage change: weights after 2 steps",
    } <= failed
    assert not failed & {
        *BEFORE_STAGE_CHANGE,
        *NB201,
        "stage change: beta after pruning",
        "stage change: weights widened to K=4",
    }
