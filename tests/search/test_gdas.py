"""GDAS: the sampler's known answers (D-X-Y/AutoDL-Projects ``search_model_gdas.py:114-129``:
one-hot values, draws distributed as softmax(alpha) for any tau), the H1 hook of the supernet,
the schedule and the order of the steps."""

from __future__ import annotations

import pytest
import torch
from scipy import stats

from nas.strategies import SearchContext
from nas.strategies.gdas import GDAS, gdas_sample
from nas.strategies.sampling import linear_tau
from nas.supernet import build_supernet


def _attach(strategy, space="nb201", epochs=None):
    torch.manual_seed(0)
    net = build_supernet(space, C=4, layers=1 if space == "nb201" else 3, num_classes=10)
    opt = torch.optim.SGD(net.parameters(), lr=0.025, momentum=0.9)
    strategy.attach(
        SearchContext(net, opt, grad_clip=5.0, epochs=epochs),
        generator=torch.Generator().manual_seed(0),
    )
    return net, strategy


def _batch(n=8):
    return torch.randn(n, 3, 16, 16), torch.randint(0, 10, (n,))


@pytest.mark.parametrize("tau", [0.1, 1.0, 10.0])
def test_sample_is_one_hot_with_a_gradient_for_every_alpha(tau):
    alpha = (torch.randn(6, 5, generator=torch.Generator().manual_seed(1))).requires_grad_()
    w, index = gdas_sample(alpha, tau, torch.Generator().manual_seed(2))
    assert torch.equal(w.detach(), torch.nn.functional.one_hot(index, 5).float())
    (w * torch.randn(6, 5, generator=torch.Generator().manual_seed(3))).sum().backward()
    assert alpha.grad is not None and bool((alpha.grad != 0).all())


@pytest.mark.parametrize("tau", [0.1, 1.0, 10.0])
def test_draws_are_distributed_as_the_softmax_of_alpha_for_any_tau(tau):
    alpha = torch.tensor([[1.0, 0.0, -1.0, 0.5, -2.0]])
    n = 20000
    gen = torch.Generator().manual_seed(0)
    counts = torch.zeros(5)
    for _ in range(n // 500):
        _, index = gdas_sample(alpha.expand(500, 5), tau, gen)
        counts += torch.bincount(index, minlength=5).float()
    expected = torch.softmax(alpha[0], 0) * n
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < stats.chi2.ppf(0.999, df=4)
    # and a sampler that ignores alpha is far off
    uniform = torch.full((5,), n / 5)
    assert float(((uniform - expected) ** 2 / expected).sum()) > 100 * stats.chi2.ppf(0.999, 4)


def test_a_non_finite_draw_is_redrawn(monkeypatch):
    import nas.strategies.gdas as gdas_mod

    real = gdas_mod.gumbel
    calls = {"n": 0}

    def first_inf(shape, generator, device):
        calls["n"] += 1
        g = real(shape, generator, device)
        if calls["n"] == 1:
            g[0, 0] = float("inf")
        return g

    monkeypatch.setattr(gdas_mod, "gumbel", first_inf)
    w, _ = gdas_sample(torch.zeros(3, 4), 1.0, torch.Generator().manual_seed(0))
    assert calls["n"] == 2 and bool(torch.isfinite(w).all())


def test_only_the_sampled_op_of_each_edge_runs():
    net, strategy = _attach(GDAS(), "nb201")
    calls: dict[tuple[int, int], int] = {}
    for m_i, mixed in enumerate(net.mixed_ops()):
        for k, op in enumerate(mixed.ops):
            # the op's layers, not the op: an op that starts with a ReLU runs its layers after
            # the cell's shared ReLU (``after_relu``), not its own forward
            for layer in [m for m in op.modules() if not list(m.children())] or [op]:
                layer.register_forward_hook(
                    lambda *_, key=(m_i, k): calls.__setitem__(key, calls.get(key, 0) + 1)
                )
    strategy.begin_step(7)
    with torch.no_grad():
        w = strategy.arch_weights(sample=True)["cell"]
        net(_batch()[0], {"cell": w})
    chosen = w.argmax(-1).tolist()
    names = net.space.cells["cell"].edges[0].ops
    for m_i, mixed in enumerate(net.mixed_ops()):
        edge = m_i % 6
        ran = [k for k in range(len(mixed.ops)) if calls.get((m_i, k))]
        assert ran == ([] if names[chosen[edge]] == "none" else [chosen[edge]])


def test_samples_come_from_the_step_seed():
    _, strategy = _attach(GDAS(), "darts")
    draws = []
    for seed in (3, 3, 4):
        strategy.begin_step(seed)
        w = strategy.arch_weights(sample=True)
        draws.append(torch.cat([w["normal"], w["reduce"]]).argmax(-1))
    assert torch.equal(draws[0], draws[1]) and not torch.equal(draws[0], draws[2])
    # the weight step and the architecture step of one step draw different samples
    strategy.begin_step(3)
    first = strategy.arch_weights(sample=True)["normal"].argmax(-1)
    second = strategy.arch_weights(sample=True)["normal"].argmax(-1)
    assert not torch.equal(first, second)


def test_tau_is_linear_per_epoch_from_tau_max_to_tau_min():
    assert [linear_tau(e, 5, 10.0, 0.1) for e in range(5)] == pytest.approx(
        [10.0, 7.525, 5.05, 2.575, 0.1]
    )
    assert linear_tau(9, 5, 10.0, 0.1) == pytest.approx(
        0.1
    )  # a selector's tuning epochs after the run
    _, strategy = _attach(GDAS(tau_max=4.0, tau_min=1.0), "nb201", epochs=4)
    taus = []
    for e in range(4):
        taus.append(strategy.tau)
        strategy.on_epoch_end(e)
    assert taus == pytest.approx([4.0, 3.0, 2.0, 1.0])
    with pytest.raises(ValueError, match="tau_min"):
        GDAS(tau_max=0.1, tau_min=1.0)


def test_weight_step_comes_before_the_architecture_step(monkeypatch):
    _, strategy = _attach(GDAS(), "nb201")
    order = []
    real_w, real_a = GDAS.weight_step, GDAS.arch_step
    monkeypatch.setattr(GDAS, "weight_step", lambda s, *a: order.append("w") or real_w(s, *a))
    monkeypatch.setattr(GDAS, "arch_step", lambda s, *a: order.append("a") or real_a(s, *a))
    strategy.step(_batch(), _batch())
    assert order == ["w", "a"]


def test_alpha_starts_small():
    _, strategy = _attach(GDAS(), "darts")
    a = torch.cat([p.detach().flatten() for p in strategy.arch_parameters()])
    assert 0 < float(a.abs().max()) < 1e-2


def test_default_scalars_follow_the_reference_per_space():
    net, strategy = _attach(GDAS(), "nb201")
    assert strategy.unselected_scalars and all(m.unselected_scalars for m in net.mixed_ops())
    net, strategy = _attach(GDAS(), "darts")
    assert not strategy.unselected_scalars and not any(
        m.unselected_scalars for m in net.mixed_ops()
    )
    net, strategy = _attach(GDAS(unselected_scalars=True), "darts")
    assert all(m.unselected_scalars for m in net.mixed_ops())


def _one_hot_grads(scalars: bool):
    torch.manual_seed(0)
    net = build_supernet("nb201", C=4, layers=1, num_classes=10)
    net.set_unselected_scalars(scalars)
    # conv_3x3 (index 3) on every edge: every node depends on every edge
    w = torch.nn.functional.one_hot(torch.full((6,), 3), 5).float().requires_grad_()
    x, y = _batch()
    loss = torch.nn.functional.cross_entropy(net(x, {"cell": w}), y)
    (grad,) = torch.autograd.grad(loss, w)
    return loss.detach(), grad


def test_unselected_scalars_give_the_other_ops_a_gradient_and_change_no_value():
    loss_on, grad_on = _one_hot_grads(True)
    loss_off, grad_off = _one_hot_grads(False)
    assert torch.equal(loss_on, loss_off)
    assert torch.equal(grad_on[:, 3], grad_off[:, 3])  # the selected term is the same
    off = [0, 1, 2, 4]
    assert bool((grad_off[:, off] == 0).all())
    assert bool((grad_on[:, off] != 0).all())
    # each unselected weight gets sum dL/d(node): the same for every op of an edge
    assert torch.allclose(grad_on[:, off], grad_on[:, :1].expand(6, 4))
    # edges into the same node (0->2 and 1->2) agree: the gradient is that of the node
    cell = build_supernet("nb201", C=4, layers=1, num_classes=10).space.cells["cell"]
    by_dst: dict[int, list[int]] = {}
    for e in cell.edges:
        by_dst.setdefault(e.dst, []).append(e.index)
    for edges in by_dst.values():
        assert torch.allclose(grad_on[edges, 0], grad_on[edges[0], 0].expand(len(edges)))
