"""The DARTS search split (by index) and the per-class ImageNet search subsets (DrNAS)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.data import Subset

from nas.data import build_dataset, train_transform
from nas.strategies.data import imagenet_search_subsets, search_split


def test_search_split_halves_the_real_training_set_by_index(cifar10_subset):
    data = build_dataset(
        "cifar10", root=cifar10_subset, train=True, transform=train_transform("cifar10")
    )
    weights, arch = search_split(data)
    assert list(weights.indices) == list(range(2000)) and list(arch.indices) == list(
        range(2000, 4000)
    )
    assert weights.dataset is data and arch.dataset is data  # both keep the training augmentation
    assert arch[0][1] == data.targets[2000]
    # Reproducible: the split is a function of the length only.
    again = search_split(build_dataset("cifar10", root=cifar10_subset, train=True))
    assert [list(s.indices) for s in again] == [list(weights.indices), list(arch.indices)]


@pytest.mark.parametrize(
    ("n", "portion", "sizes"), [(10, 0.5, (5, 5)), (7, 0.5, (3, 4)), (50, 0.8, (40, 10))]
)
def test_search_split_is_disjoint_and_covers(n, portion, sizes):
    weights, arch = search_split(list(range(n)), train_portion=portion)
    assert (len(weights), len(arch)) == sizes
    assert set(weights.indices).isdisjoint(arch.indices)
    assert sorted([*weights.indices, *arch.indices]) == list(range(n))
    assert max(weights.indices) < min(arch.indices)


class _Labelled(torch.utils.data.Dataset):
    """A stand-in for ImageFolder: labels only, classes of uneven sizes."""

    def __init__(self, sizes):
        self.targets = [label for label, size in enumerate(sizes) for _ in range(size)]
        np.random.default_rng(0).shuffle(self.targets)

    def __len__(self):
        return len(self.targets)

    def __getitem__(self, index):
        return index, self.targets[index]


def test_imagenet_subsets_per_class_disjoint_and_seeded():
    sizes = [1300, 732, 1000, 40, 1]
    data = _Labelled(sizes)
    weights, arch = imagenet_search_subsets(data, seed=0)
    targets = np.asarray(data.targets)
    for label, size in enumerate(sizes):
        in_weights = int((targets[weights.indices] == label).sum())
        in_arch = int((targets[arch.indices] == label).sum())
        expected_weights = max(1, int(np.floor(0.1 * size + 0.5)))
        assert in_weights == expected_weights
        assert in_arch == min(size - expected_weights, max(1, int(np.floor(0.025 * size + 0.5))))
    assert (len(weights), len(arch)) == (130 + 73 + 100 + 4 + 1, 33 + 18 + 25 + 1 + 0)
    assert set(weights.indices).isdisjoint(arch.indices)
    same = imagenet_search_subsets(data, seed=0)
    assert same[0].indices == weights.indices and same[1].indices == arch.indices
    other = imagenet_search_subsets(data, seed=1)
    assert other[0].indices != weights.indices


def test_imagenet_subsets_through_a_subset_and_custom_fractions():
    data = _Labelled([100, 100])
    part = Subset(data, list(range(0, 200, 2)))
    weights, arch = imagenet_search_subsets(part, weight_fraction=0.5, arch_fraction=0.5, seed=3)
    assert sorted([*weights.indices, *arch.indices]) == list(range(100))
    labels = [data.targets[i] for i in part.indices]
    assert sum(labels[i] == 0 for i in weights.indices) == round(0.5 * labels.count(0) + 1e-9)
