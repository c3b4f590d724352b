"""Second-order DARTS against the exact unrolled hypergradient.

The exact gradient differentiates L_val(w'(alpha), alpha) through the unrolled SGD-momentum
step with autograd (create_graph). DARTS' gradient differs from it only in how the mixed second
derivative -eta * d2L_train / (dalpha dw) . v is computed: by a central finite difference with
step R = 0.01 / ||v|| instead of exactly. That is not exact for three reasons: the O(R^2)
truncation error of the difference, float32 rounding in the difference of two nearby
gradients, and (the largest by far) kinks: moving w by +-R v flips the sign of some ReLU inputs
and the winner of some max-pools, which changes grad_alpha L by a jump that the difference
divides by 2R, while autograd's exact second derivative treats ReLU'' as 0. On a ReLU supernet
that kink term dominates (cosine ~0.3-0.6 here), so the test compares the maths on a smooth copy
of the supernet: S2 space (skip_connect, sep_conv_3x3: no max-pool) with every ReLU swapped for
softplus. There the finite difference agrees with the exact hypergradient to cosine > 0.99.
"""

import torch
from torch.func import functional_call
from torch.nn import functional as F

from nas.strategies import DARTS, SearchContext
from nas.supernet import build_supernet


def _exact_hypergradient(strategy, net, opt, train_batch, val_batch):
    group = opt.param_groups[0]
    eta, mu, wd = group["lr"], group["momentum"], group["weight_decay"]
    names = [n for n, _ in net.named_parameters()]
    params = [p for _, p in net.named_parameters()]
    alphas = strategy.arch_parameters()
    weights = strategy.arch_weights(sample=False)
    loss_train = F.cross_entropy(net(train_batch[0], weights), train_batch[1])
    g = torch.autograd.grad(loss_train, params, create_graph=True, allow_unused=True)
    unrolled = {}
    for n, p, gi in zip(names, params, g):
        m = opt.state[p]["momentum_buffer"] * mu if p in opt.state else torch.zeros_like(p)
        gi = torch.zeros_like(p) if gi is None else gi
        unrolled[n] = p - eta * (m + gi + wd * p)
    logits = functional_call(net, unrolled, (val_batch[0], strategy.arch_weights(sample=False)))
    loss_val = F.cross_entropy(logits, val_batch[1])
    return torch.autograd.grad(loss_val, alphas)


def _smooth(net):
    """Swap every ReLU for a softplus, so the loss is twice differentiable everywhere (each op
    applies its own activation module: no ReLU shared per state, which the swap cannot reach)."""
    for mixed in net.mixed_ops():
        mixed.share_relu = False
    for module in list(net.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, torch.nn.ReLU):
                setattr(module, name, torch.nn.Softplus(beta=4))
    return net


def test_second_order_matches_exact_unrolled_gradient():
    torch.manual_seed(0)
    net = _smooth(build_supernet("s2", C=4, layers=3, num_classes=10))
    assert not any(isinstance(m, torch.nn.ReLU) for m in net.modules())
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, weight_decay=3e-4)
    strategy = DARTS(order=2, init_scale=0.5)
    strategy.attach(SearchContext(net, opt, grad_clip=5.0))
    train_batch = (torch.randn(8, 3, 8, 8), torch.randint(0, 10, (8,)))
    val_batch = (torch.randn(8, 3, 8, 8), torch.randint(0, 10, (8,)))
    strategy.weight_step(train_batch)  # a real momentum buffer enters the unrolled step
    before = [p.detach().clone() for p in net.parameters()]

    approx, _ = strategy.second_order_grads(train_batch, val_batch)
    exact = _exact_hypergradient(strategy, net, opt, train_batch, val_batch)

    a = torch.cat([g.flatten() for g in approx])
    e = torch.cat([g.flatten() for g in exact])
    cos = torch.nn.functional.cosine_similarity(a, e, dim=0)
    assert cos > 0.99, cos
    assert (a - e).norm() / e.norm() < 0.15
    # the supernet's weights are restored exactly after the unrolled computation
    assert all(torch.equal(b, p) for b, p in zip(before, net.parameters()))
    # and the hessian term matters: the first-order gradient is measurably different
    strategy.order = 1
    first = _first_order(strategy, val_batch)
    assert torch.nn.functional.cosine_similarity(first, e, dim=0) < cos


def _first_order(strategy, val_batch):
    loss, _ = strategy.loss(val_batch, strategy.arch_weights(sample=False))
    grads = torch.autograd.grad(loss, strategy.arch_parameters())
    return torch.cat([g.flatten() for g in grads])
