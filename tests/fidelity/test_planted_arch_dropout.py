"""Planted bugs in architecture dropout (applied in memory) make its comparison with the
recorded outputs of confopt's ``Dropout`` fail, naming the rows they move."""

from __future__ import annotations

import torch

from experiments.fidelity import arch_dropout as script
from experiments.fidelity import common as F
from nas.strategies.components import arch_dropout as A

MASK = "NB201: masked mixing weights (Dropout.apply_mask)"
GRAD = "NB201: their gradient in alpha"
P = "p of every epoch of 50, linear to 0 (new_epoch)"


def failed_rows() -> set[str]:
    return {r.quantity for r in F.replay(script).failed}


def test_kept_weights_not_rescaled(monkeypatch):
    def mask_weights(self, strategy, weights):
        out = {}
        for ct, w in weights.items():
            gen = torch.Generator(w.device).manual_seed(strategy.draw_seed())
            u = torch.rand(w.shape, generator=gen, device=w.device, dtype=w.dtype)
            out[ct] = w * (u >= self.p).to(w.dtype)  # the bug: no 1 / (1 - p)
        return out

    monkeypatch.setattr(A.ArchDropout, "mask_weights", mask_weights)
    assert {MASK, GRAD} <= failed_rows()


def test_the_schedule_an_epoch_late(monkeypatch):
    real = A.dropout_p
    monkeypatch.setattr(A, "dropout_p", lambda e, *args: real(e + 1, *args))
    failed = failed_rows()
    assert P in failed and MASK in failed  # epoch 0's p moves too
