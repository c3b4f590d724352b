"""Planted bugs in SNAS (applied in memory) make its comparison with the recorded outputs of
the reference fail, naming the rows they move: the suite catches what it claims to."""

from __future__ import annotations

import pytest

import nas.strategies.snas as snas_module
from experiments.fidelity import common as F
from experiments.fidelity import snas as script
from nas.strategies.snas import SNAS

pytestmark = pytest.mark.slow


def failed_rows() -> set[str]:
    return {r.quantity for r in F.replay(script).failed}


def test_tau_schedule_one_epoch_late(monkeypatch):
    def tau(self):  # the bug: t = e, not e + 1 (the reference steps tau before each epoch)
        span = self.schedule_epochs or self.ctx.epochs
        t = min(self.epoch, span)
        return (1 - t / span) * (self.tau_max - self.tau_min) + self.tau_min

    monkeypatch.setattr(SNAS, "tau", property(tau))
    failed = failed_rows()
    assert "tau of epochs 0-149 (Temp_Scheduler)" in failed
    assert "sample (_get_categ_mask), tau of epoch 20" in failed
    assert "sample in Network.forward, tau of epoch 0" in failed
    assert "architecture gradient of step 1 (CE + lambda R, clip 10)" in failed
    # the op costs and the settings do not depend on tau
    assert "op size/flops/mac, C=8, 16x16, stride 1, 2 (8 ops)" not in failed
    assert not any(q.startswith("setting:") for q in failed)


def test_factorized_reduce_cost_counts_one_conv(monkeypatch):
    op_cost = snas_module.op_cost

    def buggy(op: str, C: int, h: int, stride: int) -> tuple[float, float, float]:
        if op == "skip_connect" and stride == 2:  # the bug: C * (C // 2), one of its two convs
            y = h // 2
            size = 1.0 * C * (C // 2)
            return size, size * y * y, 2.0 * y * y * (4 * C + C // 2) + size
        return op_cost(op, C, h, stride)

    monkeypatch.setattr(snas_module, "op_cost", buggy)  # what the penalty reads
    monkeypatch.setattr(script, "op_cost", buggy)  # what the op-cost row reads
    failed = failed_rows()
    assert "op size/flops/mac, C=8, 16x16, stride 1, 2 (8 ops)" in failed
    assert "lambda * log resource penalty of the sample" in failed
    assert "its lambda R part, mean of steps 1-3 (train()'s log)" in failed
    # the sample and the forward do not read the costs
    assert "sample in Network.forward, tau of epoch 0" not in failed
    assert "forward (C=4, 5 cells, 16x16, batch 4), the same sample" not in failed
    assert "tau of epochs 0-149 (Temp_Scheduler)" not in failed
