"""Training and test loaders of the retraining stage, sharded over ranks and resumable mid-epoch.

Retraining stage (``nas.training``): the full training set with the recipe's augmentation and the
test set with the evaluation preprocessing (``nas.data``). Two samplers:

* ``ResumableDistributedSampler``: torch's ``DistributedSampler`` (one permutation per epoch
  from ``seed + epoch``, identical on every rank, padded to a multiple of the world size, rank
  r takes every world-size-th index from r) that can also start at batch k of its epoch, which
  ``nas.data.make_loader``'s plain sampler cannot: a run stopped by SIGTERM resumes on exactly
  the batches it had not seen. With one process it is a seeded shuffle.
  Because rank r takes positions r, r + W, ... of the shared permutation, the W per-rank
  batches of step k together hold exactly the global batch k of a single-process run with the
  same seed and global batch: the world size changes how a batch is split, not which images
  form it.
* ``ShardSampler``: the test set split over the ranks without padding, so that summed metrics
  count every test image exactly once.

Augmentation randomness: the loader's generator is reseeded from (seed, epoch, rank, first
batch) at the start of every epoch, and workers are seeded from it (``seed_worker``), so an
epoch's draws are a function of the run seed wherever it restarts.
"""

from __future__ import annotations

from collections.abc import Iterator, Sized
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Sampler
from torchvision import transforms as T

from nas.data.loaders import seed_worker
from nas.run.seeds import TRAIN_LOADER, stream_seed


class ResumableDistributedSampler(DistributedSampler[int]):
    """``DistributedSampler`` whose epoch can begin at any batch (``set_epoch(epoch, start)``)."""

    def __init__(
        self,
        dataset: Dataset[Any],
        *,
        num_replicas: int,
        rank: int,
        seed: int,
        batch_size: int,
        shuffle: bool = True,
    ) -> None:
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=shuffle, seed=seed)
        self.batch_size = batch_size  # the per-rank batch
        self.start_batch = 0

    def set_epoch(self, epoch: int, start_batch: int = 0) -> None:
        super().set_epoch(epoch)
        self.start_batch = start_batch

    def __iter__(self) -> Iterator[int]:
        indices = list(super().__iter__())
        return iter(indices[self.start_batch * self.batch_size :])

    def __len__(self) -> int:
        return max(0, self.num_samples - self.start_batch * self.batch_size)


class ShardSampler(Sampler[int]):
    """Indices ``rank, rank + W, rank + 2W, ...`` in order: every item once over all ranks."""

    def __init__(self, num_items: int, *, num_replicas: int, rank: int) -> None:
        self.num_items = num_items
        self.num_replicas = num_replicas
        self.rank = rank

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.rank, self.num_items, self.num_replicas))

    def __len__(self) -> int:
        return len(range(self.rank, self.num_items, self.num_replicas))


def train_loader(
    dataset: Dataset[Any],
    *,
    batch_size: int,
    seed: int,
    num_replicas: int,
    rank: int,
    num_workers: int,
    pin_memory: bool,
) -> DataLoader[Any]:
    """The training loader of one rank: ``batch_size`` is the per-rank batch."""
    sampler = ResumableDistributedSampler(
        dataset, num_replicas=num_replicas, rank=rank, seed=seed, batch_size=batch_size
    )
    # Workers restart every epoch (no persistent workers): their seeds then derive from the
    # generator reseeded in ``start_epoch``, which an exact resume needs.
    return DataLoader(
        dataset,
        batch_size=batch_size,
        sampler=sampler,
        num_workers=num_workers,
        pin_memory=pin_memory and torch.cuda.is_available(),
        worker_init_fn=seed_worker,
        generator=torch.Generator(),
    )


def start_epoch(loader: DataLoader[Any], *, seed: int, epoch: int, start_batch: int) -> Any:
    """An iterator over the loader's epoch ``epoch`` from batch ``start_batch`` on."""
    sampler = loader.sampler
    assert isinstance(sampler, ResumableDistributedSampler)
    sampler.set_epoch(epoch, start_batch)
    assert loader.generator is not None
    loader.generator.manual_seed(stream_seed(seed, epoch, sampler.rank, start_batch, TRAIN_LOADER))
    return iter(loader)


def eval_loader(
    dataset: Dataset[Any],
    *,
    batch_size: int,
    num_replicas: int,
    rank: int,
    num_workers: int,
    pin_memory: bool,
) -> DataLoader[Any]:
    """The test loader of one rank: its share of the test set, in order."""
    sampler = ShardSampler(
        len(dataset) if isinstance(dataset, Sized) else 0, num_replicas=num_replicas, rank=rank
    )
    return DataLoader(
        dataset,
        batch_size=batch_size,
        sampler=sampler,
        num_workers=num_workers,
        pin_memory=pin_memory and torch.cuda.is_available(),
        worker_init_fn=seed_worker,
        generator=torch.Generator().manual_seed(0),
    )


def with_color_jitter(transform: T.Compose, factors: list[float]) -> T.Compose:
    """``transform`` with its ColorJitter step set to ``factors`` (brightness, contrast,
    saturation, hue): a recipe's own jitter, e.g. ProxylessNAS's ``distort_color='strong'``
    (0.4, 0.4, 0.4, 0.1) where ``nas.data`` applies (0.4, 0.4, 0.4, 0.2). Nothing changes where
    the transform has no jitter (images of 64 pixels or fewer get none)."""
    steps = [
        T.ColorJitter(*factors) if isinstance(step, T.ColorJitter) else step
        for step in transform.transforms
    ]
    return T.Compose(steps)
