"""Loaders: seeded order, really seeded workers, DistributedSampler sharding."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from torch.utils.data import Dataset, DistributedSampler, Subset, get_worker_info

from nas.data import build_dataset, make_loader, train_transform


@pytest.fixture(scope="module")
def augmented():
    # The embedded dataset: always here, so worker seeding is tested on every machine.
    data = build_dataset(
        "cifar10-mini", train=True, transform=train_transform("cifar10-mini", cutout=16)
    )
    return Subset(data, range(96))


class _RandomDraws(Dataset):
    """Each item reports the worker's python, numpy and torch draws, and the worker id."""

    def __len__(self):
        return 8

    def __getitem__(self, index):
        info = get_worker_info()
        worker = -1 if info is None else info.id
        return torch.tensor([random.random(), np.random.rand(), torch.rand(()).item(), worker])


def _labels(loader):
    return torch.cat([y for _, y in loader]).tolist()


def test_batches_and_seeded_order(augmented):
    x, y = next(iter(make_loader(augmented, batch_size=32, shuffle=True, seed=0)))
    assert x.shape == (32, 3, 32, 32) and x.dtype == torch.float32 and y.dtype == torch.int64
    loader = make_loader(augmented, batch_size=32, shuffle=True, seed=0)
    first, second = _labels(loader), _labels(loader)
    assert (
        sorted(first) == sorted(augmented.dataset.targets[:96]) and first != second
    )  # epochs differ
    again = make_loader(augmented, batch_size=32, shuffle=True, seed=0)
    assert _labels(again) == first and _labels(again) == second
    assert _labels(make_loader(augmented, batch_size=32, shuffle=True, seed=1)) != first
    assert (
        _labels(make_loader(augmented, batch_size=32, shuffle=False, seed=1))
        == augmented.dataset.targets[:96]
    )
    assert len(make_loader(augmented, batch_size=40, shuffle=False, seed=0, drop_last=True)) == 2


def test_options_that_need_hardware_or_workers_are_dropped(augmented):
    loader = make_loader(
        augmented, batch_size=8, shuffle=False, seed=0, pin_memory=True, persistent_workers=True
    )
    assert loader.persistent_workers is False
    assert loader.pin_memory is torch.cuda.is_available()


def test_two_workers_are_really_seeded(augmented):
    def batches(seed):
        loader = make_loader(augmented, batch_size=16, shuffle=True, seed=seed, num_workers=2)
        return [x for x, _ in loader]

    first, again, other = batches(0), batches(0), batches(1)
    assert all(torch.equal(a, b) for a, b in zip(first, again))  # same seed: same augmented batches
    assert not torch.equal(first[0], other[0])
    draws = torch.cat(
        list(make_loader(_RandomDraws(), batch_size=2, shuffle=False, seed=0, num_workers=2))
    )
    by_worker = {int(w): row for *row, w in draws.tolist()}
    assert set(by_worker) == {0, 1}
    assert all(
        a != b for a, b in zip(by_worker[0], by_worker[1])
    )  # python, numpy, torch all differ
    draws_again = torch.cat(
        list(make_loader(_RandomDraws(), batch_size=2, shuffle=False, seed=0, num_workers=2))
    )
    assert torch.equal(draws, draws_again)


def test_distributed_sampler_shards_one_permutation():
    data = list(range(10))
    loaders = [
        make_loader(
            data, batch_size=2, shuffle=True, seed=4, distributed=True, num_replicas=2, rank=rank
        )
        for rank in (0, 1)
    ]
    assert all(isinstance(loader.sampler, DistributedSampler) for loader in loaders)
    epoch0 = [torch.cat(list(loader)).tolist() for loader in loaders]
    assert sorted(epoch0[0] + epoch0[1]) == data and len(epoch0[0]) == 5
    for loader in loaders:
        loader.sampler.set_epoch(1)  # the caller's job, every epoch
    epoch1 = [torch.cat(list(loader)).tolist() for loader in loaders]
    assert sorted(epoch1[0] + epoch1[1]) == data and epoch1 != epoch0
    assert (
        loaders[0].generator.initial_seed() != loaders[1].generator.initial_seed()
    )  # own augmentation
