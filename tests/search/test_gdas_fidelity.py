"""GDAS's weight-step clip holds what AutoDL's ``alpha.grad`` holds at ``GDAS.py:54``: the
training loss's gradient added to the last architecture step's gradient (Adam leaves it in
``.grad``; ``a_optimizer.zero_grad()`` runs only before the next architecture step). Found by
``experiments/fidelity/gdas.py``: steps 2-3 differed from the reference by 1e-6 before."""

from __future__ import annotations

import torch

from nas.strategies import SearchContext
from nas.strategies.gdas import GDAS
from nas.supernet import build_supernet

CLIP = 0.05  # every step clips


def _setup(joint: bool):
    strategy = GDAS(clip_arch_with_weights=joint)
    torch.manual_seed(0)
    net = build_supernet("nb201", C=4, layers=1, num_classes=10).double()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    strategy.attach(SearchContext(net, opt, grad_clip=CLIP, epochs=2),
                    generator=torch.Generator().manual_seed(0))  # fmt: skip
    return net, strategy


def _batch(seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(8, 3, 16, 16, generator=g, dtype=torch.float64),
            torch.randint(0, 10, (8,), generator=g))  # fmt: skip


def _expected_factor(net, strategy, batch, stale):
    strategy.begin_step(7)
    weights = strategy.arch_weights(sample=True)
    loss, _ = strategy.loss(batch, weights)
    params, alphas = list(net.parameters()), strategy.arch_parameters()
    grads = torch.autograd.grad(loss, params + alphas, allow_unused=True)
    g_w = [g for g in grads[: len(params)] if g is not None]
    g_a = [g + s for g, s in zip(grads[len(params) :], stale)]
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in g_w + g_a]))
    return grads[: len(params)], min(1.0, CLIP / (float(norm) + 1e-6))


def test_the_clip_norm_holds_the_last_architecture_gradient():
    net, strategy = _setup(joint=True)
    strategy.begin_step(0)
    strategy.arch_step(_batch(1), _batch(2))
    stale = [a.grad.detach().clone() for a in strategy.arch_parameters()]
    assert all(bool(s.abs().sum() > 0) for s in stale)
    batch = _batch(3)
    g_w, factor = _expected_factor(net, strategy, batch, stale)
    assert factor < 1
    strategy.begin_step(7)
    strategy.weight_step(batch)
    for p, g in zip(net.parameters(), g_w):
        if g is not None:
            torch.testing.assert_close(p.grad, g * factor, rtol=1e-12, atol=1e-15)
    assert all(a.grad is None for a in strategy.arch_parameters())
    # the hook is gone: a second weight step has no stale gradient left to add
    assert all(not a._backward_hooks for a in strategy.arch_parameters())


def test_without_the_option_the_weights_alone_are_clipped():
    net, strategy = _setup(joint=False)
    strategy.begin_step(0)
    strategy.arch_step(_batch(1), _batch(2))
    batch = _batch(3)
    strategy.begin_step(7)
    weights = strategy.arch_weights(sample=True)
    loss, _ = strategy.loss(batch, weights)
    params = list(net.parameters())
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    g_w = [g for g in grads if g is not None]
    norm = float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in g_w])))
    factor = min(1.0, CLIP / (norm + 1e-6))
    strategy.begin_step(7)
    strategy.weight_step(batch)
    for p, g in zip(params, grads):
        if g is not None:
            torch.testing.assert_close(p.grad, g * factor, rtol=1e-12, atol=1e-15)


def test_a_resumed_run_clips_as_the_uninterrupted_one():
    """The stale architecture gradient is part of the checkpoint: the first weight step after a
    resume clips with it, as the run that was not stopped does."""
    net, strategy = _setup(joint=True)
    strategy.begin_step(0)
    strategy.arch_step(_batch(1), _batch(2))
    state = strategy.checkpoint_state()
    weights_before = {k: v.clone() for k, v in net.state_dict().items()}

    net2, resumed = _setup(joint=True)
    net2.load_state_dict(weights_before)
    resumed.load_checkpoint_state(state)
    for s in (strategy, resumed):
        s.begin_step(7)
        s.weight_step(_batch(3))
    for p, q in zip(net.parameters(), net2.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=0)
