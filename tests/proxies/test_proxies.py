"""Zero-cost proxies on tiny networks whose answers are known, and their refusals."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from nas.proxies import PROXIES, ProxyError, Scorable, get_proxy, proxy_inputs, score_many
from nas.proxies.harness import training_images
from nas.proxies.naswot import hamming_kernel, logdet, naswot_kernel
from nas.supernet import build_supernet
from search_spaces.darts import NetworkCIFAR
from search_spaces.nb201 import TinyNetwork

ALL = [
    "grad_norm",
    "snip",
    "grasp",
    "fisher",
    "jacob_cov",
    "synflow",
    "naswot",
    "zen",
    "params",
    "flops",
]


def test_registry_holds_every_proxy():
    assert sorted(PROXIES.names()) == sorted(ALL)


def test_synflow_of_two_linear_layers_is_its_closed_form():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(5, 4, bias=False), nn.Linear(4, 3, bias=False))
    w1, w2 = net[0].weight.detach().double().abs(), net[1].weight.detach().double().abs()
    # R = 1^T |W2| |W1| 1; dR/dW2 = 1 (|W1| 1)^T, dR/dW1 = (|W2|^T 1) 1^T, so each layer's
    # sum |W * dR/dW| is R itself and the score is 2 R
    r = float(torch.ones(3, dtype=torch.float64) @ w2 @ w1 @ torch.ones(5, dtype=torch.float64))
    score = get_proxy("synflow").score(Scorable(net), torch.randn(7, 5), None)
    assert score == pytest.approx(2 * r, rel=1e-12)
    assert net[0].weight.dtype == torch.float32  # the scored network is left as it was
    assert (net[0].weight < 0).any()


@pytest.mark.parametrize("shape", [(5, 3), (16, 8, 6, 6), (4, 3, 40, 40)])
def test_hamming_kernel_equals_the_two_products(shape):
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(0))
    x[0] = x[1]  # two identical codes
    c = (x.reshape(shape[0], -1) > 0).double()
    expected = c @ c.t() + (1 - c) @ (1 - c).t()
    k = hamming_kernel(x)
    assert k.dtype == torch.float64 and torch.equal(k, expected)
    assert k[0, 1] == c.shape[1]  # identical codes agree on every unit


def test_naswot_kernel_of_known_activation_patterns():
    net = nn.Sequential(nn.ReLU(), nn.Linear(3, 2))
    x = torch.tensor([[1.0, -1.0, 2.0], [0.5, 1.0, 3.0], [-1.0, -2.0, -0.5]])
    # codes [1,0,1], [1,1,1], [0,0,0]: K_ij = 3 - Hamming(c_i, c_j)
    expected = [[3, 2, 1], [2, 3, 0], [1, 0, 3]]
    k = naswot_kernel(Scorable(net), x)
    assert k.tolist() == expected
    assert get_proxy("naswot").score(Scorable(net), x, None) == pytest.approx(math.log(12.0))
    assert logdet(k) == pytest.approx(math.log(12.0))


def test_snip_equals_the_mask_gradient_and_sum_of_abs_w_times_g():
    torch.manual_seed(1)
    net = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))
    x, y = torch.randn(8, 6), torch.randint(0, 3, (8,))
    # the reference: masks m = 1 on the weights, W frozen, score = sum |dL/dm|
    m1 = torch.ones_like(net[0].weight, requires_grad=True)
    m2 = torch.ones_like(net[2].weight, requires_grad=True)
    w1, w2 = net[0].weight.detach(), net[2].weight.detach()
    h = F.relu(F.linear(x, w1 * m1, net[0].bias.detach()))
    loss = F.cross_entropy(F.linear(h, w2 * m2, net[2].bias.detach()), y)
    g1, g2 = torch.autograd.grad(loss, [m1, m2])
    mask_score = float(g1.abs().sum() + g2.abs().sum())
    loss = F.cross_entropy(net(x), y)
    gw1, gw2 = torch.autograd.grad(loss, [net[0].weight, net[2].weight])
    wg_score = float((w1 * gw1).abs().sum() + (w2 * gw2).abs().sum())
    score = get_proxy("snip").score(Scorable(net), x, y)
    assert score == pytest.approx(mask_score, rel=1e-6)
    assert score == pytest.approx(wg_score, rel=1e-6)
    assert net[0].weight.grad is None  # no gradients left behind


def test_grad_norm_is_a_sum_of_per_layer_norms():
    torch.manual_seed(2)
    net = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    x, y = torch.randn(5, 4), torch.randint(0, 2, (5,))
    g = torch.autograd.grad(F.cross_entropy(net(x), y), [net[0].weight, net[2].weight])
    expected = float(g[0].norm() + g[1].norm())
    assert get_proxy("grad_norm").score(Scorable(net), x, y) == pytest.approx(expected, rel=1e-6)


def test_fisher_of_a_linear_layer_by_hand():
    torch.manual_seed(3)
    net = nn.Sequential(nn.Linear(4, 3))
    x, y = torch.randn(6, 4), torch.randint(0, 3, (6,))
    out = net(x)
    (d,) = torch.autograd.grad(F.cross_entropy(out, y), [out])
    f_k = (out.detach() * d).pow(2).mean(0).mul(0.5)  # per output unit
    expected = float(f_k.abs().sum()) * 4  # broadcast over weight.shape[1:] = in_features
    assert get_proxy("fisher").score(Scorable(net), x, y) == pytest.approx(expected, rel=1e-6)


def test_grasp_is_minus_w_times_hessian_gradient_product():
    torch.manual_seed(4)
    net = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    x, y = torch.randn(5, 3), torch.randint(0, 2, (5,))
    ws = [net[0].weight, net[2].weight]
    g = [t.detach() for t in torch.autograd.grad(F.cross_entropy(net(x), y), ws)]
    gf = torch.autograd.grad(F.cross_entropy(net(x), y), ws, create_graph=True)
    hg = torch.autograd.grad(sum((a * b).sum() for a, b in zip(g, gf)), ws)
    expected = float(sum((-w.detach() * h).sum() for w, h in zip(ws, hg)))
    assert get_proxy("grasp").score(Scorable(net), x, y) == pytest.approx(expected, rel=1e-5)


def test_jacob_cov_matches_its_definition():
    torch.manual_seed(5)
    net = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 3))
    x, y = torch.randn(5, 4), torch.randint(0, 3, (5,))
    xi = x.clone().requires_grad_(True)
    (j,) = torch.autograd.grad(net(xi).sum(), [xi])
    import numpy as np

    v = np.linalg.eigvals(np.corrcoef(j.numpy())).real
    expected = float(-np.sum(np.log(v + 1e-5) + 1 / (v + 1e-5)))
    assert get_proxy("jacob_cov").score(Scorable(net), x, y) == pytest.approx(expected, rel=1e-6)


def _tiny_inputs(names, seed=0):
    return proxy_inputs(names, seed=seed, batch_size=8)


def test_seeded_scores_reproduce_and_shared_pass_equals_single_proxies():
    x, y = training_images(8, augment=True, seed=3)
    assert torch.equal(x, training_images(8, augment=True, seed=3)[0])
    torch.manual_seed(0)
    net = TinyNetwork(4, 1, 5000, 10)
    inputs = _tiny_inputs(ALL)
    a = score_many(net, ALL, inputs, seed=7)
    b = score_many(net, ALL, inputs, seed=7)
    assert a == b
    for name in ("grad_norm", "snip", "fisher", "jacob_cov", "zen"):
        torch.manual_seed(7)
        single = get_proxy(name).score(Scorable(net), *inputs[name])
        assert single == pytest.approx(a[name], rel=1e-5), name
    assert a["params"] == sum(p.numel() for p in net.parameters())
    assert all(math.isfinite(v) for v in a.values()), a


@pytest.mark.slow
@pytest.mark.parametrize("space", ["nb201", "darts"])
def test_every_proxy_scores_a_supernet_at_given_weights(space):
    torch.manual_seed(0)
    supernet = build_supernet(space, C=4, layers=1 if space == "nb201" else 3, num_classes=10)
    weights = {
        ct: torch.full(shape, 1.0 / shape[1]) for ct, shape in supernet.arch_shapes().items()
    }
    before = {k: v.clone() for k, v in supernet.state_dict().items()}
    scores = score_many(
        supernet, ALL, _tiny_inputs(ALL), weights=weights, options={"zen": {"repeat": 2}}
    )
    assert all(math.isfinite(v) for k, v in scores.items() if k != "jacob_cov"), scores
    after = supernet.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # nothing changed


def test_every_proxy_scores_a_darts_network_and_sees_its_factorized_reduce():
    torch.manual_seed(0)
    net = NetworkCIFAR(4, 10, 3, False, "DARTS_V2")
    scores = score_many(net, ALL, _tiny_inputs(ALL), options={"zen": {"repeat": 2}})
    assert all(math.isfinite(v) for v in scores.values()), scores
    from nas.proxies.gradients import gradient_pass

    x, y = _tiny_inputs(["fisher"])["fisher"]
    p = gradient_pass(Scorable(net), x, y, proxy="fisher", fisher=True)
    fr = net.cells[2].preprocess0  # after a reduction: FactorizedReduce
    i = p.layers.index(fr.conv_1)
    assert p.fisher[i] is not None and p.weight_grads[i] is not None


def _one_line(excinfo):
    msg = str(excinfo.value)
    assert msg and "\n" not in msg
    return msg


def test_refusals_are_one_line():
    x, y = torch.randn(4, 3), torch.randint(0, 2, (4,))
    linear = nn.Sequential(nn.Linear(3, 2))
    with pytest.raises(ProxyError) as e:
        get_proxy("naswot").score(Scorable(linear), x, None)
    assert "ReLU" in _one_line(e)
    with pytest.raises(ProxyError) as e:
        get_proxy("zen").score(Scorable(linear), x, None)
    assert "zen" in _one_line(e)
    with pytest.raises(ProxyError) as e:
        get_proxy("jacob_cov").score(Scorable(linear), x[:1], y[:1])
    assert "at least 2" in _one_line(e)
    with pytest.raises(ProxyError) as e:
        get_proxy("snip").score(Scorable(linear), x, torch.tensor([0, 1, 2, 5]))
    assert "labels reach 5" in _one_line(e)
    with pytest.raises(ProxyError) as e:
        get_proxy("snip").score(Scorable(linear), x, None)
    _one_line(e)
    with pytest.raises(ProxyError) as e:
        get_proxy("grad_norm").score(Scorable(nn.Sequential(nn.ReLU())), x, y)
    assert "Conv2d / Linear" in _one_line(e)
    with pytest.raises(ProxyError) as e:
        Scorable(build_supernet("nb201", C=4, layers=1, num_classes=10))
    assert "weights" in _one_line(e)
    with pytest.raises(ProxyError) as e:
        get_proxy("no_such_proxy")
    assert "expected one of" in _one_line(e)
