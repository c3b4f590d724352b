"""Every retraining recipe composes, validates and builds its network with the paper's values."""

from __future__ import annotations

import pytest

from nas.cli.train import compose_config, group_options
from nas.data import dataset_info
from nas.run.schedules import train_lr_factor
from nas.training.loop import validate_config
from nas.training.model import network_from_config, resolve_train_genotype
from search_spaces import resolve_genotype
from search_spaces.families import family_of


def _network(cfg):
    """The network at the size of its family's section of the model config (model.<family>)."""
    info = dataset_info(str(cfg.data.name))
    return network_from_config(
        resolve_train_genotype(cfg.genotype),
        cfg.model,
        num_classes=int(info["num_classes"]),
        image_size=int(info["image_size"]),
    )


def test_defaults_are_the_quickstart():
    cfg = compose_config()
    validate_config(cfg)
    assert cfg.data.name == "cifar10-mini" and cfg.genotype == "DARTS_V2"
    assert (cfg.model.darts.C, cfg.model.darts.layers, cfg.epochs) == (8, 5, 2)
    assert (cfg.model.nb201.C, cfg.model.nb201.N) == (16, 5)
    _, spec = _network(cfg)
    assert str(spec) == "NetworkCIFAR(C=8, layers=5, auxiliary)"


@pytest.mark.parametrize("experiment", group_options("experiment"))
def test_every_recipe_composes_and_builds_its_network(experiment):
    cfg = compose_config([f"experiment={experiment}"])
    validate_config(cfg)
    assert cfg.name == experiment
    net, spec = _network(cfg)
    family = family_of(resolve_genotype(cfg.genotype))
    if family.name == "darts":  # the DARTS recipes train with the auxiliary head
        expected = "NetworkImageNet" if "imagenet" in experiment else "NetworkCIFAR"
        assert spec.family == expected and spec.auxiliary
    else:  # e.g. proxyless_imagenet: the family's network, which has no auxiliary head
        assert spec.family in family.networks and not spec.auxiliary
    assert sum(p.numel() for p in net.parameters()) > 0


def test_darts_cifar10_recipe():
    cfg = compose_config(["experiment=darts_cifar10"])
    assert (cfg.data.name, cfg.data.cutout, cfg.epochs, cfg.batch_size) == ("cifar10", 16, 600, 96)
    assert (cfg.model.darts.C, cfg.model.darts.layers) == (36, 20)
    assert (cfg.model.auxiliary_weight, cfg.model.drop_path, cfg.label_smoothing) == (0.4, 0.2, 0.0)
    o = cfg.optimizer
    assert (o.lr, o.momentum, o.weight_decay, o.grad_clip) == (0.025, 0.9, 3e-4, 5.0)
    assert (o.schedule, o.lr_min, o.warmup_epochs) == ("cosine", 0.0, 0)
    # the paper's count: DARTS_V2 at C=36, 20 cells has 3,349,342 parameters without the head
    net, _ = _network(cfg)
    assert sum(p.numel() for n, p in net.named_parameters() if "auxiliary" not in n) == 3_349_342
    # CIFAR-100 is the same recipe on other data
    cfg100 = compose_config(["experiment=darts_cifar10", "data=cifar100"])
    assert cfg100.data.name == "cifar100" and cfg100.data.cutout == 16
    assert _network(cfg100)[0].classifier.out_features == 100


def test_drnas_cifar10_recipe():
    cfg = compose_config(["experiment=drnas_cifar10"])
    assert (cfg.batch_size, cfg.model.drop_path, cfg.genotype) == (64, 0.3, "DrNAS_cifar10")
    assert (cfg.epochs, cfg.data.cutout, cfg.optimizer.lr, cfg.optimizer.schedule) == (
        600, 16, 0.025, "cosine"
    )  # fmt: skip


def test_darts_imagenet_recipe():
    cfg = compose_config(["experiment=darts_imagenet"])
    assert (cfg.data.name, cfg.epochs, cfg.batch_size, cfg.label_smoothing) == (
        "imagenet", 250, 128, 0.1
    )  # fmt: skip
    o = cfg.optimizer
    assert (o.lr, o.schedule, o.gamma, o.decay_period, o.weight_decay) == (
        0.1,
        "step",
        0.97,
        1,
        3e-5,
    )
    assert (cfg.model.darts.C, cfg.model.darts.layers, cfg.model.drop_path) == (48, 14, 0.0)
    assert cfg.data.color_jitter is True
    f = train_lr_factor(schedule="step", epochs=250, lr=0.1, gamma=0.97)
    assert [f(e) for e in (0, 1, 2)] == pytest.approx([1.0, 0.97, 0.97**2])


def test_drnas_imagenet_recipe():
    cfg = compose_config(["experiment=drnas_imagenet"])
    o = cfg.optimizer
    assert (cfg.batch_size, o.lr, o.schedule, o.warmup_epochs) == (768, 0.5, "linear", 5)
    assert (cfg.epochs, cfg.label_smoothing, o.weight_decay, cfg.genotype) == (
        250, 0.1, 3e-5, "DrNAS_imagenet"
    )  # fmt: skip
    f = train_lr_factor(schedule="linear", epochs=250, lr=0.5, warmup_epochs=5)
    # DrNAS adjust_lr: warm-up (e + 1) / 5, then (245 - e) / 245, gentler over the last 5 epochs
    assert [f(e) for e in range(6)] == pytest.approx([0.2, 0.4, 0.6, 0.8, 1.0, 240 / 245])
    assert f(244) == pytest.approx(1 / 245) and f(249) == pytest.approx(1 / (245 * 5))
    assert all(f(e) >= f(e + 1) > 0 for e in range(4, 249))  # f(244) = f(245) = 1 / 245


def test_robust_darts_recipe():
    cfg = compose_config(["experiment=rdarts_cifar100"])
    assert (cfg.data.name, cfg.model.darts.C, cfg.model.darts.layers) == ("cifar100", 16, 8)
    assert (cfg.epochs, cfg.batch_size, cfg.model.drop_path, cfg.data.cutout) == (600, 96, 0.2, 16)


def test_cosine_schedule_matches_the_reference():
    # DARTS train.py: CosineAnnealingLR(T_max=epochs, eta_min=0) stepped once per epoch
    f = train_lr_factor(schedule="cosine", epochs=600, lr=0.025)
    import math

    for e in (0, 1, 300, 599):
        assert 0.025 * f(e) == pytest.approx(0.025 * (1 + math.cos(math.pi * e / 600)) / 2)
