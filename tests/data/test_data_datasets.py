"""Dataset readers on the real CIFAR-10 subset and on tiny files written in the real formats."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from nas.data import DATASETS, build_dataset, dataset_info, eval_transform, train_transform

# The first labels of CIFAR-10's training and test sets; training image 0 is a frog, test image 0
# a cat: the first ten red values of their top rows.
FIRST_TRAIN_LABELS = [6, 9, 9, 4, 1, 1, 2, 7, 8, 3]
FIRST_TEST_LABELS = [3, 8, 8, 0, 6, 6, 1, 6, 3, 1]
FIRST_TRAIN_RED_ROW = [59, 43, 50, 68, 98, 119, 139, 145, 149, 149]
FIRST_TEST_RED_ROW = [158, 159, 165, 166, 160, 156, 162, 159, 158, 159]
CIFAR10_CLASSES = ["airplane", "automobile", "bird", "cat", "deer"]
CIFAR10_CLASSES += ["dog", "frog", "horse", "ship", "truck"]


def _images(n, side, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (n, side, side, 3), dtype=np.uint8)


def test_registry_holds_the_six_datasets():
    assert DATASETS.names() == [
        "cifar10",
        "cifar10-mini",
        "cifar100",
        "imagefolder",
        "imagenet",
        "imagenet16-120",
    ]
    assert dataset_info("cifar100")["num_classes"] == 100
    assert dataset_info("imagenet")["image_size"] == 224
    assert dataset_info("imagenet16-120") | {} == {
        "num_classes": 120,
        "image_size": 16,
        "mean": pytest.approx([122.68 / 255, 116.66 / 255, 104.01 / 255]),
        "std": pytest.approx([63.22 / 255, 61.26 / 255, 65.09 / 255]),
    }


def test_real_cifar10_training_batch(cifar10_subset, raw_cifar10):
    data = build_dataset("cifar10", root=cifar10_subset, train=True)
    assert (
        len(data) == 4000 and data.data.shape == (4000, 32, 32, 3) and data.data.dtype == np.uint8
    )
    assert data.targets[:10] == FIRST_TRAIN_LABELS
    assert data.data[0, 0, :10, 0].tolist() == FIRST_TRAIN_RED_ROW
    images, labels = raw_cifar10("data_batch_1")
    assert np.array_equal(data.data, images) and data.targets == labels
    assert data.classes == CIFAR10_CLASSES  # read from batches.meta


def test_real_cifar10_test_batch(cifar10_subset, raw_cifar10):
    data = build_dataset("cifar10", root=str(cifar10_subset), train=False)
    assert len(data) == 1000
    assert data.targets[:10] == FIRST_TEST_LABELS
    assert data.data[0, 0, :10, 0].tolist() == FIRST_TEST_RED_ROW
    assert np.array_equal(data.data, raw_cifar10("test_batch")[0])


def test_items_are_transformed_tensors_and_int_labels(cifar10_subset):
    data = build_dataset(
        "cifar10", root=cifar10_subset, train=False, transform=eval_transform("cifar10")
    )
    image, label = data[0]
    assert isinstance(label, int) and label == 3
    assert image.shape == (3, 32, 32) and image.dtype == torch.float32
    mean = torch.tensor(dataset_info("cifar10")["mean"]).view(3, 1, 1)
    std = torch.tensor(dataset_info("cifar10")["std"]).view(3, 1, 1)
    expected = (torch.from_numpy(data.data[0]).permute(2, 0, 1).float() / 255 - mean) / std
    torch.testing.assert_close(image, expected)
    # Without a transform an item is the PIL image, as in torchvision.
    raw = build_dataset("cifar10", root=cifar10_subset, train=False)[0][0]
    assert raw.size == (32, 32) and np.array_equal(np.asarray(raw), data.data[0])


def test_root_is_the_batches_folder_or_its_parent(cifar10_subset, tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    for name in ("data_batch_1", "test_batch", "batches.meta"):
        (folder / name).symlink_to(cifar10_subset / name)
    from_parent = build_dataset("cifar10", root=tmp_path, train=False)
    from_folder = build_dataset("cifar10", root=folder, train=False)
    assert from_parent.root == from_folder.root == folder
    assert np.array_equal(from_parent.data, from_folder.data)


def test_any_subset_of_batch_files_in_order(tmp_path, write_cifar10_batch):
    a, b = _images(3, 32, seed=1), _images(2, 32, seed=2)
    write_cifar10_batch(tmp_path / "data_batch_5", b, [9, 8])
    write_cifar10_batch(tmp_path / "data_batch_2", a, [0, 1, 2])
    data = build_dataset("cifar10", root=tmp_path, train=True)
    assert data.targets == [0, 1, 2, 9, 8]
    assert np.array_equal(data.data, np.concatenate([a, b]))
    assert data.classes == CIFAR10_CLASSES  # no batches.meta: the standard names


def test_cifar100_fine_labels(tmp_path, write_cifar100_folder):
    train, test = _images(4, 32, seed=3), _images(2, 32, seed=4)
    write_cifar100_folder(
        tmp_path / "cifar-100-python", train=(train, [0, 99, 42, 7]), test=(test, [5, 6])
    )
    data = build_dataset("cifar100", root=tmp_path, train=True)
    assert data.targets == [0, 99, 42, 7] and np.array_equal(data.data, train)
    assert data.classes[99] == "fine99"
    held_out = build_dataset("cifar100", root=tmp_path / "cifar-100-python", train=False)
    assert held_out.targets == [5, 6] and np.array_equal(held_out.data, test)


def test_imagenet16_keeps_the_first_120_classes_zero_based(tmp_path, write_imagenet16_batch):
    images = _images(6, 16, seed=5)
    images[0, 3, 5] = (10, 20, 30)  # one known pixel: checks the plane layout
    folder = tmp_path / "ImageNet16"
    write_imagenet16_batch(folder / "train_data_batch_1", images, [1, 120, 121, 1000, 5, 64])
    write_imagenet16_batch(folder / "train_data_batch_3", images[:2], [2, 300])
    write_imagenet16_batch(folder / "val_data", images[:3], [120, 999, 1])
    data = build_dataset(
        "imagenet16-120", root=tmp_path, train=True, transform=train_transform("imagenet16-120")
    )
    assert data.targets == [0, 119, 4, 63, 1]
    assert np.array_equal(data.data, np.concatenate([images[[0, 1, 4, 5]], images[[0]]]))
    assert data.data[0, 3, 5].tolist() == [10, 20, 30]
    image, label = data[1]
    assert image.shape == (3, 16, 16) and label == 119
    val = build_dataset("imagenet16-120", root=folder, train=False)
    assert val.targets == [119, 0]


def test_imagenet_image_folder(tmp_path, write_image_folder):
    layout = {"n01": 3, "n02": 2, "n03": 2}
    write_image_folder(tmp_path, {"train": layout, "val": {k: 1 for k in layout}})
    train = build_dataset(
        "imagenet", root=tmp_path, train=True, transform=train_transform("imagenet")
    )
    assert train.classes == ["n01", "n02", "n03"] and train.targets == [0, 0, 0, 1, 1, 2, 2]
    image, label = train[4]
    assert image.shape == (3, 224, 224) and label == 1
    val = build_dataset(
        "imagenet", root=tmp_path, train=False, transform=eval_transform("imagenet")
    )
    assert val.targets == [0, 1, 2] and val[2][0].shape == (3, 224, 224)


def test_imagenet_splits_must_share_their_classes(tmp_path, write_image_folder):
    write_image_folder(tmp_path, {"train": {"n01": 1, "n02": 1}, "val": {"n02": 1}})
    with pytest.raises(ValueError, match="n01"):
        build_dataset("imagenet", root=tmp_path, train=False)


def test_download_fetches_only_missing_cifar(tmp_path, monkeypatch, write_cifar10_batch):
    import torchvision.datasets.utils as tv_utils

    calls = []

    def fake_download(url, download_root, filename=None, md5=None, **kwargs):
        calls.append((url, download_root, filename, md5))
        folder = tmp_path / "cifar-10-batches-py"
        write_cifar10_batch(folder / "data_batch_1", _images(2, 32), [3, 4])
        write_cifar10_batch(folder / "test_batch", _images(1, 32), [7])

    monkeypatch.setattr(tv_utils, "download_and_extract_archive", fake_download)
    data = build_dataset("cifar10", root=tmp_path, train=True, download=True)
    assert data.targets == [3, 4]
    url = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
    assert calls == [
        (url, str(tmp_path), "cifar-10-python.tar.gz", "c58f30108f718f92721af3b95e74349a")
    ]
    build_dataset("cifar10", root=tmp_path / "cifar-10-batches-py", train=False, download=True)
    assert len(calls) == 1  # present files are not fetched again


def test_download_next_to_a_partial_folder(tmp_path, monkeypatch, write_cifar10_batch):
    import torchvision.datasets.utils as tv_utils

    write_cifar10_batch(
        tmp_path / "data_batch_1", _images(2, 32), [0, 1]
    )  # a subset, no test batch

    def fake_download(url, download_root, filename=None, md5=None, **kwargs):
        write_cifar10_batch(tmp_path / "cifar-10-batches-py" / "test_batch", _images(1, 32), [7])

    monkeypatch.setattr(tv_utils, "download_and_extract_archive", fake_download)
    assert build_dataset("cifar10", root=tmp_path, train=False, download=True).targets == [7]
    assert build_dataset("cifar10", root=tmp_path, train=True, download=True).targets == [0, 1]
