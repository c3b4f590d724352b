"""DataLoaders with reproducible order and augmentation, on one process or under torchrun.

Data stage (``nas.data``): the loaders ``nas.strategies`` and ``nas.training`` iterate over. The
references (DARTS, DrNAS, DARTS-PT) seed nothing per worker and shuffle from the global RNG;
here every source of randomness hangs off the loader's ``seed``:

* order: a ``torch.Generator`` seeded with ``seed`` (``loader.generator``; save its
  ``get_state()`` in a checkpoint to resume mid-run), or, with ``distributed=True``, a
  ``DistributedSampler(seed=seed)``, identical on every rank so the ranks split one permutation;
* augmentation in workers: each worker's torch, numpy and ``random`` generators are seeded from
  the loader's generator and the worker id (``seed_worker``), so two loaders with the same seed
  produce the same augmented batches. Without workers the transforms draw from the main
  process's torch generator (seed it with ``torch.manual_seed``).

Under ``distributed=True`` call ``loader.sampler.set_epoch(epoch)`` at the start of every epoch,
as torchvision's reference does; without it every epoch repeats the first epoch's order.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler


def seed_worker(worker_id: int) -> None:
    """``worker_init_fn``: seed the worker's python ``random``, numpy and torch generators.

    The DataLoader gives each worker the seed ``base_seed + worker_id``, with ``base_seed``
    drawn from the loader's generator when the iterator starts; everything is derived from it,
    so workers differ from each other and epochs differ from each other, reproducibly.
    """
    seed = torch.initial_seed()
    # numpy's legacy seed is 32-bit: hash the 64-bit seed down rather than truncate it.
    np.random.seed(np.random.SeedSequence(seed).generate_state(1))
    random.seed(seed)
    torch.manual_seed(seed)


def _check_int(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")


def make_loader(
    dataset: Dataset[Any],
    *,
    batch_size: int,
    shuffle: bool,
    seed: int,
    num_workers: int = 0,
    pin_memory: bool = False,
    persistent_workers: bool = False,
    drop_last: bool = False,
    distributed: bool = False,
    num_replicas: int | None = None,
    rank: int | None = None,
) -> DataLoader[Any]:
    """A DataLoader whose order and augmentation are fixed by ``seed``.

    ``pin_memory`` takes effect only where CUDA is available, ``persistent_workers`` only with
    ``num_workers > 0`` (a config can keep both on for every machine). ``distributed=True``
    shards the data with a ``DistributedSampler`` (``shuffle`` and ``drop_last`` go to it; call
    ``loader.sampler.set_epoch(epoch)`` every epoch); ``num_replicas`` / ``rank`` default to
    the initialised process group's. Each rank's workers get their own augmentation stream.
    """
    _check_int("batch_size", batch_size, 1)
    _check_int("num_workers", num_workers, 0)
    _check_int("seed", seed, 0)
    sampler: DistributedSampler[Any] | None = None
    generator_seed = seed
    if distributed:
        if num_replicas is None or rank is None:
            if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
                raise ValueError(
                    "distributed=True needs an initialised torch.distributed process group "
                    "(launch with torchrun) or explicit num_replicas and rank"
                )
            num_replicas = (
                torch.distributed.get_world_size() if num_replicas is None else num_replicas
            )
            rank = torch.distributed.get_rank() if rank is None else rank
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank must be in [0, {num_replicas}), got {rank}")
        sampler = DistributedSampler(
            dataset,
            num_replicas=num_replicas,
            rank=rank,
            shuffle=shuffle,
            seed=seed,
            drop_last=drop_last,
        )
        # Same sampler seed on every rank (one shared permutation), but per-rank augmentation.
        generator_seed = int(np.random.SeedSequence([seed, rank]).generate_state(1)[0])
    generator = torch.Generator()
    generator.manual_seed(generator_seed)
    return DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=shuffle if sampler is None else False,
        sampler=sampler,
        num_workers=num_workers,
        pin_memory=pin_memory and torch.cuda.is_available(),
        persistent_workers=persistent_workers and num_workers > 0,
        drop_last=drop_last,
        worker_init_fn=seed_worker,
        generator=generator,
    )
