"""``search.clip_mixing_with_weights``: one clip norm over the weights and the mixing weights.

Beta-DARTS on NB201 holds alpha in an ``nn.Parameter`` (``nasbench201/model.py:158``) that
contains the softmax during the weight step (``softmax_arch_parameters``, ``model.py:221-223``,
fed to the cells as it is at ``:239``), so ``clip_grad_norm_(model.parameters(), 5)``
(``nasbench201/train_search.py:248``) clips the weight gradient together with the training
loss's gradient of the mixing weights; both optimisers were zeroed before that backward
(``:230-231``) and the architecture step zeroes alpha's gradient before its own
(``optimizers/darts/architect.py:41``), so that gradient only scales the clip.
"""

from __future__ import annotations

import pytest
import torch

from nas.strategies import DARTS, DrNAS, SearchContext
from nas.strategies.gdas import GDAS
from nas.supernet import build_supernet

CLIP = 0.05  # small enough that every step clips


def _setup(on: bool, components=()):
    strategy = DARTS(clip_mixing_with_weights=on)
    strategy.add_components(list(components))
    torch.manual_seed(0)
    net = build_supernet("nb201", C=4, layers=1, num_classes=10).double()
    strategy.prepare_supernet(net)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, weight_decay=3e-4)
    strategy.attach(
        SearchContext(net, opt, grad_clip=CLIP, epochs=2, steps_per_epoch=1),
        generator=torch.Generator().manual_seed(0),
    )
    strategy.double()  # the mixing weights at float64 too (Adam holds the same Parameters)
    with torch.no_grad():  # alphas away from uniform
        g = torch.Generator().manual_seed(3)
        for a in strategy.arch_params.values():
            a.copy_(torch.randn(a.shape, generator=g, dtype=a.dtype))
    for c in strategy.component_list():
        c.begin_epoch(1)
    return net, strategy


def _batch():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(8, 3, 16, 16, generator=g, dtype=torch.float64)
    return x, torch.randint(0, 10, (8,), generator=g)


def _by_hand(net, strategy, batch, on: bool, weights=None):
    """The weight and mixing-weight gradients of the training loss, and the clip factor."""
    if weights is None:
        with torch.no_grad():
            weights = strategy.arch_weights(sample=True)
    leaves = {ct: w.detach().clone().requires_grad_(True) for ct, w in weights.items()}
    loss, _ = strategy.loss(batch, leaves)
    params = list(net.parameters())
    grads = torch.autograd.grad(loss, params + list(leaves.values()), allow_unused=True)
    g_w, g_m = grads[: len(params)], grads[len(params) :]
    assert all(g is not None and bool(g.abs().sum() > 0) for g in g_m)
    clipped = [g for g in g_w if g is not None] + (list(g_m) if on else [])
    assert all(g.dtype == torch.float64 for g in clipped)
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in clipped]))
    return params, g_w, min(1.0, CLIP / (float(norm) + 1e-6))


@pytest.mark.parametrize("on", [False, True])
def test_the_weight_gradient_is_clipped_with_the_mixing_weights_gradient(on):
    net, strategy = _setup(on)
    batch = _batch()
    params, g_w, factor = _by_hand(net, strategy, batch, on)
    assert factor < 1
    alphas = strategy.arch_parameters()
    before = [a.detach().clone() for a in alphas]
    strategy.weight_step(batch)
    for p, g in zip(params, g_w):
        if g is None:
            assert p.grad is None
        else:  # the gradient the SGD step took
            torch.testing.assert_close(p.grad, g * factor, rtol=1e-10, atol=1e-14)
    # the mixing weights' share of the norm reaches neither alpha nor its optimiser
    assert all(a.grad is None for a in alphas)
    assert all(torch.equal(a, b) for a, b in zip(alphas, before))
    assert strategy.arch_optimizer is not None and not strategy.arch_optimizer.state


def test_the_joint_norm_differs_from_the_weights_alone():
    net, strategy = _setup(True)
    batch = _batch()
    _, _, joint = _by_hand(net, strategy, batch, True)
    _, _, alone = _by_hand(net, strategy, batch, False)
    assert joint < alone < 1


def test_the_architecture_step_is_untouched():
    """A full step (architecture then weights) leaves alpha and Adam's moments where the
    architecture step put them, and the next architecture step as without the option."""
    states = []
    for on in (False, True):
        net, strategy = _setup(on)
        batch, val = _batch(), _batch()
        strategy.arch_step(batch, val)
        after_arch = [a.detach().clone() for a in strategy.arch_parameters()]
        assert strategy.arch_optimizer is not None
        adam = {
            k: v.clone() if torch.is_tensor(v) else v
            for s in strategy.arch_optimizer.state.values()
            for k, v in s.items()
        }
        strategy.weight_step(batch)
        assert all(a.grad is not None for a in strategy.arch_parameters())  # Adam's .grad
        for a, b in zip(strategy.arch_parameters(), after_arch):
            assert torch.equal(a, b)
        now = {k: v for s in strategy.arch_optimizer.state.values() for k, v in s.items()}
        assert all(
            torch.equal(now[k], v) if torch.is_tensor(v) else now[k] == v for k, v in adam.items()
        )
        states.append([a.grad.clone() for a in strategy.arch_parameters()])
    # the architecture's gradient (left by its own step) is the same with the option on
    for a, b in zip(*states):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_the_gradient_is_that_of_the_perturbed_weights():
    """SDARTS-RS replaces the weights: the norm holds the gradient of those fed to the supernet."""
    from nas.strategies.components.sdarts import SDARTS_RS

    net, strategy = _setup(True, [SDARTS_RS(epsilon_min=0.3, epsilon_max=0.3)])
    batch = _batch()
    rs = strategy.component_list()[0]
    fed: list = []
    perturb = rs.perturb

    def recording(s, weights, shards):
        out = perturb(s, weights, shards)
        fed.append({ct: w.detach().clone() for ct, w in out.items()})
        return out

    rs.perturb = recording  # type: ignore[method-assign]
    strategy.begin_step(5)
    strategy.weight_step(batch)
    got = [p.grad.clone() for p in net.parameters() if p.grad is not None]
    # the same step again from the same state, by hand on the recorded perturbed weights
    net2, strategy2 = _setup(True, [SDARTS_RS(epsilon_min=0.3, epsilon_max=0.3)])
    params, g_w, factor = _by_hand(net2, strategy2, batch, True, weights=fed[0])
    unperturbed = _by_hand(net2, strategy2, batch, True)[2]
    assert abs(factor - unperturbed) > 1e-6 * factor  # the perturbation matters here
    want = [g * factor for g in g_w if g is not None]
    assert len(got) == len(want)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-14)


def test_off_by_default_refused_with_the_other_option_and_bad_values():
    assert DARTS().clip_mixing_with_weights is False
    assert DrNAS().clip_mixing_with_weights is False and GDAS().clip_mixing_with_weights is False
    assert DrNAS(clip_mixing_with_weights=True).clip_mixing_with_weights is True
    for cls in (GDAS, DrNAS):
        with pytest.raises(ValueError, match="choose one"):
            cls(clip_arch_with_weights=True, clip_mixing_with_weights=True)
    with pytest.raises(ValueError, match="clip_mixing_with_weights must be true or false"):
        DARTS(clip_mixing_with_weights="yes")  # type: ignore[arg-type]


def test_on_in_the_experiments_of_the_references_that_clip_the_mixing_weights():
    from hydra import compose, initialize_config_dir

    from nas.choices import config_dir

    on = ["beta_darts_nb201"]
    # darts-pt's NB201 alpha is a Variable outside get_weights() (nasbench201/search_model.py:49,
    # :168); the DARTS-space references keep alpha in Variables too; DrNAS / GDAS clip the
    # logits / concentrations instead (clip_arch_with_weights)
    off = ["pt_nb201", "pt_nb201_fix_alpha", "drnas_pt_nb201", "beta_darts_darts_cifar10",
           "gdas_nb201", "drnas_nb201"]  # fmt: skip
    with initialize_config_dir(str(config_dir()), version_base="1.3"):
        for name in on + off:
            cfg = compose("nas_search", overrides=[f"experiment={name}"])
            assert cfg.search.clip_mixing_with_weights is (name in on), name


def test_no_clip_takes_the_whole_gradient():
    """``optimizer.grad_clip: null`` (ProxylessNAS's search does not clip): the SGD step takes
    the training loss's gradient unscaled, where the clip of the other tests scales it."""
    net, strategy = _setup(False)
    strategy.ctx.grad_clip = None
    batch = _batch()
    params, g_w, factor = _by_hand(net, strategy, batch, False)
    assert factor < 1  # a clip at CLIP would have scaled it
    strategy.weight_step(batch)
    for p, g in zip(params, g_w):
        if g is not None:
            torch.testing.assert_close(p.grad, g, rtol=1e-10, atol=1e-14)


def test_a_search_config_may_leave_the_weights_unclipped():
    from omegaconf import OmegaConf

    from nas.api import search_config
    from nas.pipeline.search import SearchError
    from nas.run.config import validate_search_config

    cfg = search_config(experiment="proxylessnas_imagenet")
    assert cfg.optimizer.grad_clip is None
    validate_search_config(cfg, SearchError)
    OmegaConf.update(cfg, "optimizer.grad_clip", 0)
    with pytest.raises(SearchError, match="a positive float or null"):
        validate_search_config(cfg, SearchError)
