"""Planted bugs in weight entanglement (applied in memory) make its comparison with the recorded
outputs of confopt's ``WeightEntangler`` fail, naming the rows they move."""

from __future__ import annotations

import torch.nn.functional as TF

from experiments.fidelity import common as F
from experiments.fidelity import weight_entangle as script
from nas.supernet import entangle as E
from nas.supernet import mixed_op as M

WHERE = {
    "darts, stride 1 (groups of sep_conv_5x5, dil_conv_5x5)",
    "nb201, stride 1 (groups of nor_conv_3x3)",
    "fbnet_cifar, stride 1 (groups of k5e1, k5e1g2, k5e3, k5e6)",
}


def failed_rows() -> set[str]:
    return {r.quantity for r in F.replay(script).failed}


def test_crop_off_centre(monkeypatch):
    def corner(weight, k):
        K = weight.shape[-1]
        if k == K:
            return weight
        return TF.pad(weight[..., :k, :k], (0, K - k, 0, K - k))  # the bug: the top-left k x k

    monkeypatch.setattr(E, "centre_kernel", corner)
    failed = failed_rows()
    for where in WHERE:
        assert f"{where}: edge output (WeightEntangler.forward)" in failed
        assert f"{where}: gradient of the shared kernels" in failed


def test_group_weighted_again(monkeypatch):
    real = M.group_output

    def weighted(ops, group, x, weights_O, live):
        # the bug: the group's output multiplied by its weights' sum, as if it were one op
        return real(ops, group, x, weights_O, live) * weights_O[list(live)].sum()

    monkeypatch.setattr(M, "group_output", weighted)
    failed = failed_rows()
    for where in WHERE:
        assert f"{where}: edge output (WeightEntangler.forward)" in failed
        assert f"{where}: gradient of the architecture logits" in failed
