"""SNAS: soft samples, the temperature schedule (over the run's epochs, or the reference's 150),
the single-level joint step, the optimiser and initialisation, the resource penalty."""

from __future__ import annotations

import pytest
import torch
from scipy import stats

from nas.plugins import build_plugin
from nas.strategies import SearchContext
from nas.strategies.snas import op_cost
from nas.supernet import build_supernet


def _attach(space="nb201", epochs=None, **kwargs):
    torch.manual_seed(0)
    net = build_supernet(space, C=4, layers=1 if space == "nb201" else 3, num_classes=10)
    opt = torch.optim.SGD(net.parameters(), lr=0.025, momentum=0.9)
    s = build_plugin("search", "snas", **kwargs)  # configs/search/snas.yaml, as a run
    s.attach(
        SearchContext(net, opt, grad_clip=5.0, epochs=epochs),
        generator=torch.Generator().manual_seed(0),
    )
    return net, s


def _batch(n=8):
    return torch.randn(n, 3, 16, 16), torch.randint(0, 10, (n,))


def test_initialisation_and_the_reference_optimiser():
    _, s = _attach("darts")
    a = torch.cat([p.detach().flatten() for p in s.arch_parameters()])
    assert abs(float(a.mean()) - 1.0) < 0.005 and 0.005 < float(a.std()) < 0.02
    opt = s.arch_optimizer
    assert isinstance(opt, torch.optim.SGD)
    assert opt.param_groups[0]["momentum"] == 0 and opt.param_groups[0]["weight_decay"] == 0
    assert s.arch_grad_clip == 10.0
    _, s = _attach("nb201", arch_optimizer="adam")
    assert isinstance(s.arch_optimizer, torch.optim.Adam)


def test_soft_samples_whose_argmax_follows_the_softmax():
    _, s = _attach("nb201", epochs=4)
    with torch.no_grad():
        s.arch_params["cell"].copy_(torch.tensor([1.0, 0.0, -1.0, 0.5, -2.0]).expand(6, 5))
    counts = torch.zeros(5)
    for seed in range(400):
        s.begin_step(seed)
        w = s.arch_weights(sample=True)["cell"]
        assert torch.allclose(w.sum(-1), torch.ones(6)) and bool((w > 0).all())  # soft
        counts += torch.bincount(w.argmax(-1), minlength=5).float()
    expected = torch.softmax(torch.tensor([1.0, 0.0, -1.0, 0.5, -2.0]), 0) * 2400
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < stats.chi2.ppf(0.999, df=4)


def test_tau_schedule_over_the_run_or_the_reference_150_epochs():
    _, s = _attach("nb201", epochs=4)
    taus = []
    for e in range(4):
        taus.append(s.tau)
        s.on_epoch_end(e)
    # t = e + 1: (1 - t/4) * 0.97 + 0.03
    assert taus == pytest.approx([0.7575, 0.515, 0.2725, 0.03])
    _, s = _attach("nb201", epochs=4, schedule_epochs=150)
    assert s.tau == pytest.approx((1 - 1 / 150) * 0.97 + 0.03)


def test_joint_step_uses_the_training_batch_only():
    net, s = _attach("nb201", epochs=2)
    alphas = [a.detach().clone() for a in s.arch_parameters()]
    weights = [p.detach().clone() for p in net.parameters()]
    s.begin_step(0)
    metrics = s.step(_batch(), None)  # the architecture batch is never read
    assert set(metrics) == {"train_loss", "train_acc"}
    assert all(not torch.equal(a, b) for a, b in zip(s.arch_parameters(), alphas))
    assert any(not torch.equal(p, w) for p, w in zip(net.parameters(), weights))
    # the same step from the same state and seed is the same (one backward, seeded sample)
    x, y = _batch()
    results = []
    for _ in range(2):
        _, s2 = _attach("nb201", epochs=2)
        s2.begin_step(5)
        s2.step((x, y), None)
        results.append([a.detach().clone() for a in s2.arch_parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*results))


def test_op_costs_follow_the_reference_formulas():
    # SepConv 3x3, C=16, 32x32, stride 1: size 2*16*9 + 32*16, flops size*32^2,
    # mac 32^2 * (7*16 + 16) + size
    size = 2 * 16 * 9 + 32 * 16
    assert op_cost("sep_conv_3x3", 16, 32, 1) == (size, size * 1024, 1024 * 128 + size)
    assert op_cost("max_pool_3x3", 16, 32, 2) == (0, 9 * 256 * 16, 5 * 256 * 16)
    assert op_cost("skip_connect", 16, 32, 1) == (0, 0, 2 * 16 * 1024)
    assert op_cost("none", 16, 32, 2) == (0, 0, 0)
    with pytest.raises(ValueError, match="no cost"):
        op_cost("warp_drive", 16, 32, 1)


@pytest.mark.parametrize("form", ["log", "linear"])
def test_the_resource_penalty_pushes_alpha_away_from_expensive_ops(form):
    net, s = _attach("darts", epochs=2, resource_penalty=form, resource_lambda=1.0)
    with torch.no_grad():
        for a in s.arch_parameters():
            a.fill_(1.0)
    weights = {ct: torch.softmax(a, -1) for ct, a in s.arch_params.items()}
    r = s.penalty(weights)
    assert torch.isfinite(r) and float(r.detach()) > 0
    (grad,) = torch.autograd.grad(r, [s.arch_params["normal"]])
    ops = net.space.cells["normal"].edges[0].ops
    # the penalty grows with the separable convolutions' weight, falls with the free ops'
    assert bool((grad[:, ops.index("sep_conv_5x5")] > 0).all())
    assert bool((grad[:, ops.index("none")] < 0).all())
    s.begin_step(0)
    metrics = s.step(_batch(), None)
    assert "resource_penalty" in metrics and torch.isfinite(metrics["resource_penalty"])


def test_a_hardware_cost_term_is_refused_not_ignored():
    """SNAS's single-level step and RS-WS's weight-only step have no mixing-weight gradient
    to add a cost to: the cost component is refused when added, as the run adds it."""
    from nas.strategies.components.hardware_cost import HardwareCost

    for name in ("snas", "rsws"):
        strategy = build_plugin("search", name)
        with pytest.raises(ValueError, match="hardware cost") as e:
            strategy.add_components([HardwareCost(objective=None)])  # type: ignore[arg-type]
        assert "\n" not in str(e.value) and "mixing weights" in str(e.value)
        assert not strategy.component_list()
