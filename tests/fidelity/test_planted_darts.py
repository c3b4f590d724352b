"""Planted bugs in DARTS (applied in memory) make its comparison with the recorded outputs of
the reference fail, naming the rows they move: the suite catches what it claims to."""

from __future__ import annotations

import pytest

from experiments.fidelity import common as F
from experiments.fidelity import darts as script
from nas.strategies.darts import DARTS

pytestmark = pytest.mark.slow


def failed_rows() -> set[str]:
    return {r.quantity for r in F.replay(script).failed}


def test_finite_difference_radius_doubled(monkeypatch):
    init = DARTS.__init__

    def doubled(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.unrolled_r *= 2  # the bug: R = 0.02 / ||v|| instead of 0.01 / ||v||

    monkeypatch.setattr(DARTS, "__init__", doubled)
    failed = failed_rows()
    assert "order 2: architecture gradient" in failed
    assert not any(q.startswith("order 1") for q in failed)
