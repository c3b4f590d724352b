"""Every bad input of the data stage gives one clear line naming the bad path or value."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest

from nas.data import (
    Cutout,
    build_dataset,
    dataset_info,
    eval_transform,
    make_loader,
    train_transform,
)
from nas.strategies.data import imagenet_search_subsets, search_split


def _raises(error, call, *fragments):
    with pytest.raises(error) as info:
        call()
    message = str(info.value)
    assert "\n" not in message, message
    for fragment in fragments:
        assert str(fragment) in message, (fragment, message)
    return message


@pytest.mark.parametrize("name", ["cifar10", "cifar100", "imagenet16-120", "imagenet"])
def test_missing_folder(tmp_path, name):
    missing = tmp_path / "nowhere"
    _raises(FileNotFoundError, lambda: build_dataset(name, root=missing, train=True), missing)


def test_root_that_is_a_file(tmp_path):
    path = tmp_path / "file"
    path.write_bytes(b"")
    _raises(
        FileNotFoundError,
        lambda: build_dataset("cifar10", root=path, train=True),
        path,
        "not a folder",
    )


@pytest.mark.parametrize(
    ("name", "train", "expected"),
    [
        ("cifar10", True, "data_batch_1"),
        ("cifar10", False, "test_batch"),
        ("cifar100", True, "train"),
        ("imagenet16-120", True, "train_data_batch_1"),
        ("imagenet16-120", False, "val_data"),
    ],
)
def test_folder_without_batch_files(tmp_path, name, train, expected):
    (tmp_path / "unrelated.txt").write_text("not a batch")
    _raises(
        FileNotFoundError,
        lambda: build_dataset(name, root=tmp_path, train=train),
        tmp_path,
        expected,
    )


def test_imagenet_folder_without_split_or_classes(tmp_path):
    _raises(
        FileNotFoundError,
        lambda: build_dataset("imagenet", root=tmp_path, train=True),
        tmp_path / "train",
    )
    (tmp_path / "val").mkdir()
    _raises(
        FileNotFoundError,
        lambda: build_dataset("imagenet", root=tmp_path, train=False),
        tmp_path / "val",
    )
    _raises(
        ValueError,
        lambda: build_dataset("imagenet", root=tmp_path / "x", train=True, download=True),
        "cannot be downloaded",
    )


def test_truncated_real_batch(cifar10_subset, tmp_path):
    path = tmp_path / "data_batch_1"
    path.write_bytes((cifar10_subset / "data_batch_1").read_bytes()[:100_000])
    _raises(
        ValueError,
        lambda: build_dataset("cifar10", root=tmp_path, train=True),
        path,
        "truncated or corrupt",
    )


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (b"\x00garbage, not a pickle", "truncated or corrupt"),
        (b"", "truncated or corrupt"),
        (pickle.dumps([1, 2, 3]), "holds a list"),
    ],
)
def test_corrupt_batch(tmp_path, content, fragment):
    path = tmp_path / "test_batch"
    path.write_bytes(content)
    _raises(
        ValueError, lambda: build_dataset("cifar10", root=tmp_path, train=False), path, fragment
    )


def test_batch_with_wrong_shape_or_labels(tmp_path, write_cifar10_batch, write_imagenet16_batch):
    images = np.zeros((2, 32, 32, 3), np.uint8)
    write_cifar10_batch(tmp_path / "test_batch", images, [1])
    _raises(
        ValueError,
        lambda: build_dataset("cifar10", root=tmp_path, train=False),
        "1 labels for 2 images",
    )
    write_cifar10_batch(tmp_path / "test_batch", images, [1, 10])
    _raises(
        ValueError,
        lambda: build_dataset("cifar10", root=tmp_path, train=False),
        "label 10 outside 0..9",
    )
    write_imagenet16_batch(tmp_path / "val_data", images, [1, 2])  # 32x32 where 16x16 belongs
    _raises(
        ValueError,
        lambda: build_dataset("imagenet16-120", root=tmp_path, train=False),
        "N x 768 uint8",
    )


@pytest.mark.parametrize(
    "call",
    [
        lambda: build_dataset("cifar-10", root=".", train=True),
        lambda: train_transform("mnist"),
        lambda: eval_transform("mnist"),
        lambda: dataset_info("mnist"),
    ],
)
def test_unknown_dataset_name(call):
    _raises(ValueError, call, "unknown dataset", "cifar10-mini, cifar100")


def test_root_required_or_forbidden():
    _raises(ValueError, lambda: build_dataset("cifar10", train=True), "needs root")
    _raises(
        ValueError,
        lambda: build_dataset("cifar10-mini", root="data", train=True),
        "embedded",
        "'data'",
    )


@pytest.mark.parametrize("portion", [0, 0.0, -0.5, 1.5, math.nan, "0.5", True, None])
def test_train_portion_outside_open_interval(portion):
    data = list(range(10))
    _raises(
        ValueError,
        lambda: search_split(data, train_portion=portion),
        "train_portion",
        repr(portion),
        "(0, 1]",
    )


@pytest.mark.parametrize("portion", [1, 1.0])
def test_train_portion_one_gives_the_whole_set_to_both(portion):
    weights, arch = search_split(list(range(10)), train_portion=portion)
    assert list(weights) == list(arch) == list(range(10))


def test_split_that_leaves_an_empty_half():
    _raises(ValueError, lambda: search_split(list(range(3)), train_portion=0.2), "empty half")


def test_bad_subset_fractions():
    class Labelled(list):
        targets = [0, 0, 1, 1]

    data = Labelled(range(4))
    _raises(
        ValueError, lambda: imagenet_search_subsets(data, weight_fraction=0), "weight_fraction", "0"
    )
    _raises(
        ValueError, lambda: imagenet_search_subsets(data, arch_fraction=1.2), "arch_fraction", "1.2"
    )
    _raises(
        ValueError,
        lambda: imagenet_search_subsets(data, weight_fraction=0.6, arch_fraction=0.5),
        "exceeds 1",
    )
    _raises(ValueError, lambda: imagenet_search_subsets(data, seed=-1), "seed", "-1")
    _raises(ValueError, lambda: imagenet_search_subsets(list(range(4))), "no .targets")


def test_bad_loader_and_transform_arguments():
    data = list(range(8))
    _raises(
        ValueError,
        lambda: make_loader(data, batch_size=0, shuffle=False, seed=0),
        "batch_size",
        "0",
    )
    _raises(
        ValueError,
        lambda: make_loader(data, batch_size=2, shuffle=False, seed=0, num_workers=-1),
        "num_workers",
    )
    _raises(
        ValueError, lambda: make_loader(data, batch_size=2, shuffle=False, seed=-3), "seed", "-3"
    )
    _raises(
        ValueError,
        lambda: make_loader(data, batch_size=2, shuffle=True, seed=0, distributed=True),
        "torchrun",
    )
    _raises(
        ValueError,
        lambda: make_loader(
            data, batch_size=2, shuffle=True, seed=0, distributed=True, num_replicas=2, rank=2
        ),
        "rank",
    )
    _raises(ValueError, lambda: Cutout(length=0), "length", "0")
    _raises(ValueError, lambda: train_transform("cifar10", cutout=-16), "cutout", "-16")
