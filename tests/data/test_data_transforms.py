"""Augmentations: the reference recipes, the reference statistics, Cutout as DARTS defines it."""

from __future__ import annotations

import pytest
import torch
from PIL import Image
from torchvision import transforms as T

from nas.data import Cutout, dataset_info, eval_transform, train_transform

DARTS_CIFAR10 = ((0.49139968, 0.48215827, 0.44653124), (0.24703233, 0.24348505, 0.26158768))
DRNAS_CIFAR100 = ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762))


@pytest.mark.parametrize(
    ("name", "stats"),
    [("cifar10", DARTS_CIFAR10), ("cifar10-mini", DARTS_CIFAR10), ("cifar100", DRNAS_CIFAR100)],
)
def test_reference_statistics(name, stats):
    info = dataset_info(name)
    assert (info["mean"], info["std"]) == stats


def _zeroed(out):
    """Bounding box of the zeroed pixels of a [C, H, W] tensor cut from ones."""
    rows = (out == 0).all(0).any(1).nonzero().flatten()
    cols = (out == 0).all(0).any(0).nonzero().flatten()
    return rows, cols


def test_cutout_zeroes_one_clipped_square_on_every_channel():
    torch.manual_seed(0)
    image = torch.ones(3, 32, 32)
    cut = Cutout(length=16)
    sides, touching = set(), 0
    for _ in range(300):
        out = cut(image)
        rows, cols = _zeroed(out)
        zeros = (out == 0).sum().item()
        assert zeros == 3 * len(rows) * len(cols)  # a full rectangle, on all channels
        assert len(rows) <= 16 and len(cols) <= 16
        assert rows.tolist() == list(range(rows[0], rows[0] + len(rows)))
        sides.update((len(rows), len(cols)))
        touching += rows[0].item() == 0 or cols[0].item() == 0 or rows[-1] == 31 or cols[-1] == 31
    assert torch.equal(image, torch.ones(3, 32, 32))  # the input is not modified
    assert 16 in sides and min(sides) < 16 and touching > 0  # full squares and clipped ones
    assert repr(cut) == "Cutout(length=16)"


def test_cutout_centre_covers_the_image():
    torch.manual_seed(1)
    cut, centres = Cutout(length=2), torch.zeros(4, 4)
    for _ in range(400):
        out = cut(torch.ones(1, 4, 4))
        centres += out[0] == 0
    assert (centres > 0).all()  # every pixel gets cut sometimes: the centre ranges over the image


def test_cifar_recipes():
    train = train_transform("cifar10", cutout=16).transforms
    assert [type(t) for t in train] == [
        T.RandomCrop,
        T.RandomHorizontalFlip,
        T.ToTensor,
        T.Normalize,
        Cutout,
    ]
    assert train[0].size == (32, 32) and train[0].padding == 4 and train[-1].length == 16
    assert tuple(train[3].mean) == DARTS_CIFAR10[0]
    assert [type(t) for t in train_transform("cifar100").transforms][
        -1
    ] is T.Normalize  # cutout=0: none
    assert [type(t) for t in eval_transform("cifar10").transforms] == [T.ToTensor, T.Normalize]


def test_imagenet_recipes():
    train = train_transform("imagenet").transforms
    assert [type(t) for t in train] == [
        T.RandomResizedCrop,
        T.RandomHorizontalFlip,
        T.ColorJitter,
        T.ToTensor,
        T.Normalize,
    ]
    assert train[0].size == (224, 224)
    jitter = train[2]
    assert (jitter.brightness, jitter.contrast, jitter.saturation, jitter.hue) == (
        (0.6, 1.4),
        (0.6, 1.4),
        (0.6, 1.4),
        (-0.2, 0.2),
    )
    assert T.ColorJitter not in [
        type(t) for t in train_transform("imagenet", color_jitter=False).transforms
    ]
    evaluation = eval_transform("imagenet").transforms
    assert [type(t) for t in evaluation] == [T.Resize, T.CenterCrop, T.ToTensor, T.Normalize]
    assert evaluation[0].size == 256 and evaluation[1].size == (224, 224)
    image = Image.new("RGB", (300, 260), (255, 0, 0))
    assert eval_transform("imagenet")(image).shape == (3, 224, 224)
    assert train_transform("imagenet")(image).shape == (3, 224, 224)


def test_imagenet16_recipe():
    train = train_transform("imagenet16-120").transforms
    assert train[0].size == (16, 16) and train[0].padding == 2
    assert isinstance(train[1], T.RandomHorizontalFlip)
    assert tuple(train[3].mean) == tuple(x / 255 for x in (122.68, 116.66, 104.01))
    assert tuple(train[3].std) == tuple(x / 255 for x in (63.22, 61.26, 65.09))


def test_training_augmentation_follows_torch_seed():
    image = Image.fromarray(torch.randint(0, 256, (32, 32, 3), dtype=torch.uint8).numpy())
    transform = train_transform("cifar10", cutout=16)
    torch.manual_seed(5)
    a = torch.stack([transform(image) for _ in range(4)])
    torch.manual_seed(5)
    b = torch.stack([transform(image) for _ in range(4)])
    assert torch.equal(a, b) and not torch.equal(a[0], a[1])
