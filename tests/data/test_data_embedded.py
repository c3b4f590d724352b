"""The embedded quickstart dataset: loads by name with no path, pixel-exact, lossless codec."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from nas.data import build_dataset, load_cifar10_mini, make_loader, train_transform
from nas.data.embedded import CIFAR10_MINI_FILE, decode_images, encode_images
from nas.strategies.data import search_split

REPO = Path(__file__).resolve().parents[2]


def test_loads_by_name_without_a_path():
    train = build_dataset("cifar10-mini", train=True)
    test = build_dataset("cifar10-mini", train=False)
    assert (len(train), len(test)) == (4000, 1000)
    assert train.targets[:10] == [6, 9, 9, 4, 1, 1, 2, 7, 8, 3]
    assert test.targets[:10] == [3, 8, 8, 0, 6, 6, 1, 6, 3, 1]
    assert train.data[0, 0, :10, 0].tolist() == [59, 43, 50, 68, 98, 119, 139, 145, 149, 149]
    assert train.classes[6] == "frog" and test.classes[3] == "cat"
    assert not train.data.flags.writeable  # the decoded cache cannot be altered by a user
    assert train.data.flags.c_contiguous and train.data.dtype == np.uint8


def test_pixel_for_pixel_equal_to_the_shared_files(raw_cifar10):
    for train, batch in ((True, "data_batch_1"), (False, "test_batch")):
        images, labels = raw_cifar10(batch)
        mini = build_dataset("cifar10-mini", train=train)
        assert np.array_equal(mini.data, images) and mini.targets == labels


def test_quickstart_pipeline_runs_on_it():
    data = build_dataset("cifar10-mini", train=True, transform=train_transform("cifar10-mini"))
    weights, arch = search_split(data)
    x, y = next(iter(make_loader(arch, batch_size=8, shuffle=True, seed=0)))
    assert x.shape == (8, 3, 32, 32) and len(weights) == len(arch) == 2000


def test_file_is_small_and_shipped_as_package_data():
    assert CIFAR10_MINI_FILE.parent == REPO / "nas" / "data" / "embedded"
    assert CIFAR10_MINI_FILE.stat().st_size < 9_000_000  # vs 15.4 MB of raw pixels
    # pyproject ships nas/data/embedded/* as package data (tomllib is 3.11+: read the text).
    assert '"data/embedded/*"' in (REPO / "pyproject.toml").read_text()
    try:
        tracked = subprocess.run(
            ["git", "ls-files", "--error-unmatch", str(CIFAR10_MINI_FILE)],
            cwd=REPO,
            capture_output=True,
        )
    except FileNotFoundError:
        pytest.skip("git is not installed")
    if tracked.returncode != 0 and not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    assert tracked.returncode == 0, "the embedded file is not in git: a fresh clone would lack it"


@pytest.mark.parametrize("shape", [(1, 1, 1, 3), (3, 5, 7, 3), (2, 32, 32, 3)])
def test_codec_round_trip_on_hard_images(shape):
    rng = np.random.default_rng(sum(shape))
    noise = rng.integers(0, 256, shape, dtype=np.uint8)
    extremes = np.where(rng.random(shape) < 0.5, 0, 255).astype(np.uint8)  # residual wrap-around
    flat = np.full(shape, 128, np.uint8)
    images = np.concatenate([noise, extremes, flat])
    lengths, payload = encode_images(images)
    assert np.array_equal(decode_images(lengths, payload, shape=images.shape), images)


def test_codec_rejects_a_mismatched_payload():
    lengths, payload = encode_images(np.zeros((2, 4, 4, 3), np.uint8))
    with pytest.raises(ValueError, match="expected 144"):
        decode_images(lengths, payload, shape=(3, 4, 4, 3))


def test_cached_after_the_first_load():
    first, second = load_cifar10_mini(train=True), load_cifar10_mini(train=True)
    assert np.shares_memory(first[0], second[0])
