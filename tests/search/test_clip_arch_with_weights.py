"""``search.clip_arch_with_weights``: one clip norm over the weights and the architecture.

GDAS (AutoDL ``exps/NAS-Bench-201-algos/GDAS.py:54``) and DrNAS on NB201
(``201-space/train_search.py:273``) clip ``model.parameters()``, which hold the architecture
parameters: their gradient of the training loss (through the straight-through or the
reparameterised sample) enters the norm the weight gradient is scaled to, and is then dropped
(the architecture optimiser zeroes it before its own step).
"""

from __future__ import annotations

import pytest
import torch

from nas.strategies import DrNAS, SearchContext
from nas.strategies.gdas import GDAS
from nas.supernet import build_supernet

CLIP = 0.05  # small enough that every step clips


def _setup(kind: str, joint: bool):
    strategy = (GDAS if kind == "gdas" else DrNAS)(clip_arch_with_weights=joint)
    torch.manual_seed(0)
    net = build_supernet("nb201", C=4, layers=1, num_classes=10)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, weight_decay=3e-4)
    strategy.attach(
        SearchContext(net, opt, grad_clip=CLIP, epochs=2),
        generator=torch.Generator().manual_seed(0),
    )
    return net, strategy


def _batch():
    g = torch.Generator().manual_seed(1)
    return torch.randn(8, 3, 16, 16, generator=g), torch.randint(0, 10, (8,), generator=g)


@pytest.mark.parametrize("kind", ["gdas", "drnas"])
@pytest.mark.parametrize("joint", [False, True])
def test_the_weight_gradient_is_clipped_with_the_architecture_gradient(kind, joint):
    net, strategy = _setup(kind, joint)
    batch = _batch()
    # what the step computes, by hand: the same sample (the step's seed), the training loss's
    # gradient of the weights and of the architecture, one norm over both (or the weights only)
    strategy.begin_step(7)
    weights = strategy.arch_weights(sample=True)
    loss, _ = strategy.loss(batch, weights)
    params = [p for p in net.parameters()]
    alphas = strategy.arch_parameters()
    grads = torch.autograd.grad(loss, params + alphas, allow_unused=True)
    g_w, g_a = grads[: len(params)], grads[len(params) :]
    assert all(g is not None and bool(g.abs().sum() > 0) for g in g_a)
    clipped = [g for g in g_w if g is not None] + (list(g_a) if joint else [])
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in clipped]))
    factor = min(1.0, CLIP / (float(norm) + 1e-6))
    assert factor < 1

    strategy.begin_step(7)
    strategy.weight_step(batch)
    for p, g in zip(params, g_w):
        if g is None:
            assert p.grad is None
        else:  # the gradient the SGD step took
            torch.testing.assert_close(p.grad, g * factor, rtol=1e-5, atol=1e-9)
    # the architecture's share of the norm is not kept for its own step
    assert all(a.grad is None for a in alphas)


def test_off_by_default_and_on_in_the_reference_experiments():
    from hydra import compose, initialize_config_dir

    from nas.choices import config_dir

    assert GDAS().clip_arch_with_weights is False and DrNAS().clip_arch_with_weights is False
    on = ["gdas_darts_cifar10", "gdas_nb201", "drnas_nb201", "drnas_nb201_progressive",
          "drnas_pt_nb201"]  # fmt: skip
    # the DARTS-space references keep beta outside model.parameters() (Variables)
    off = ["drnas_darts_cifar10", "drnas_pt_darts_cifar10", "drnas_imagenet"]
    with initialize_config_dir(str(config_dir()), version_base="1.3"):
        for name in on + off:
            cfg = compose("nas_search", overrides=[f"experiment={name}"])
            assert cfg.search.clip_arch_with_weights is (name in on), name


def test_bad_value_is_refused():
    for cls in (GDAS, DrNAS):
        with pytest.raises(ValueError, match="clip_arch_with_weights must be true or false"):
            cls(clip_arch_with_weights="yes")  # type: ignore[arg-type]
