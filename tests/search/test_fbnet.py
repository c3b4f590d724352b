"""FBNet (``nas.strategies.fbnet``): the relaxed sample, its temperature, the step order.

Known answers: the sample is ``softmax((theta + G) / tau)`` for the noise the step's generator
drew, tau is ``5.0 * exp(-0.045 epoch)`` (from the first architecture epoch), every op runs, the weight step comes before the
architecture step; a tiny ``nas-search search=fbnet``. Beside ``torch.nn.functional.
gumbel_softmax`` with the same noise: ``tests/fidelity/test_fbnet_reference.py``."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch

from nas.plugins import build_plugin
from nas.strategies import SearchContext
from nas.strategies.fbnet import FBNet, fbnet_tau
from nas.strategies.sampling import gumbel
from nas.supernet import build_supernet
from search_spaces import SPACE_NAMES, get_space

LAYERS = {"nb201": 1, "darts": 3, "proxyless": 21, "fbnet": 22}
SPACES = [s for s in ("nb201", "darts", "proxyless_cifar", "fbnet_cifar") if s in SPACE_NAMES]


def _setup(space="nb201", epochs=None, **kwargs):
    torch.manual_seed(0)
    family = get_space(space).family
    net = build_supernet(space, C=8 if family == "proxyless" else 4, layers=LAYERS[family],
                         num_classes=10)  # fmt: skip
    strategy = FBNet(**kwargs)
    strategy.prepare_supernet(net)
    opt = torch.optim.SGD(net.parameters(), lr=0.025, momentum=0.9, weight_decay=3e-4)
    strategy.attach(SearchContext(net, opt, grad_clip=5.0, epochs=epochs),
                    generator=torch.Generator().manual_seed(0))  # fmt: skip
    return net, strategy


def _batch(n=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 3, 8, 8, generator=g), torch.randint(0, 10, (n,), generator=g)


def test_paper_settings_are_the_defaults():
    s = build_plugin("search", "fbnet")
    assert (s.tau0, s.arch_lr, s.arch_weight_decay) == (5.0, 0.01, 5e-4)
    assert s.tau_decay == pytest.approx(math.exp(-0.045), rel=1e-13)  # exp(-0.045)


def test_temperature_decays_per_epoch():
    _, s = _setup(epochs=90)
    taus = []
    for e in range(90):
        taus.append(s.tau)
        s.on_epoch_end(e)
    assert taus[0] == 5.0
    for e, t in enumerate(taus):
        assert t == pytest.approx(5.0 * math.exp(-0.045 * e), rel=1e-12)
    assert s.tau == pytest.approx(5.0 * math.exp(-0.045 * 89))  # past the run: the last epoch's
    assert fbnet_tau(3, None, 2.0, 0.5) == 0.25


@pytest.mark.parametrize("space", SPACES)
def test_sample_is_the_gumbel_softmax_of_the_drawn_noise(space):
    _, s = _setup(space)
    with torch.no_grad():
        for p in s.arch_params.values():
            p.normal_(0, 1)
    s.begin_step(4)
    seed = s.draw_seed()
    s.begin_step(4)
    w = s.arch_weights(sample=True)
    gen = torch.Generator().manual_seed(seed)
    for ct, theta in s.arch_params.items():
        g = gumbel(theta.shape, gen, theta.device)
        # masked ops (the chain's blocks that cannot be skipped) take no share
        expected = torch.exp((theta + g) / s.tau) * s.supernet.op_mask(ct)
        expected = expected / expected.sum(-1, keepdim=True)
        torch.testing.assert_close(w[ct], expected, rtol=1e-6, atol=1e-7)


def test_every_op_runs_and_the_weight_step_comes_first():
    net, s = _setup()
    assert net.zero_weight_ops_run
    order = []
    s.weight_step = lambda b: order.append("w") or {"train_loss": torch.tensor(0.0)}
    s.arch_step = lambda t, v: order.append("a") or {"val_loss": torch.tensor(0.0)}
    s.step(_batch(), _batch())
    assert order == ["w", "a"]


def test_warm_up_and_bad_values():
    _, s = _setup(warmup_epochs=2, epochs=5)
    assert [s.updates_arch(e) for e in range(4)] == [False, False, True, True]
    with pytest.raises(ValueError, match="warmup_epochs=5 covers all 5 epochs"):
        _setup(warmup_epochs=5, epochs=5)
    with pytest.raises(ValueError, match="search.tau0 must be a positive number, got 0"):
        build_plugin("search", "fbnet", tau0=0)
    with pytest.raises(ValueError, match="search.tau_decay must be at most 1"):
        build_plugin("search", "fbnet", tau_decay=1.5)


def test_a_step_moves_theta_through_the_relaxed_sample():
    _, s = _setup("darts", epochs=3)
    before = [a.detach().clone() for a in s.arch_parameters()]
    s.begin_step(0)
    metrics = s.step(_batch(seed=1), _batch(seed=2))
    assert {"train_loss", "val_loss"} <= set(metrics)
    assert all(not torch.equal(a.detach(), b) for a, b in zip(s.arch_parameters(), before))


@pytest.mark.slow
def test_tiny_search_runs(tmp_path):
    cmd = [sys.executable, "-m", "nas.cli.search", "space=nb201", "search=fbnet",
           "space.C=4", "space.layers=1", "batch_size=16", "data.max_items=64", "epochs=2",
           "figures=false", f"hydra.run.dir={tmp_path / 'run'}"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "genotype (argmax): |" in done.stdout


def test_the_temperature_counts_from_the_first_architecture_epoch():
    """After warm-up epochs of weights only, sampled at tau0, the decay starts (the
    re-implementation's TrainerSupernet anneals after each theta epoch only)."""
    _, s = _setup(epochs=30, warmup_epochs=10)
    taus = []
    for e in range(30):
        taus.append(s.tau)
        s.on_epoch_end(e)
    assert taus[:11] == [5.0] * 11
    assert taus[29] == pytest.approx(5.0 * math.exp(-0.045 * 19), rel=1e-12)
