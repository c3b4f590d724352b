"""The weight-entanglement benchmark (experiments/benchmarks/weight_entangle.py) measures what it
says on a small batch: the entangled supernet has fewer parameters and keeps less for the
backward than the plain one, in the same step."""

from __future__ import annotations

from experiments.benchmarks import weight_entangle as bench


def test_entangled_step_keeps_less_and_has_fewer_parameters():
    plain = bench.child("proxyless_cifar", False, batch=2, steps=1)
    tied = bench.child("proxyless_cifar", True, batch=2, steps=1)
    assert tied["params"] < plain["params"]
    assert 0 < tied["saved_mb"] < plain["saved_mb"]
    assert tied["step_s"] > 0 and plain["step_s"] > 0
