"""The per-weight arrays that ``experiments/fidelity/zero_cost.py`` compares with
SamsungLabs/zero-cost-nas's ``find_measures_arrays``: grasp's ``-W * Hg`` and synflow's
``|W * dR/dW|`` per scored layer, which the scores sum."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from nas.proxies import Scorable, get_proxy
from nas.supernet import build_supernet


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
        nn.Flatten(), nn.Linear(4 * 6 * 6, 5),
    ).double()  # fmt: skip


def test_grasp_per_weight_is_minus_w_times_hg_and_sums_to_the_score():
    net = _net()
    x = torch.randn(6, 3, 6, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    y = torch.tensor([0, 1, 2, 3, 4, 0])
    grasp = get_proxy("grasp")
    arrays = grasp.per_weight(Scorable(net), x, y)  # type: ignore[attr-defined]
    ws = [net[0].weight, net[4].weight]
    g = torch.autograd.grad(F.cross_entropy(net(x), y), ws)
    gf = torch.autograd.grad(F.cross_entropy(net(x), y), ws, create_graph=True)
    hg = torch.autograd.grad(sum((a.detach() * b).sum() for a, b in zip(g, gf)), ws)
    for a, w, h in zip(arrays, ws, hg):
        assert a is not None and a.shape == w.shape
        torch.testing.assert_close(a, -w.detach() * h, rtol=1e-12, atol=0)
    total = sum(float(a.sum()) for a in arrays if a is not None)
    assert grasp.score(Scorable(net), x, y) == pytest.approx(total, rel=1e-12)


def test_synflow_per_weight_is_nonnegative_and_sums_to_the_score():
    net = _net()
    x = torch.zeros(2, 3, 6, 6, dtype=torch.float64)
    synflow = get_proxy("synflow")
    arrays = synflow.per_weight(Scorable(net), x)  # type: ignore[attr-defined]
    assert [a.shape for a in arrays] == [net[0].weight.shape, net[4].weight.shape]
    assert all(bool((a >= 0).all()) for a in arrays)
    total = sum(float(a.sum()) for a in arrays)
    assert synflow.score(Scorable(net), x, None) == pytest.approx(total, rel=1e-12)
    assert (net[0].weight < 0).any()  # scored on a copy: the network keeps its signs


def test_synflow_leaves_the_supernets_bool_buffer_alone():
    # ZC's linearize() takes abs_ of every state-dict entry and fails on a bool buffer; ours
    # takes it of the float ones only, so a supernet (mask_cell) is scored
    torch.manual_seed(0)
    supernet = build_supernet("nb201", C=4, layers=1, num_classes=10)
    assert any(v.dtype == torch.bool for v in supernet.state_dict().values())
    weights = {ct: torch.full(s, 1.0 / s[1]) for ct, s in supernet.arch_shapes().items()}
    arrays = get_proxy("synflow").per_weight(  # type: ignore[attr-defined]
        Scorable(supernet, weights), torch.ones(1, 3, 8, 8)
    )
    assert len(arrays) == len(Scorable(supernet, weights).scored_layers("synflow"))
