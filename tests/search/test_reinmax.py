"""ReinMax: the estimator's gradient against the reference's formula (PyPI ``reinmax`` 0.1.0,
``reinmax/reinmax.py:38-46``), its draws, and the strategy's one-hot forward."""

import pytest
import torch
from scipy import stats

from nas.strategies import SearchContext
from nas.strategies.reinmax import ReinMax, reinmax_sample
from nas.supernet import build_supernet


def _J(pi, v):
    return torch.diag(pi) @ v - pi * (pi @ v)


@pytest.mark.parametrize("tau", [0.5, 1.0, 3.0])
def test_gradient_on_three_categories_is_the_formula(tau):
    theta = torch.tensor([0.3, -1.2, 0.8], dtype=torch.float64, requires_grad=True)
    g = torch.tensor([0.7, -0.4, 1.5], dtype=torch.float64)
    g_p = torch.tensor([-0.2, 0.9, 0.1], dtype=torch.float64)
    d, pi0 = reinmax_sample(theta, tau, torch.Generator().manual_seed(0))
    assert d.sum() == 1 and set(d.tolist()) == {0.0, 1.0}
    ((d * g).sum() + (pi0 * g_p).sum()).backward()
    p0 = torch.softmax(theta.detach(), 0)
    p1 = 0.5 * (torch.softmax(theta.detach() / tau, 0) + d)
    expected = _J(p1, 2 * g) + _J(p0, g_p - g / 2)
    expected = expected - expected.mean()
    assert torch.allclose(theta.grad, expected, atol=1e-12)
    # with dL/dpi0 = 0 (the NAS use): J(pi1)(2g) - J(pi0)(g)/2, minus the mean
    theta.grad = None
    d2, _ = reinmax_sample(theta, tau, torch.Generator().manual_seed(0))
    assert torch.equal(d, d2)
    (d2 * g).sum().backward()
    expected = _J(p1, 2 * g) - _J(p0, g) / 2
    assert torch.allclose(theta.grad, expected - expected.mean(), atol=1e-12)


def test_draws_are_distributed_as_the_softmax():
    theta = torch.tensor([[0.5, -0.5, 1.0]]).expand(30000, 3)
    d, _ = reinmax_sample(theta, 1.0, torch.Generator().manual_seed(0))
    counts = d.sum(0)
    expected = torch.softmax(theta[0], 0) * 30000
    assert float(((counts - expected) ** 2 / expected).sum()) < stats.chi2.ppf(0.999, df=2)


def test_strategy_forward_is_one_hot_with_gradients():
    torch.manual_seed(0)
    net = build_supernet("nb201", C=4, layers=1, num_classes=10)
    s = ReinMax()
    s.attach(SearchContext(net, torch.optim.SGD(net.parameters(), lr=0.1), grad_clip=5.0))
    assert all(m.unselected_scalars for m in net.mixed_ops())
    s.begin_step(1)
    w = s.arch_weights(sample=True)["cell"]
    assert torch.equal(w.detach().sum(-1), torch.ones(6)) and set(
        w.detach().flatten().tolist()
    ) <= {0.0, 1.0}
    (w * torch.randn(6, 5)).sum().backward()
    assert bool((s.arch_params["cell"].grad != 0).all())
