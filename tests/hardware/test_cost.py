"""The expected-cost objective: closed-form gradients, every loss form through the strategies'
own chain rule (DARTS first and second order, DrNAS's Dirichlet samples)."""

import math

import pytest
import torch

from nas.hardware.cost import CostModel, CostObjective
from nas.plugins import build_plugin
from nas.strategies import SearchContext
from nas.strategies.base import Shards
from nas.strategies.components.hardware_cost import HardwareCost
from nas.supernet import build_supernet


def _model(shapes, seed=0):
    g = torch.Generator().manual_seed(seed)
    per_op = {ct: torch.rand(*s, generator=g, dtype=torch.float64) * 3 for ct, s in shapes.items()}
    return CostModel("latency", "nb201", 2.0, per_op)


def test_expected_latency_gradient_equals_its_closed_form():
    """dE/dalpha_o = p_o (l_o - sum_o' p_o' l_o') under a softmax (ProxylessNAS eq. 4)."""
    model = _model({"cell": (6, 5)})
    alpha = torch.randn(6, 5, dtype=torch.float64, requires_grad=True)
    p = torch.softmax(alpha, -1)
    E = model.expected({"cell": p})
    (grad,) = torch.autograd.grad(E, alpha)
    l_EO = model.per_op["cell"]
    closed = p * (l_EO - (p * l_EO).sum(-1, keepdim=True))
    assert torch.allclose(grad, closed.detach(), atol=1e-12)
    assert math.isclose(E.detach().item(), 2.0 + float((p * l_EO).sum().detach()), rel_tol=1e-12)


@pytest.mark.parametrize(
    "form,kw",
    [
        ("add_linear", {"reg_lambda": 0.1}),
        ("mul_log", {"alpha": 0.2, "beta": 0.3}),
        ("fbnet_pow", {"alpha": 0.2, "beta": 0.6}),
        ("fbnet_logpow", {"alpha": 0.2, "beta": 0.6}),
        ("nni_add", {"scale": 0.5, "nonlinear": "positive"}),
        ("nni_mul", {"scale": 0.5, "nonlinear": "absolute"}),
    ],
)
def test_loss_forms_gradients_in_closed_form(form, kw):
    """d loss / d alpha = a(E) dCE/dalpha + (CE a'(E) + c'(E)) dE/dalpha for each form."""
    model = _model({"cell": (6, 5)}, seed=1)
    T = 5.0
    obj = CostObjective(model, form=form, target=T, **kw)
    alpha = torch.randn(6, 5, dtype=torch.float64, requires_grad=True)
    p = torch.softmax(alpha, -1)
    ce = (p * torch.arange(5.0, dtype=torch.float64)).sum() / 7 + 1.3  # some CE(alpha)
    loss = obj.loss(ce, {"cell": p})
    (grad,) = torch.autograd.grad(loss, alpha)
    with torch.no_grad():
        E = float(model.expected({"cell": p}))
        l_EO = model.per_op["cell"]
        dE = p * (l_EO - (p * l_EO).sum(-1, keepdim=True))
        r = torch.arange(5.0, dtype=torch.float64) / 7
        dce = p * (r - (p * r).sum(-1, keepdim=True))
        c = float(ce)
        n = E / T - 1
        a, da, dc = {
            "add_linear": (1.0, 0.0, kw.get("reg_lambda", 0) / T),
            "mul_log": (
                0.2 * (math.log(E) / math.log(T)) ** 0.3,
                0.2 * 0.3 * (math.log(E) / math.log(T)) ** -0.7 / (E * math.log(T)),
                0.0,
            ),
            "fbnet_pow": (0.2 * math.log(E) ** 0.6, 0.2 * 0.6 * math.log(E) ** -0.4 / E, 0.0),
            "fbnet_logpow": (0.2 * 0.6 * math.log(E), 0.2 * 0.6 / E, 0.0),
            "nni_add": (1.0, 0.0, 0.5 * (1.0 if n > 0 else 0.0) / T),
            "nni_mul": (
                (1 + abs(n)) ** 0.5,
                0.5 * (1 + abs(n)) ** -0.5 * math.copysign(1.0, n) / T,
                0.0,
            ),
        }[form]
        closed = a * dce + (c * da + dc) * dE
    assert torch.allclose(grad, closed, atol=1e-10), form


def _setup(space, name, objective=None, **kwargs):
    """A strategy on a tiny supernet; ``objective(net)`` (if given) is composed as the hardware
    cost component, through ``add_components`` as the search run composes ``cost=``."""
    torch.manual_seed(0)
    net = build_supernet(space, C=4, layers=1 if space == "nb201" else 3, num_classes=10)
    opt = torch.optim.SGD(net.parameters(), lr=0.025, momentum=0.9, weight_decay=3e-4)
    strategy = build_plugin("search", name, **kwargs)
    if objective is not None:
        strategy.add_components([HardwareCost(objective=objective(net))])
    strategy.attach(
        SearchContext(net, opt, grad_clip=5.0), generator=torch.Generator().manual_seed(0)
    )
    return net, strategy


def _batch(n=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 3, 16, 16, generator=g), torch.randint(0, 10, (n,), generator=g)


@pytest.mark.parametrize("space", ["nb201", "darts"])
@pytest.mark.parametrize("name", ["darts", "drnas"])
@pytest.mark.parametrize("form", ["mul_log", "add_linear", "nni_mul"])
def test_strategy_arch_gradient_is_that_of_the_cost_aware_loss(space, name, form):
    """The strategy's first-order step with a cost term differentiates a(E) CE + c(E) exactly,
    through its own weights (DrNAS: the same Dirichlet sample)."""
    made = {}

    def objective(net):
        model = _model(net.arch_shapes(), seed=2)
        model.space = space
        made["obj"] = CostObjective(model, form=form, target=4.0)
        return made["obj"]

    net, strategy = _setup(space, name, objective)
    obj = made["obj"]
    val = _batch()
    alphas = strategy.arch_parameters()

    strategy.begin_step(7)
    weights = strategy.arch_weights(sample=True)
    ce, _ = strategy.loss(val, weights)
    expected = torch.autograd.grad(obj.loss(ce, weights), alphas)

    strategy.begin_step(7)
    weights = strategy.arch_weights(sample=True)
    wg, _, metrics = strategy.shard_grads(Shards.of(val), weights, [], tag="val")
    wg, factor = strategy.add_cost(weights, wg, metrics)
    got = strategy.through_weights(weights, wg)
    assert factor is not None and "expected_latency" in metrics
    for g, e in zip(got, expected):
        assert torch.allclose(g, e, rtol=1e-4, atol=1e-7)

    # and the whole step runs, moving the architecture
    before = [a.detach().clone() for a in alphas]
    strategy.begin_step(8)
    out = strategy.step(_batch(seed=1), val)
    assert torch.isfinite(out["expected_latency"])
    assert any(not torch.equal(a.detach(), b) for a, b in zip(alphas, before))


def test_second_order_darts_scales_the_unrolled_term():
    """Order 2: grad = a(E) (dL_val - eta hvp) + CE da + dc; with a cost-free objective
    (add_linear, lambda=0) the step equals the plain one. Three strategies built alike (the
    same initial alpha), each with its cost composed as the run composes it."""
    net, strategy = _setup("nb201", "darts", order=2)
    model = _model(net.arch_shapes(), seed=3)
    state = {k: v.clone() for k, v in net.state_dict().items()}
    plain, _ = strategy.second_order_grads(_batch(seed=1), _batch(seed=2))

    def with_cost(objective):
        net2, strategy2 = _setup("nb201", "darts", lambda _: objective, order=2)
        net2.load_state_dict(state)
        return strategy2

    free = CostObjective(model, form="add_linear", target=3.0, reg_lambda=0.0)
    same, m = with_cost(free).second_order_grads(_batch(seed=1), _batch(seed=2))
    for a, b in zip(plain, same):
        assert torch.allclose(a, b, atol=1e-7)
    # mul forms scale everything by a(E) and add CE da/dalpha
    mul = CostObjective(model, form="mul_log", target=3.0)
    scaled_strategy = with_cost(mul)
    scaled, m = scaled_strategy.second_order_grads(_batch(seed=1), _batch(seed=2))
    with torch.enable_grad():
        w = scaled_strategy.arch_weights(sample=True)
        E = model.expected(w)
        a, _ = mul.factor_and_penalty(E)
        (da,) = torch.autograd.grad(a, scaled_strategy.arch_parameters())
    expect = float(a.detach()) * plain[0] + m["val_loss"] * da
    assert torch.allclose(scaled[0], expect.float(), rtol=1e-4, atol=1e-7)


def test_objective_refuses_bad_settings():
    model = _model({"cell": (6, 5)})
    with pytest.raises(ValueError, match="cost.form"):
        CostObjective(model, form="fast", target=3.0)
    with pytest.raises(ValueError, match="target must exceed 1"):
        CostObjective(model, form="mul_log", target=0.5)
    with pytest.raises(ValueError, match="positive"):
        CostObjective(model, form="add_linear", target=-1.0)
    with pytest.raises(ValueError, match="shape"):
        model.expected({"cell": torch.ones(6, 4)})
