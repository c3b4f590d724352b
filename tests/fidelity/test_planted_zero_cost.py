"""Planted bugs in the zero-cost proxies (applied in memory), one per reference at least, make
the comparison with the recorded outputs of SamsungLabs/zero-cost-nas, NASWOT and Zen-NAS fail,
naming the rows they move and no others: the suite catches what it claims to."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor

from experiments.fidelity import common as F
from experiments.fidelity import zero_cost as script
from nas.proxies import fisher, naswot, synflow, zen
from nas.proxies.base import Scorable, bn_mode, check_images

NETS = [*script.CELLS, "NB201 supernet", "2-layer conv", "ZC's nasbench2 network, cell A"]
NASWOT_NETS = NETS[:-1]  # ZC's network is compared with ZC only
ZEN_NETS = list(script.CELLS)  # Zen is compared on the TinyNetworks


def failed_rows() -> set[str]:
    return {r.quantity for r in F.replay(script).failed}


def test_synflow_without_abs_of_the_parameters(monkeypatch):
    def per_weight(self, net: Scorable, x: Tensor) -> list[Tensor | None]:
        """``Synflow.per_weight`` with one line lost: the state dict is not made positive."""
        check_images(self.name, x)
        net.scored_layers(self.name)
        work = net.copy()
        model = work.net
        # the bug: `t.abs_()` of every floating-point state-dict entry is missing
        model.double()
        if work.weights is not None:
            work.weights = {k: v.double() for k, v in work.weights.items()}
        layers = work.scored_layers(self.name)
        weights = [layer.weight for layer in layers]
        ones = torch.ones((1, *x.shape[1:]), dtype=torch.float64, device=x.device)
        with bn_mode(model, "none"), torch.enable_grad():
            out = work.logits(ones)
            grads = torch.autograd.grad(out.sum(), weights, allow_unused=True)
        return [None if g is None else (w.detach() * g).abs() for w, g in zip(weights, grads)]

    monkeypatch.setattr(synflow.Synflow, "per_weight", per_weight)
    failed = failed_rows()
    for net in NETS:
        assert f"synflow ({net})" in failed
        assert f"synflow per weight ({net})" in failed
    assert {q for q in failed if "synflow" not in q} == set()


def test_fisher_without_the_fan_in(monkeypatch):
    def from_pass(p) -> float:
        total = 0.0
        for f in p.fisher:
            if f is not None:
                total += float(f.abs().sum())  # the bug: `* prod(weight.shape[1:])` dropped
        return total

    monkeypatch.setattr(fisher.Fisher, "from_pass", staticmethod(from_pass))
    failed = failed_rows()
    assert failed == {f"fisher ({net})" for net in NETS}  # the per-channel rows still pass


@pytest.mark.slow
def test_naswot_kernel_without_the_complement_term(monkeypatch):
    def hamming_kernel(x: Tensor) -> Tensor:
        c = (x.reshape(x.shape[0], -1) > 0).double()
        return c @ c.t()  # the bug: + (1 - c)(1 - c)^T missing (the codes' shared zeros)

    monkeypatch.setattr(naswot, "hamming_kernel", hamming_kernel)
    failed = failed_rows()
    assert failed == {f"naswot{k} ({net})" for net in NASWOT_NETS for k in (" K", "")}


def test_zen_without_the_bn_variance_term(monkeypatch):
    class Math:  # zen.py's `math`, but log sqrt(mean running_var) comes out 0
        log = staticmethod(math.log)

        @staticmethod
        def sqrt(v: float) -> float:
            return 1.0  # the bug: the BN layers' sum of log sqrt(mean running_var) left out

    monkeypatch.setattr(zen, "math", Math)
    failed = failed_rows()
    assert failed == {
        f"zen, {r} repeat(s) ({net})" for net in ZEN_NETS for r in (1, script.ZEN_REPEAT)
    }
