"""Planted bugs in the skip-connection early stopping (applied in memory) make its comparison
with the recorded decisions of confopt's ``SkipConnectionEarlyStopper`` fail."""

from __future__ import annotations

from experiments.fidelity import common as F
from experiments.fidelity import skip_stop as script
from nas.strategies.components.skip_stop import SkipConnectionStop

DECISION = "decision after each epoch (SkipConnectionEarlyStopper.check_stop)"


def failed_rows() -> set[str]:
    return {r.quantity for r in F.replay(script).failed}


def test_checked_from_min_epochs_itself(monkeypatch):
    """``epoch >= min_epochs`` where confopt checks ``epoch > min_epochs``."""
    real = SkipConnectionStop.stop_reason

    def stop_reason(self, strategy, epoch):
        return real(self, strategy, epoch + 1)

    monkeypatch.setattr(SkipConnectionStop, "stop_reason", stop_reason)
    assert DECISION in failed_rows()


def test_at_least_instead_of_more_than(monkeypatch):
    real = SkipConnectionStop.stop_reason

    def stop_reason(self, strategy, epoch):
        self.max_skip_normal -= 1  # the bug: normal >= max
        try:
            return real(self, strategy, epoch)
        finally:
            self.max_skip_normal += 1

    monkeypatch.setattr(SkipConnectionStop, "stop_reason", stop_reason)
    assert DECISION in failed_rows()
