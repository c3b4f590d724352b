"""``data=imagefolder``: the user's own images (a folder of class sub-folders, any size) for
search and training, on a generated folder of real PNG and JPEG files written with PIL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision import transforms as T

from nas.data import build_dataset, dataset_info, eval_transform, train_transform
from nas.strategies.data import search_split

CLASSES = ["cat", "dog", "fox"]
SIZES = [(20, 28), (40, 40), (100, 80), (33, 57)]  # (width, height): any size, mixed


def _write_folder(folder: Path, per_class: int, seed: int) -> None:
    """Each class a colour (red, green, blue) plus noise; PNG and JPEG alternating."""
    rng = np.random.default_rng(seed)
    for c, name in enumerate(CLASSES):
        (folder / name).mkdir(parents=True)
        for i in range(per_class):
            w, h = SIZES[i % len(SIZES)]
            pixels = rng.integers(0, 80, (h, w, 3), dtype=np.uint8)
            pixels[..., c] += 170
            ext = "png" if i % 2 == 0 else "jpg"
            Image.fromarray(pixels).save(folder / name / f"img{i:03d}.{ext}")


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("images")
    _write_folder(root / "train", per_class=16, seed=0)
    _write_folder(root / "val", per_class=4, seed=1)
    return root / "train", root / "val"


def test_folder_is_read_in_a_fixed_random_order_with_its_labels(folders):
    train, val = folders
    data = build_dataset("imagefolder", root=train, train=True)
    assert len(data) == 48 and data.classes == CLASSES
    labels = [data[i][1] for i in range(len(data))]
    assert labels == list(data.targets)
    # not class by class: the first half (the search's weight split) holds every class
    weights, arch = search_split(data, train_portion=0.5)
    assert {labels[i] for i in weights.indices} == {0, 1, 2}
    assert {labels[i] for i in arch.indices} == {0, 1, 2}
    # the label is the folder: the dominant colour channel says which
    image, label = data[0]
    assert int(np.asarray(image).reshape(-1, 3).mean(0).argmax()) == label
    held_out = build_dataset("imagefolder", root=train, val_root=val, train=False)
    assert len(held_out) == 12
    assert dataset_info("imagefolder", {"root": str(train), "image_size": 24}) | {} == {
        "num_classes": 3,
        "image_size": 24,
        "mean": pytest.approx([0.485, 0.456, 0.406]),
        "std": pytest.approx([0.229, 0.224, 0.225]),
    }


@pytest.mark.parametrize("size", [16, 32, 64, 96])
def test_transforms_follow_the_image_size(folders, size):
    train, _ = folders
    for transform in (
        train_transform("imagefolder", image_size=size),
        eval_transform("imagefolder", image_size=size),
    ):
        data = build_dataset("imagefolder", root=train, train=True, transform=transform)
        for i in range(4):  # every one of the four sizes on disk
            x, _ = data[i]
            assert tuple(x.shape) == (3, size, size)
    kinds = [type(t) for t in train_transform("imagefolder", image_size=size).transforms]
    if size <= 64:
        assert T.RandomCrop in kinds and T.RandomResizedCrop not in kinds
    else:
        assert T.RandomResizedCrop in kinds and T.RandomCrop not in kinds


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda t, v: build_dataset("imagefolder", root=t, train=False), "val_root"),
        (lambda t, v: build_dataset("imagefolder", root=t / "nope", train=True), "does not exist"),
        (lambda t, v: build_dataset("imagefolder", root=t / "cat", train=True), "class folder"),
        (lambda t, v: build_dataset("cifar10", root=t, val_root=v, train=False), "imagefolder"),
        (lambda t, v: train_transform("imagefolder"), "image_size"),
        (lambda t, v: train_transform("imagefolder", image_size=4), "image_size"),
        (lambda t, v: train_transform("imagefolder", image_size=30), "multiple of 4"),
        (lambda t, v: train_transform("imagefolder", image_size=72), "multiple of 32"),
        (lambda t, v: train_transform("cifar10", image_size=64), "32x32"),
        (lambda t, v: dataset_info("imagefolder"), "data.root"),
    ],
)
def test_bad_folders_and_sizes_say_what_was_expected(folders, call, message):
    train, val = folders
    with pytest.raises((ValueError, FileNotFoundError), match=message):
        call(train, val)


def test_folders_with_different_classes_are_refused(folders, tmp_path):
    train, _ = folders
    _write_folder(tmp_path / "other", per_class=1, seed=2)
    (tmp_path / "other" / "fox").rename(tmp_path / "other" / "wolf")
    with pytest.raises(ValueError, match="differ"):
        build_dataset("imagefolder", root=train, val_root=tmp_path / "other", train=False)


def _run(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", module, *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)


TINY_SEARCH = ["space=nb201", "space.C=4", "space.layers=1", "batch_size=8", "epochs=1"]


@pytest.mark.slow
@pytest.mark.parametrize("split", ["train_portion", "val_root"])
def test_search_on_an_image_folder(folders, tmp_path, split):
    train, val = folders
    extra = [f"data.val_root={val}"] if split == "val_root" else []
    proc = _run(
        "nas.cli.search",
        *TINY_SEARCH,
        "data=imagefolder",
        f"data.root={train}",
        "data.image_size=16",
        "data.num_workers=0",
        *extra,
        f"hydra.run.dir={tmp_path / 'run'}",
    )
    assert proc.returncode == 0, proc.stderr
    record = json.loads((tmp_path / "run" / "genotype.json").read_text())
    assert record["space"] == "nb201"
    # the supernet classifies the 3 folders; the architecture split is the one asked for
    state = torch.load(tmp_path / "run" / "checkpoints" / "last.pt", weights_only=False)
    heads = [v for k, v in state["supernet"].items() if k.endswith("weight") and v.dim() == 2]
    assert heads[-1].shape[0] == 3
    steps = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    assert sum(1 for e in steps if e["event"] == "epoch") == 1
    # 48 images: 24 + 24 by the split, else all 48 train the weights (6 steps of 8)
    assert max(e["step"] for e in steps) == (3 if split == "train_portion" else 6)


@pytest.mark.slow
@pytest.mark.parametrize("size", [32, 96])
def test_train_on_an_image_folder(folders, tmp_path, size):
    train, val = folders
    proc = _run(
        "nas.cli.train",
        "genotype=DARTS_V2",
        "model.darts.C=4",
        "model.darts.layers=3",
        f"model.auxiliary={'true' if size == 32 else 'false'}",
        "batch_size=16",
        "epochs=1",
        "data=imagefolder",
        f"data.root={train}",
        f"data.val_root={val}",
        f"data.image_size={size}",
        "data.num_workers=0",
        f"hydra.run.dir={tmp_path / 'run'}",
    )
    assert proc.returncode == 0, proc.stderr
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    expected = "NetworkCIFAR" if size == 32 else "NetworkImageNet"
    assert results["network"].startswith(expected)
    assert 0 <= results["final"]["test_top1"] <= 100
    assert "data imagefolder: 48 training / 12 test images" in proc.stdout


@pytest.mark.slow
def test_train_without_val_root_is_one_line_and_exit_2(folders, tmp_path):
    train, _ = folders
    proc = _run(
        "nas.cli.train",
        "data=imagefolder",
        f"data.root={train}",
        f"hydra.run.dir={tmp_path / 'run'}",
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "data.val_root" in proc.stderr
