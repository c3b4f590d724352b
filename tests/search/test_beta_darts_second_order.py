"""Beta-Decay and the second-order step: Sunshine-Ye/Beta-DARTS adds ``mlc_loss`` in
``_backward_step`` only (``optimizers/darts/architect.py:80-85``); its unrolled step
(``:87-107``) has none. By default the component refuses a second-order strategy in one line
(it would add nothing there); ``in_second_order: true`` adds the term to that step too."""

from __future__ import annotations

import pytest
import torch
from hydra import compose, initialize_config_dir

from nas.choices import config_dir
from nas.plugins import build_components, build_strategy
from nas.strategies.base import SearchContext
from nas.supernet import build_supernet


def _strategy(*overrides: str):
    with initialize_config_dir(str(config_dir()), version_base="1.3"):
        cfg = compose("nas_search", overrides=["search=darts", *overrides])
    strategy = build_strategy(cfg)
    strategy.add_components(build_components(cfg))
    torch.manual_seed(0)
    net = build_supernet("nb201", C=4, layers=1, num_classes=10)
    opt = torch.optim.SGD(net.parameters(), lr=0.025, momentum=0.9, weight_decay=3e-4)
    strategy.attach(
        SearchContext(net, opt, grad_clip=5.0, epochs=2),
        generator=torch.Generator().manual_seed(0),
    )
    return strategy


def _arch_after_a_step(strategy):
    g = torch.Generator().manual_seed(1)
    batch = torch.randn(8, 3, 16, 16, generator=g), torch.randint(0, 10, (8,), generator=g)
    strategy.begin_epoch(10)  # lambda = 50 * 10 / 100 = 5
    strategy.begin_step(3)
    strategy.arch_step(batch, batch)
    return [a.detach().clone() for a in strategy.arch_params.values()]


def test_second_order_is_refused_by_default_in_one_line():
    with pytest.raises(ValueError) as e:
        _strategy("search.order=2", "components=[beta_darts]")
    message = str(e.value)
    assert "\n" not in message
    assert "search.order=1" in message and "components.beta_darts.in_second_order=true" in message


def test_in_second_order_adds_the_term_to_the_unrolled_step():
    plain = _arch_after_a_step(_strategy("search.order=2"))
    with_term = _arch_after_a_step(
        _strategy(
            "search.order=2",
            "components=[beta_darts]",
            "components.beta_darts.in_second_order=true",
        )  # fmt: skip
    )
    assert any(not torch.equal(a, b) for a, b in zip(plain, with_term))


def test_first_order_adds_the_term_by_default():
    plain = _arch_after_a_step(_strategy())
    with_term = _arch_after_a_step(_strategy("components=[beta_darts]"))
    assert any(not torch.equal(a, b) for a, b in zip(plain, with_term))


def test_the_darts_space_experiment_follows_the_released_script():
    """sota/cnn/train_search.py:55-56: s5 and SDARTS-RS by default."""
    with initialize_config_dir(str(config_dir()), version_base="1.3"):
        cfg = compose("nas_search", overrides=["experiment=beta_darts_darts_cifar10"])
    assert cfg.space.name == "s5"
    assert set(cfg.components) == {"sdarts_rs", "beta_darts"}
    assert cfg.components.beta_darts.ramp_epochs == 100
    assert cfg.components.beta_darts.in_second_order is False
    build_strategy(cfg).add_components(build_components(cfg))  # they compose
