"""Every strategy of configs/search x every space takes real steps with finite losses and
gradients; each strategy is built from its YAML (its defaults are the ones a run uses)."""

import pytest
import torch

from nas.plugins import PluginError, available, build_plugin
from nas.strategies import SearchContext
from nas.strategies.base import Shards
from nas.supernet import build_supernet
from search_spaces import SPACE_NAMES


def _setup(space, strategy_name, **kwargs):
    torch.manual_seed(0)
    net = build_supernet(space, C=4, layers=1 if space == "nb201" else 3, num_classes=10)
    opt = torch.optim.SGD(net.parameters(), lr=0.025, momentum=0.9, weight_decay=3e-4)
    strategy = build_plugin("search", strategy_name, **kwargs)
    strategy.attach(
        SearchContext(net, opt, grad_clip=5.0), generator=torch.Generator().manual_seed(0)
    )
    return net, strategy


def _batch(n=8):
    return torch.randn(n, 3, 16, 16), torch.randint(0, 10, (n,))


@pytest.mark.parametrize("space", SPACE_NAMES)
@pytest.mark.parametrize("strategy_name", available("search"))
def test_strategy_steps_on_every_space(space, strategy_name):
    net, strategy = _setup(space, strategy_name)
    alphas = strategy.arch_parameters()
    searches_arch = strategy.updates_arch(0)  # RS-WS: no architecture parameters at all
    assert bool(alphas) == searches_arch
    assert all(isinstance(a, torch.nn.Parameter) for a in alphas)
    if searches_arch:
        assert set(strategy.state_dict()) >= {f"arch_params.{ct}" for ct in net.arch_shapes()}
    before = [a.detach().clone() for a in alphas]
    w_before = [p.detach().clone() for p in net.parameters()]
    metrics = strategy.step(_batch(), _batch())
    # a single-level strategy (SNAS) steps alpha on the training batch: no validation metrics
    bilevel = searches_arch and not getattr(strategy, "single_level", False)
    expected = {"train_loss", "train_acc"} | ({"val_loss", "val_acc"} if bilevel else set())
    assert expected <= set(metrics)
    assert all(torch.isfinite(v) for v in metrics.values())
    # every architecture parameter received a finite, non-zero gradient and moved
    for a, b in zip(alphas, before):
        assert a.grad is not None and torch.isfinite(a.grad).all() and a.grad.abs().sum() > 0
        assert not torch.equal(a.detach(), b)
    assert any(not torch.equal(p.detach(), w) for p, w in zip(net.parameters(), w_before))
    # the weights the supernet mixes have the space's shapes and sum to one per edge
    for ct, w in strategy.arch_weights(sample=False).items():
        assert w.shape == net.arch_shapes()[ct]
        assert torch.allclose(w.sum(-1), torch.ones(w.shape[0]))


def test_darts_second_order_steps():
    net, strategy = _setup("darts", "darts", order=2)
    metrics = strategy.step(_batch(), _batch())
    assert all(torch.isfinite(v) for v in metrics.values())
    assert all(a.grad is not None and a.grad.abs().sum() > 0 for a in strategy.arch_parameters())


def test_first_order_arch_step_computes_no_weight_gradients():
    net, strategy = _setup("nb201", "darts")
    strategy.arch_step(_batch(), _batch())
    assert all(p.grad is None for p in net.parameters())


def test_fix_alpha_freezes_the_architecture():
    net, strategy = _setup("darts", "darts", fix_alpha=True)
    before = [a.detach().clone() for a in strategy.arch_parameters()]
    metrics = strategy.step(_batch(), _batch())
    assert "val_loss" not in metrics
    assert all(torch.equal(a.detach(), b) for a, b in zip(strategy.arch_parameters(), before))
    assert not strategy.updates_arch(0)


def test_masked_ops_get_zero_weight_and_edges_renormalise():
    net, strategy = _setup("nb201", "darts")
    mask = torch.ones(6, 5, dtype=torch.bool)
    mask[0, :3] = False
    net.set_op_mask("cell", mask)
    w = strategy.arch_weights(sample=False)["cell"]
    assert torch.all(w[0, :3] == 0) and torch.allclose(w.sum(-1), torch.ones(6))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"order": 3}, "search.order must be 1 or 2, got 3"),
        ({"arch_lr": -1.0}, "search.arch_lr must be positive, got -1.0"),
        ({"arch_betas": [0.5]}, r"search.arch_betas must be two numbers in \[0, 1\)"),
        ({"arch_weight_decay": -0.1}, "search.arch_weight_decay must be >= 0"),
    ],
)
def test_bad_strategy_values(kwargs, message):
    with pytest.raises(ValueError, match=message):
        build_plugin("search", "darts", **kwargs)


def test_unknown_strategy_name():
    with pytest.raises(PluginError, match="search=enas: no such search strategy; .*: darts, "):
        build_plugin("search", "enas")


@pytest.mark.parametrize(
    "strategy_name, kwargs",
    [("darts", {}), ("darts", {"order": 2}), ("drnas", {}), ("drnas", {"reg_type": "kl"})],
)
def test_micro_batches_take_the_step_of_the_whole_batch(strategy_name, kwargs):
    """A global batch in two micro-batches (or on two ranks) is one step on its mean loss.

    The two halves are the same images, so batch norm sees the same statistics in each half as
    in the whole: any difference would be the weighting (a doubled gradient, a regulariser
    counted twice, a second Dirichlet sample)."""
    torch.manual_seed(1)
    x, y = _batch(8)
    vx, vy = _batch(8)
    whole = (torch.cat([x, x]), torch.cat([y, y])), (torch.cat([vx, vx]), torch.cat([vy, vy]))
    halves = Shards(((x, y), (x, y)), 16), Shards(((vx, vy), (vx, vy)), 16)
    results = []
    for train, val in (whole, halves):
        net, strategy = _setup("nb201", strategy_name, **kwargs)
        for step in range(3):
            strategy.begin_step(step)
            metrics = strategy.step(train, val)
        results.append((strategy.arch_parameters(), list(net.parameters()), metrics))
    (arch_a, net_a, m_a), (arch_b, net_b, m_b) = results
    for a, b in zip(arch_a, arch_b):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0)
    for a, b in zip(net_a, net_b):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0)
    for k in m_a:
        torch.testing.assert_close(m_a[k], m_b[k], atol=1e-6, rtol=0)


def test_drnas_samples_follow_the_step_seed():
    _, strategy = _setup("nb201", "drnas")
    strategy.begin_step(7)
    a = strategy.arch_weights(sample=True)["cell"]
    b = strategy.arch_weights(sample=True)["cell"]  # the step's second draw: another sample
    strategy.begin_step(7)
    again = strategy.arch_weights(sample=True)["cell"]
    torch.manual_seed(123)  # the global generator plays no part
    strategy.begin_step(8)
    other = strategy.arch_weights(sample=True)["cell"]
    assert torch.equal(a, again)
    assert not torch.equal(a, b) and not torch.equal(a, other)
