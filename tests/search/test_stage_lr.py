"""DrNAS's weight lr across progressive stages: the intended single cosine (default) and the
reference code's schedule (``optimizer.stage_lr=reference``), pinned against PyTorch's own
``CosineAnnealingLR`` driven the way the reference drives it."""

from __future__ import annotations

import math

import pytest
import torch
from hydra import compose, initialize_config_dir

from nas.cli.search import CONFIG_DIR
from nas.pipeline.search import SearchError, SearchRun
from nas.run.schedules import reference_stage_lrs, search_lr_factor


def _torch_reference(
    *, stage_epochs: list[int], lr: float, lr_min: float, warmup_epochs: int = 0
) -> list[float]:
    """The lr each epoch trains at in DrNAS's train_search*.py: one CosineAnnealingLR over all
    epochs stepped at every epoch end, the warm-up written into the optimiser at the start of
    an epoch (ImageNet), and at a stage change a fresh SGD at the base lr with a new scheduler
    that loads the old one's state (net2wider.py configure_optimizer / configure_scheduler)."""
    param = torch.nn.Parameter(torch.zeros(1))
    total = sum(stage_epochs)
    optimizer = torch.optim.SGD([param], lr=lr, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, float(total), eta_min=lr_min)
    lrs, epoch = [], 0
    for i, epochs in enumerate(stage_epochs):
        for _ in range(epochs):
            if epoch < warmup_epochs:
                for group in optimizer.param_groups:
                    group["lr"] = lr * (epoch + 1) / warmup_epochs
            lrs.append(optimizer.param_groups[0]["lr"])
            optimizer.step()  # (keeps PyTorch from warning about the order of the two steps)
            epoch += 1
            scheduler.step()
        if i < len(stage_epochs) - 1:
            optimizer = torch.optim.SGD([param], lr=lr, momentum=0.9)
            new = torch.optim.lr_scheduler.CosineAnnealingLR(
                optimizer, float(total), eta_min=lr_min
            )
            new.load_state_dict(scheduler.state_dict())
            scheduler = new
    return lrs


@pytest.mark.parametrize(
    ("stage_epochs", "lr", "lr_min", "warmup"),
    [
        ([25, 25], 0.1, 0.0, 0),  # DARTS space, CIFAR-10 (train_search.py)
        ([50, 50], 0.025, 0.001, 0),  # NB201 progressive (train_search_progressive.py)
        ([25, 25], 0.5, 0.0, 5),  # ImageNet (train_search_imagenet.py, batch 512 > 256)
    ],
)
def test_reference_schedule_is_torch_cosine_driven_as_the_reference(
    stage_epochs, lr, lr_min, warmup
):
    total = sum(stage_epochs)
    ours = reference_stage_lrs(
        epochs=total,
        lr=lr,
        lr_min=lr_min,
        warmup_epochs=warmup,
        stage_starts=[stage_epochs[0]],
    )
    assert ours == pytest.approx(
        _torch_reference(stage_epochs=stage_epochs, lr=lr, lr_min=lr_min, warmup_epochs=warmup),
        rel=1e-12,
        abs=1e-15,
    )
    factor = search_lr_factor(
        epochs=total,
        lr=lr,
        lr_min=lr_min,
        warmup_epochs=warmup,
        stage_lr="reference",
        stage_starts=[stage_epochs[0]],
    )
    assert [lr * factor(e) for e in range(total)] == pytest.approx(ours, rel=1e-12, abs=1e-15)


def test_reference_schedule_numbers_of_the_darts_space_search():
    """25 + 25 epochs, lr 0.1 -> 0: the intended cosine gives 0.05 at epoch 25; the reference
    restarts there at 0.1 and follows 0.1 * (1 + cos(pi e / 50)), twice the cosine."""
    ref = reference_stage_lrs(epochs=50, lr=0.1, lr_min=0.0, warmup_epochs=0, stage_starts=[25])
    intended = search_lr_factor(epochs=50, lr=0.1, lr_min=0.0)
    assert ref[:25] == pytest.approx([0.1 * intended(e) for e in range(25)], rel=1e-12)
    assert 0.1 * intended(25) == pytest.approx(0.05)
    assert ref[25] == 0.1
    for e in range(25, 50):
        assert ref[e] == pytest.approx(0.1 * (1 + math.cos(math.pi * e / 50)), rel=1e-12)
        assert ref[e] == pytest.approx(2 * 0.1 * intended(e), rel=1e-12)
    assert ref[26] == pytest.approx(0.0937209, abs=1e-7)


def _cfg(*extra):
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose(
            config_name="nas_search",
            overrides=[
                "search=drnas",
                "space.C=4",
                "space.layers=1",
                "batch_size=16",
                "data.max_items=32",
                "epochs=4",
                "optimizer.lr=0.1",
                "optimizer.lr_min=0.0",
                "search.stages=[{epochs:2,partial_channels:4,keep:5},"
                "{epochs:2,partial_channels:2,keep:3}]",
                *extra,
            ],
        )


def _lrs(run: SearchRun) -> list[float]:
    factor = run.scheduler.lr_lambdas[0]
    return [0.1 * factor(e) for e in range(4)]


def test_search_uses_the_intended_cosine_by_default_and_the_reference_on_request(tmp_path):
    cosine = _lrs(SearchRun(_cfg(), tmp_path / "a"))
    assert cosine == pytest.approx([0.05 * (1 + math.cos(math.pi * e / 4)) for e in range(4)])
    reference = _lrs(SearchRun(_cfg("optimizer.stage_lr=reference"), tmp_path / "b"))
    expected = reference_stage_lrs(epochs=4, lr=0.1, lr_min=0.0, warmup_epochs=0, stage_starts=[2])
    assert reference == pytest.approx(expected, rel=1e-12)
    assert reference[2] == pytest.approx(0.1) and cosine[2] == pytest.approx(0.05)
    with pytest.raises(SearchError, match="optimizer.stage_lr must be 'cosine' or 'reference'"):
        SearchRun(_cfg("optimizer.stage_lr=restart"), tmp_path / "c")
