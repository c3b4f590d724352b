"""Search components: every strategy x every component, and each method's known answers.

The pairs come from the config groups (``configs/search``, ``configs/components``), so a new
strategy or component is tested here without a line added: each allowed pair takes a real step
on a tiny supernet; a refused pair must say why in one line. Resume and two-process equality
of a sample of pairs: ``test_distributed_search.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest
import torch
from hydra import compose, initialize_config_dir

from nas.choices import config_dir
from nas.plugins import available, build_components, build_strategy
from nas.selection.argmax import Argmax
from nas.strategies.base import SearchContext, Shards
from nas.strategies.components.base import CAPABILITIES, Component
from nas.strategies.components.beta_darts import beta_decay, lambda_at
from nas.strategies.components.darts_minus import aux_beta_at
from nas.strategies.components.fair_darts import zero_one_loss
from nas.strategies.components.pc_darts import node_softmax
from nas.strategies.components.sdarts import SDARTS_ADV, clip_to_simplex, epsilon_at
from nas.supernet import build_supernet
from nas.supernet.mixed_op import MixedOp

# components whose schedule would skip the architecture step of a two-epoch test
FAST = {
    "pc_darts": ["components.pc_darts.warmup_epochs=0", "components.pc_darts.partial_channels=2"],
    # a window of one score (two summed) and a threshold above any such sum: every op with
    # weights is frozen at the architecture step of step 2
    "oles": ["components.oles.frequency=1", "components.oles.threshold=2.5"],
}
# components that act only after more steps than two (OLES: scores from step 1, frozen at 2,
# the architecture moves differently from step 3)
STEPS = {"oles": 4}
# A pair is refused exactly when the strategy lacks a capability the component needs
# (SearchStrategy.capabilities / has, Component.needs): the refusal names what is missing and
# how the strategy mixes, so no table of pairs is kept here.


def _compose(strategy: str, components: list[str], extra: list[str] = ()):
    overrides = [f"search={strategy}", f"components=[{','.join(components)}]", *extra]
    with initialize_config_dir(str(config_dir()), version_base="1.3"):
        return compose("nas_search", overrides=overrides)


def _setup(
    strategy: str,
    components: list[str],
    extra: list[str] = (),
    space: str = "nb201",
    add: tuple = (),
):
    """A strategy with its components (and the objects in ``add``, the hardware cost) on a
    tiny supernet, composed as the search run composes them."""
    cfg = _compose(
        strategy, components, [e for c in components for e in FAST.get(c, [])] + list(extra)
    )
    st = build_strategy(cfg)
    built = build_components(cfg)
    st.add_components([*built, *add])
    torch.manual_seed(0)
    k = st.initial_partial_channels() or 1
    net = build_supernet(space, C=4, layers=1 if space == "nb201" else 3, num_classes=10,
                         partial_channels=k)  # fmt: skip
    st.prepare_supernet(net)
    opt = torch.optim.SGD(net.parameters(), lr=0.025, momentum=0.9, weight_decay=3e-4)
    st.attach(SearchContext(net, opt, grad_clip=5.0, epochs=2),
              generator=torch.Generator().manual_seed(0))  # fmt: skip
    return net, st


def _acts_by_stopping(component: str) -> bool:
    """Whether the component acts by ending the search (``stop_reason``), not in the steps."""
    (c,) = build_components(_compose("darts", [component]))
    return type(c).stop_reason is not Component.stop_reason


def _missing(strategy: str, component: str):
    """The capabilities ``component`` (with its ``FAST`` settings) needs that ``strategy``
    lacks, and the strategy."""
    cfg = _compose(strategy, [component], FAST.get(component, []))
    st = build_strategy(cfg)
    (c,) = build_components(cfg)
    return sorted(cap for cap in c.needs() if not st.has(cap)), st


def _batch(n=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 3, 16, 16, generator=g), torch.randint(0, 10, (n,), generator=g)


def _tiered(pairs: list[tuple[Any, ...]]) -> list[Any]:
    """Each pairing as a pytest param: the first strategy's in the fast tier, the others' in
    the full tier (``slow``; the fast tier's covering array runs every strategy with every
    component in a search, tests/selection/test_every_pairing.py)."""
    first = available("search")[0]
    return [pytest.param(*p, marks=() if p[0] == first else pytest.mark.slow) for p in pairs]


@pytest.mark.parametrize(
    "strategy,component",
    _tiered([(s, c) for s in available("search") for c in available("components")]),
)
def test_every_strategy_with_every_component_steps(strategy, component):
    missing, st = _missing(strategy, component)
    if missing:
        with pytest.raises(ValueError) as e:
            _setup(strategy, [component])
        message = str(e.value)
        assert "\n" not in message and component in message
        assert CAPABILITIES[missing[0]] in message and st.mixing in message, message
        return
    net, st = _setup(strategy, [component])
    st.begin_epoch(1)
    assert st.components_update_arch(1)
    alphas = st.arch_parameters()
    before = [a.detach().clone() for a in alphas]
    w_before = [p.detach().clone() for p in net.parameters()]
    metrics = st.step(_batch(seed=1), _batch(seed=2))
    # single-level strategies (SNAS) have no architecture batch, hence no validation metrics,
    # and RS-WS takes no architecture step at all
    takes_val = bool(alphas) and not st.single_level
    assert {"train_loss"} | ({"val_loss"} if takes_val else set()) <= set(metrics)
    assert all(torch.isfinite(v) for v in metrics.values())
    for a, b in zip(alphas, before):  # every architecture parameter moved (edge betas too)
        assert a.grad is not None and torch.isfinite(a.grad).all()
        assert not torch.equal(a.detach(), b)
    assert any(not torch.equal(p.detach(), w) for p, w in zip(net.parameters(), w_before))
    # the state (edge betas included) is the strategy's: a checkpoint holds it
    names = set(st.state_dict())
    assert all(any(torch.equal(v, a) for v in st.state_dict().values()) for a in alphas), names
    assert Argmax().select(st) is not None


def _cost(space: str = "nb201"):
    """The hardware-cost component with a random additive table of ``space``'s tiny supernet
    (ProxylessNAS's linear form, which always pulls)."""
    from nas.hardware.cost import CostModel, CostObjective
    from nas.strategies.components.hardware_cost import HardwareCost

    shapes = build_supernet(space, C=4, layers=1, num_classes=10).arch_shapes()
    g = torch.Generator().manual_seed(5)
    per_op = {
        ct: torch.rand(*sh, generator=g, dtype=torch.float64) * 3 for ct, sh in shapes.items()
    }
    model = CostModel("latency", space, 2.0, per_op)
    return HardwareCost(
        objective=CostObjective(model, form="add_linear", target=1.0, reg_lambda=2.0)
    )


VARIANTS = [*((name, ()) for name in available("search")), ("darts", ("search.order=2",))]


@pytest.mark.parametrize(
    "strategy,extra,addon",
    _tiered([(s, e, a) for s, e in VARIANTS for a in [*available("components"), "cost"]]),
    ids=lambda v: v if isinstance(v, str) else "-".join(v),
)
def test_every_pairing_acts_or_is_refused(strategy, extra, addon):
    """Nothing is silently ignored: each strategy (every YAML, and DARTS's second order) with
    each component of the config group, and with the hardware cost (cost=), either is refused
    in one line when composed, as the run composes it, or changes what the search computes:
    the architecture after two steps (the architecture loss's work), or, for a strategy with
    no architecture (RS-WS), the training losses."""
    components = [] if addon == "cost" else [addon]

    def run(with_addon: bool):
        add = (_cost(),) if with_addon and addon == "cost" else ()
        net, st = _setup(strategy, components if with_addon else [], list(extra), add=add)
        trace = []
        for step in range(STEPS.get(addon, 2)):
            st.begin_epoch(1)
            st.begin_step(100 + step)
            torch.manual_seed(step)
            metrics = st.step(_batch(seed=1 + step), _batch(seed=3 + step))
            trace.append(float(metrics["train_loss"]))
        return [a.detach().clone() for a in st.arch_params.values()], trace

    try:
        with_it = run(True)
    except ValueError as e:
        message = str(e)
        assert "\n" not in message and ("cost" in message if addon == "cost" else addon in message)
        assert "needs" in message or "expected" in message, message
        return
    without = run(False)
    if components and _acts_by_stopping(addon):
        # it acts at an epoch's end, by ending the search: tests/search/test_skip_stop.py
        same = all(torch.equal(a, b) for a, b in zip(with_it[0], without[0]))
        assert same and with_it[1] == without[1], f"{addon} changed the steps it leaves alone"
        return
    if with_it[0]:
        assert any(not torch.equal(a, b) for a, b in zip(with_it[0], without[0])), (
            f"{addon} with {strategy} {' '.join(extra)}: the architecture did not change"
        )
    else:
        assert with_it[1] != without[1], f"{addon} with {strategy}: the training did not change"


def test_components_compose_in_a_list():
    net, st = _setup("darts", ["darts_minus", "beta_darts", "sdarts_rs"], space="s1")
    st.begin_epoch(1)
    metrics = st.step(_batch(seed=1), _batch(seed=2))
    assert all(torch.isfinite(v) for v in metrics.values())
    assert set(st.component_log_state()) == {
        "aux_skip_beta", "beta_decay_lambda", "sdarts_rs_epsilon"
    }  # fmt: skip


def test_fair_darts_refuses_components_that_need_the_simplex():
    with pytest.raises(ValueError, match="simplex") as e:
        _setup("darts", ["fair_darts", "sdarts_adv"])
    assert "\n" not in str(e.value)


def test_pc_darts_refuses_second_order():
    with pytest.raises(ValueError, match="search.order=1") as e:
        _setup("darts", ["pc_darts"], ["search.order=2"])
    assert "edge_normalisation=false" in str(e.value) and "\n" not in str(e.value)


def test_pc_darts_refuses_a_warm_up_as_long_as_the_search():
    with pytest.raises(ValueError, match="warmup_epochs=2 covers all 2 epochs"):
        _setup("darts", ["pc_darts"], ["components.pc_darts.warmup_epochs=2"])


# ------------------------------------------------------------------------------- SDARTS


def test_clip_projection_known_answer():
    a = torch.tensor([[0.5, 0.7, -0.2], [-0.1, -0.3, -0.2], [2.0, 0.0, 0.0]])
    out = clip_to_simplex(a)
    expected = torch.tensor([[0.5 / 1.2, 0.7 / 1.2, 0.0], [1.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
    torch.testing.assert_close(out, expected)


def test_epsilon_schedule_values():
    assert epsilon_at(0, 50, 0.03, 0.3) == pytest.approx(0.03)
    assert epsilon_at(25, 50, 0.03, 0.3) == pytest.approx(0.165)
    assert epsilon_at(49, 50, 0.03, 0.3) == pytest.approx(0.2946)


@pytest.mark.parametrize("name", ["sdarts_rs", "sdarts_adv"])
def test_perturbation_is_on_the_simplex_and_changes_only_the_weight_step(name):
    net, st = _setup("darts", [name])
    st.begin_epoch(1)  # epsilon 0.165 at epoch 1 of 2
    comp = st.component_list()[0]
    assert comp.epsilon == pytest.approx(0.165)
    st.begin_step(3)
    with torch.no_grad():
        a0 = st.arch_weights(sample=True)
    a = comp.perturb(st, a0, Shards.of(_batch()))
    for ct in a0:
        assert torch.all(a[ct] >= 0)
        torch.testing.assert_close(a[ct].sum(-1), torch.ones(a[ct].shape[0]))
    # the strategy's own weights are untouched
    torch.testing.assert_close(st.arch_weights(sample=False)["cell"], a0["cell"])


def test_sdarts_rs_noise_stays_in_the_ball_before_the_projection():
    net, st = _setup("darts", ["sdarts_rs"])
    comp = st.component_list()[0]
    comp.epsilon = 0.05
    st.begin_step(0)
    noise = comp._noise(st, torch.zeros(6, 5), torch.ones(6, 5))
    assert noise.abs().max() <= 0.05 and noise.abs().max() > 0.01


def test_sdarts_adv_never_lowers_the_training_loss():
    """PGD ascends the training loss; the revert rule keeps A0 where it did not."""
    net, st = _setup("darts", ["sdarts_adv"])
    comp = st.component_list()[0]
    assert isinstance(comp, SDARTS_ADV) and comp.steps == 7
    st.begin_epoch(1)
    batch = _batch(16, seed=4)
    st.begin_step(5)
    with torch.no_grad():
        a0 = st.arch_weights(sample=True)
    a = comp.perturb(st, a0, Shards.of(batch))
    assert net.training  # the attack ran in eval mode and restored training mode
    net.eval()
    with torch.no_grad():
        before, _ = st.loss(batch, a0)
        after, _ = st.loss(batch, a)
    assert float(after) >= float(before)
    assert (a["cell"] - a0["cell"]).abs().max() <= 1.0


def test_sdarts_adv_moves_an_entry_that_starts_at_zero():
    """The clip leaves exact zeros; the reference runs their ops (``w * op(x)``), so the
    attack's gradient at a zero entry is ``<dL/do, op(x)>``, not 0, and a sign step can move
    it off zero (with the ops skipped it was 0, and sign(0) kept the entry at 0 for good)."""
    net, st = _setup("darts", ["sdarts_adv"])
    assert net.zero_weight_ops_run  # set by prepare_supernet
    comp = st.component_list()[0]
    comp.steps, comp.random_start, comp.epsilon = 1, False, 0.1
    row = torch.tensor([[0.4, 0.0, 0.3, 0.0, 0.3], [0.0, 0.5, 0.0, 0.5, 0.0]])
    a0 = {"cell": row.repeat(3, 1)}
    zero = a0["cell"] == 0
    zero[:, 0] = False  # none: its output is 0, so is the gradient of its weight
    shards = Shards.of(_batch(16, seed=4))
    net.eval()
    (g,), _, _ = st.shard_grads(shards, a0, [], tag="adv")
    net.train()
    assert g[zero].abs().min() > 0
    a = comp.perturb(st, a0, shards)
    assert not torch.equal(a["cell"], a0["cell"])  # not reverted
    assert bool((a["cell"][zero] > 0).any())


@pytest.mark.parametrize(
    ("strategy", "components", "runs"),
    [("darts", ["sdarts_rs"], True), ("darts", ["sdarts_adv"], True), ("snas", [], True),
     ("drnas", ["sdarts_adv"], True), ("rsws", ["sdarts_rs"], True),
     ("darts", [], False), ("drnas", [], False), ("gdas", [], False),
     ("gdas", ["sdarts_rs"], False), ("reinmax", ["sdarts_adv"], False)],
)  # fmt: skip
def test_who_runs_the_ops_of_weight_zero(strategy, components, runs):
    """SDARTS (its clip) and SNAS (a float32 softmax at tau 0.03) make exact zeros whose ops
    their references run; DARTS's softmax and DrNAS's Dirichlet samples (clamped to the
    smallest normal float) have none. GDAS and ReinMax keep the skip whatever a component
    asks: their architecture step's one-hot zeros are ops not drawn (RS-WS has no
    architecture step: its perturbed weight step runs every op)."""
    net, _ = _setup(strategy, components)
    assert net.zero_weight_ops_run is runs


# --------------------------------------------------------------------------- beta-DARTS


def test_beta_decay_gradient_is_the_softmax_over_the_edges():
    a = torch.randn(6, 5, requires_grad=True)
    b = torch.randn(3, 5, requires_grad=True)
    (ga, gb) = torch.autograd.grad(beta_decay([a, b]), [a, b])
    torch.testing.assert_close(ga, torch.softmax(a, -1) / 9)
    torch.testing.assert_close(gb, torch.softmax(b, -1) / 9)


def test_beta_decay_lambda_ramp():
    assert lambda_at(0, 100, 50.0) == 0.0
    assert lambda_at(10, 100, 50.0) == pytest.approx(5.0)
    assert lambda_at(99, 100, 50.0) == pytest.approx(49.5)
    net, st = _setup("darts", ["beta_darts"], ["components.beta_darts.ramp_epochs=null"])
    st.begin_epoch(1)  # ramp over the search's 2 epochs
    assert st.component_list()[0].weight == pytest.approx(25.0)


def test_beta_decay_enters_the_architecture_gradient():
    net, st = _setup("darts", ["beta_darts"])
    st.begin_epoch(40)
    (g,) = st.regularizer_grads()
    alpha = st.arch_params["cell"]
    torch.testing.assert_close(g, 20.0 * torch.softmax(alpha.detach(), -1) / alpha.shape[0])


# -------------------------------------------------------------------------------- DARTS-


def test_aux_beta_schedule_of_the_reference():
    kw = dict(beta0=1.0, t_max=50, t_start=0, t_stop=50, decay="linear")
    assert aux_beta_at(0, **kw) == 1.0
    assert aux_beta_at(49, **kw) == pytest.approx(0.02)
    assert aux_beta_at(25, **kw) == pytest.approx(0.5)
    assert aux_beta_at(60, **{**kw, "t_stop": 40}) == pytest.approx(0.2)  # kept after t_stop


def test_aux_skip_adds_beta_times_the_input_outside_the_weights():
    net, st = _setup("darts", ["darts_minus"])
    st.begin_epoch(1)  # beta = 0.5 over 2 epochs
    m = net.mixed_ops()[0]
    assert isinstance(m, MixedOp) and m.aux_scale == pytest.approx(0.5)
    x = torch.randn(2, 4, 8, 8)
    w = torch.zeros(5)
    out = m(x, w, [False] * 5)
    torch.testing.assert_close(out, 0.5 * x)
    # not a candidate: the derived cell is the argmax of the op weights only
    assert "aux" not in str(Argmax().select(st))


# ------------------------------------------------------------------------------ PC-DARTS


def test_edge_softmax_per_node():
    beta = torch.tensor([0.0, 1.0, 2.0, 0.5, 0.5])
    w = node_softmax(beta, [[0, 1], [2, 3, 4]])
    torch.testing.assert_close(w[:2].sum(), torch.tensor(1.0))
    torch.testing.assert_close(w[2:].sum(), torch.tensor(1.0))
    torch.testing.assert_close(w[1] / w[0], torch.exp(torch.tensor(1.0)))


def test_pc_darts_genotype_uses_the_edge_weights():
    """Node 3 of a DARTS cell (edges 2, 3, 4 from nodes 0, 1, 2): the op weights prefer edges
    2 and 4, the edge weights edge 3; the genotype follows the product, as the reference's
    genotype(), and without the edge weights edge 3 is not chosen."""
    net, st = _setup("darts", ["pc_darts"], space="s1")
    comp = st.component_list()[0]
    with torch.no_grad():
        for ct in ("normal", "reduce"):
            st.arch_params[ct].zero_()
            st.arch_params[ct][2, -1] = 3.0  # the last op ('none' comes first) of edges 2, 4
            st.arch_params[ct][4, -1] = 3.0
            comp.edge_betas[ct].zero_()
    plain = Argmax().select(st)
    assert 1 not in [src for _, src in plain.normal[2:4]]
    with torch.no_grad():
        for ct in ("normal", "reduce"):
            comp.edge_betas[ct][3] = 10.0
    derived = st.derivation_weights()
    edge = comp.edge_weights()
    raw = st.overridden(st.strategy_weights(sample=False))
    for ct in raw:
        torch.testing.assert_close(derived[ct], raw[ct] * edge[ct].unsqueeze(-1))
    genotype = Argmax().select(st)
    assert genotype.normal[2][1] == 1  # edge 3 (from node 1) is now node 3's first input


def test_pc_darts_warm_up_skips_architecture_steps():
    net, st = _setup("darts", ["pc_darts"], ["components.pc_darts.warmup_epochs=1"])
    assert not st.components_update_arch(0) and st.components_update_arch(1)


# ----------------------------------------------------------------------------- FairDARTS


def test_fair_darts_sigmoid_weights_and_zero_one_loss():
    net, st = _setup("darts", ["fair_darts"], space="s1")
    w = st.arch_weights(sample=False)
    for ct, alpha in st.arch_params.items():
        mask = net.op_mask(ct)
        torch.testing.assert_close(w[ct], torch.sigmoid(alpha.detach()) * mask)
    s = torch.tensor([0.5, 1.0, 0.0, 0.75])
    assert float(zero_one_loss([s])) == pytest.approx(-(0 + 0.25 + 0.25 + 0.0625) / 4)


@pytest.mark.slow
@pytest.mark.parametrize(
    "args",
    [
        ["search=snas", "cost=latency"],
        ["search=rsws", "cost=latency"],
        ["search=snas", "components=[sdarts_rs]"],
        ["search=darts", "search.order=2", "components=[pc_darts]"],
    ],
    ids=lambda a: " ".join(a),
)
def test_the_command_refuses_what_a_strategy_cannot_honour(tmp_path, args):
    """``nas-search`` with a pairing the strategy cannot honour: one line, exit 2, before the
    run (no run folder), and before a cost table is even asked for."""
    run = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, "-m", "nas.cli.search", *args, f"hydra.run.dir={run}"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
        timeout=300,
    )
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert lines[0].startswith("nas-search: error: ") and "needs a strategy whose" in lines[0]
    assert not run.exists()
