"""Fixtures of the data tests: the real CIFAR-10 subset, and writers of tiny files in the real
formats (CIFAR-10 / CIFAR-100 "python version" pickles, NAS-Bench-201 ImageNet16 pickles, an
ImageFolder of PNGs), as the original datasets lay them out."""

from __future__ import annotations

import pickle
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

REPO = Path(__file__).resolve().parents[2]
CIFAR10_SUBSET = (REPO / ".." / "shared" / "data" / "cifar10-subset").resolve()


@pytest.fixture(scope="session")
def cifar10_subset() -> Path:
    if not (CIFAR10_SUBSET / "data_batch_1").is_file():
        pytest.skip(f"the real CIFAR-10 subset {CIFAR10_SUBSET} is not here")
    return CIFAR10_SUBSET


@pytest.fixture(scope="session")
def raw_cifar10(cifar10_subset: Path) -> Callable[[str], tuple[np.ndarray, list[int]]]:
    """``raw(batch_name)``: a real batch read independently of nas.data: (images, labels)."""

    def read(name: str) -> tuple[np.ndarray, list[int]]:
        with open(cifar10_subset / name, "rb") as f:
            entry = pickle.load(f, encoding="bytes")
        images = entry[b"data"].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
        return images, list(entry[b"labels"])

    return read


def _planes(images: np.ndarray) -> np.ndarray:
    """[N, H, W, 3] -> N x (3*H*W): row-major R, G, B planes, as the pickle formats store them."""
    return np.ascontiguousarray(images.transpose(0, 3, 1, 2).reshape(len(images), -1))


WriteCifar = Callable[..., Path]


@pytest.fixture
def write_cifar10_batch() -> WriteCifar:
    """``write(path, images, labels)``: a CIFAR-10 batch as the Python 2 original (bytes keys)."""

    def write(path: Path, images: np.ndarray, labels: Sequence[int]) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        entry = {
            b"batch_label": b"tiny batch",
            b"labels": list(labels),
            b"data": _planes(images),
            b"filenames": [f"{i}.png".encode() for i in range(len(labels))],
        }
        with open(path, "wb") as f:
            pickle.dump(entry, f, protocol=2)
        return path

    return write


@pytest.fixture
def write_cifar100_folder() -> Callable[..., Path]:
    """``write(folder, train=(images, fine), test=(images, fine))``: train, test and meta files."""

    def write(
        folder: Path,
        *,
        train: tuple[np.ndarray, Sequence[int]],
        test: tuple[np.ndarray, Sequence[int]],
    ) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        for name, (images, fine) in (("train", train), ("test", test)):
            entry = {
                b"filenames": [f"{i}.png".encode() for i in range(len(fine))],
                b"batch_label": name.encode(),
                b"fine_labels": list(fine),
                b"coarse_labels": [v // 5 for v in fine],
                b"data": _planes(images),
            }
            with open(folder / name, "wb") as f:
                pickle.dump(entry, f, protocol=2)
        meta = {
            b"fine_label_names": [f"fine{i}".encode() for i in range(100)],
            b"coarse_label_names": [f"coarse{i}".encode() for i in range(20)],
        }
        with open(folder / "meta", "wb") as f:
            pickle.dump(meta, f, protocol=2)
        return folder

    return write


@pytest.fixture
def write_imagenet16_batch() -> Callable[..., Path]:
    """``write(path, images [N,16,16,3], labels 1-based)``: an NB201 ImageNet16 pickle."""

    def write(path: Path, images: np.ndarray, labels: Sequence[int]) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as f:
            pickle.dump({"data": _planes(images), "labels": list(labels)}, f, protocol=2)
        return path

    return write


@pytest.fixture
def write_image_folder() -> Callable[..., Path]:
    """``write(root, {"train": {"cls": n, ...}, "val": {...}})``: PNGs of varied sizes."""

    def write(root: Path, splits: dict[str, dict[str, int]]) -> Path:
        rng = np.random.default_rng(0)
        for split, classes in splits.items():
            for name, count in classes.items():
                (root / split / name).mkdir(parents=True, exist_ok=True)
                for i in range(count):
                    h, w = int(rng.integers(20, 60)), int(rng.integers(20, 60))
                    pixels = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
                    Image.fromarray(pixels).save(root / split / name / f"{i}.png")
        return root

    return write
