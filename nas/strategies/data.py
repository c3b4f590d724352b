"""The search data: the two splits of the training set, read resumably at any world size.

Third stage of the pipeline (``nas.strategies``). The reference ``train_search.py`` of DARTS (Liu
et al., ICLR 2019) splits the training set by index into a weight half and an architecture half
(DrNAS / PC-DARTS take per-class subsets of ImageNet instead; an image folder may bring its own
held-out folder). Each split is read by an ``EpochSampler``: the order of an epoch is a pure
function of (seed, epoch, split), each image's augmentation comes from a seed of its own
position in that order (``SeededItems``), and every rank takes a contiguous share of each global
batch, so an epoch is the same whatever the number of processes and wherever a resumed run
restarts it (the seed streams: ``nas.run.seeds``). ``RandomBatchSampler`` draws a fresh random
batch of a split at every step instead (``arch_batch=random``), each a function of its position.

The splits read a training set of ``nas.data``: ``search_split`` (DARTS's index halves, the
first ``train_portion`` for the weights, both with the training augmentation) and
``imagenet_search_subsets`` (DrNAS / PC-DARTS's 10% / 2.5% of every ImageNet class).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig
from torch.utils.data import DataLoader, Dataset, Sampler, Subset

from nas import distributed as D
from nas.data import build_dataset, train_transform
from nas.data.loaders import seed_worker
from nas.run.seeds import LOADER_START_STRIDE, LOADER_WORKERS, stream_seed


def search_split(
    dataset: Dataset[Any], *, train_portion: float = 0.5
) -> tuple[Subset[Any], Subset[Any]]:
    """Split a training set by index into (weights, architecture) halves, as DARTS does.

    The first ``floor(train_portion * N)`` items train the weights, the rest the architecture;
    both keep the dataset's transform (the references use the training augmentation for both).
    Deterministic: shuffle through the loaders. ``train_portion=1.0``: no split, both are the
    whole set (single-level methods that train on every image, as SNAS's reference does).
    """
    if (
        isinstance(train_portion, bool)
        or not isinstance(train_portion, (int, float))
        or not 0.0 < train_portion <= 1.0
    ):
        raise ValueError(f"train_portion must be a number in (0, 1], got {train_portion!r}")
    num_items = len(dataset)  # type: ignore[arg-type]
    if train_portion == 1.0:
        return Subset(dataset, range(num_items)), Subset(dataset, range(num_items))
    split = int(math.floor(train_portion * num_items))
    if split == 0 or split == num_items:
        raise ValueError(
            f"train_portion={train_portion} leaves an empty half of a dataset of {num_items} "
            "items; expected both halves non-empty"
        )
    return Subset(dataset, range(split)), Subset(dataset, range(split, num_items))


def _targets(dataset: Dataset[Any]) -> np.ndarray:
    """Labels of every item without loading images (``.targets``, through Subsets)."""
    if isinstance(dataset, Subset):
        return _targets(dataset.dataset)[np.asarray(dataset.indices, dtype=np.int64)]
    targets = getattr(dataset, "targets", None)
    if targets is None:
        raise ValueError(
            f"{type(dataset).__name__} has no .targets; expected a dataset with per-item labels "
            "(ImageFolder, the CIFAR datasets) or a Subset of one"
        )
    return np.asarray(targets, dtype=np.int64)


def imagenet_search_subsets(
    dataset: Dataset[Any],
    *,
    weight_fraction: float = 0.1,
    arch_fraction: float = 0.025,
    seed: int = 0,
) -> tuple[Subset[Any], Subset[Any]]:
    """Per-class random (weights, architecture) subsets for direct ImageNet search (DrNAS).

    As DrNAS and PC-DARTS sample them for their ImageNet search.

    From each class, ``round(weight_fraction * n)`` images train the weights and
    ``round(arch_fraction * n)`` other images the architecture (at least one each where the
    class has room), drawn with ``numpy.random.default_rng(seed)``: the same seed gives the
    same subsets on every machine. Both keep the dataset's (training) transform.
    """
    for key, value in (("weight_fraction", weight_fraction), ("arch_fraction", arch_fraction)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
            raise ValueError(f"{key} must be a number in (0, 1), got {value!r}")
    if weight_fraction + arch_fraction > 1:
        raise ValueError(
            f"weight_fraction + arch_fraction = {weight_fraction + arch_fraction} exceeds 1; "
            "expected disjoint subsets"
        )
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    targets = _targets(dataset)
    rng = np.random.default_rng(seed)
    # One stable sort instead of a scan per class: 1000 scans of 1.28M labels would take seconds.
    by_class = np.argsort(targets, kind="stable")
    _, counts = np.unique(targets, return_counts=True)
    weight_indices, arch_indices = [], []
    for members in np.split(by_class, np.cumsum(counts)[:-1]):
        members = rng.permutation(members)
        n = len(members)
        # Round half up, keep one image per subset where possible, never overlap.
        num_weight = min(n, max(1, math.floor(weight_fraction * n + 0.5)))
        num_arch = min(n - num_weight, max(1, math.floor(arch_fraction * n + 0.5)))
        weight_indices.append(members[:num_weight])
        arch_indices.append(members[num_weight : num_weight + num_arch])
    weights = np.sort(np.concatenate(weight_indices)).tolist()
    arch = np.sort(np.concatenate(arch_indices)).tolist()
    return Subset(dataset, weights), Subset(dataset, arch)


def search_data(data: DictConfig) -> tuple[Dataset[Any], Dataset[Any]]:
    """(weight split, architecture split) of the training set, with training augmentation."""
    name = str(data.name)
    transform = train_transform(
        name,
        cutout=int(data.get("cutout", 0) or 0),
        color_jitter=bool(data.get("color_jitter", True)),
        image_size=data.get("image_size"),
    )
    train_set = build_dataset(
        name,
        root=data.get("root"),
        train=True,
        transform=transform,
        download=bool(data.get("download", False)),
    )
    max_items = data.get("max_items")
    if max_items is not None:  # the first N images only: smoke tests, tiny studies
        if isinstance(max_items, bool) or not isinstance(max_items, int) or max_items < 2:
            raise ValueError(f"data.max_items must be an int >= 2 or null, got {max_items!r}")
        train_set = Subset(train_set, range(min(max_items, len(train_set))))  # type: ignore[arg-type]
    if data.get("val_root"):  # an image folder's held-out folder: the architecture split
        arch_set = build_dataset(
            name, root=data.root, val_root=data.val_root, train=False, transform=transform
        )
        return train_set, arch_set
    if name == "imagenet":  # DrNAS / PC-DARTS: per-class subsets, not halves
        return imagenet_search_subsets(
            train_set,
            weight_fraction=float(data.get("weight_fraction", 0.1)),
            arch_fraction=float(data.get("arch_fraction", 0.025)),
            # the subsets are a property of the data, not of the run: every seed searches
            # on the same images (DrNAS sampled them once, offline)
            seed=int(data.get("subset_seed", 0)),
        )
    return search_split(train_set, train_portion=float(data.train_portion))


class EpochSampler(Sampler[list[tuple[int, int]]]):
    """This rank's share of every global batch of an epoch, as ``(index, augmentation seed)``.

    The order of an epoch is a permutation fixed by (seed, epoch, stream), the same on every
    rank; global batch b is positions [b * B, (b + 1) * B) of it, split into ``world_size``
    contiguous shares (sizes differ by at most one: ``torch.tensor_split``). Every position
    carries its own augmentation seed, so an image looks the same whoever loads it. A final
    global batch with fewer than ``min_batch`` images (one per micro-batch of every rank) is
    left out. ``set_epoch(epoch, start_batch)`` starts anywhere in an epoch."""

    def __init__(
        self,
        num_items: int,
        *,
        seed: int,
        batch_size: int,
        stream: int,
        rank: int = 0,
        world_size: int = 1,
        min_batch: int = 1,
    ) -> None:
        self.num_items = num_items
        self.seed = seed
        self.batch_size = batch_size
        self.stream = stream
        self.rank = rank
        self.world_size = world_size
        self.min_batch = min_batch
        self.epoch = 0
        self.start_batch = 0

    def set_epoch(self, epoch: int, start_batch: int = 0) -> None:
        self.epoch = epoch
        self.start_batch = start_batch

    @property
    def num_batches(self) -> int:
        """Global batches in a whole epoch."""
        full, rest = divmod(self.num_items, self.batch_size)
        return full + (1 if rest >= self.min_batch else 0)

    def global_size(self, batch: int) -> int:
        return min(self.batch_size, self.num_items - batch * self.batch_size)

    def global_sizes(self) -> list[int]:
        """Images in each global batch that ``__iter__`` yields a share of."""
        return [self.global_size(b) for b in range(self.start_batch, self.num_batches)]

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        g = torch.Generator().manual_seed(stream_seed(self.seed, self.epoch, self.stream))
        order = torch.randperm(self.num_items, generator=g)
        item_seeds = torch.randint(2**62, (self.num_items,), generator=g)
        for b in range(self.start_batch, self.num_batches):
            positions = torch.arange(b * self.batch_size, b * self.batch_size + self.global_size(b))
            mine = torch.tensor_split(positions, self.world_size)[self.rank]
            yield list(zip(order[mine].tolist(), item_seeds[mine].tolist()))

    def __len__(self) -> int:
        return max(0, self.num_batches - self.start_batch)


class RandomBatchSampler(EpochSampler):
    """A fresh random global batch of the split at every step: ``num_batches`` draws, each the
    first ``batch_size`` positions of a permutation of its own, fixed by (seed, epoch, stream,
    step), with their augmentation seeds. What the references' ``next(iter(valid_queue))`` on a
    shuffled loader does (DrNAS, PC-DARTS: a batch drawn anew each step, batches overlapping
    across steps), as a pure function of the position, so a resumed run draws what the
    uninterrupted one did. Every rank takes its contiguous share of each draw."""

    def __init__(self, num_items: int, *, num_batches: int, **kwargs: Any) -> None:
        super().__init__(num_items, **kwargs)
        if self.global_size(0) < self.min_batch:
            raise ValueError(
                f"the architecture split holds {num_items} images, fewer than the "
                f"{self.min_batch} a step needs (one per micro-batch of every process)"
            )
        self.draws = num_batches

    @property
    def num_batches(self) -> int:
        return self.draws

    def global_size(self, batch: int) -> int:
        return min(self.batch_size, self.num_items)

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        size = self.global_size(0)
        for b in range(self.start_batch, self.num_batches):
            seed = stream_seed(self.seed, self.epoch, self.stream, b)
            g = torch.Generator().manual_seed(seed)
            order = torch.randperm(self.num_items, generator=g)[:size]
            item_seeds = torch.randint(2**62, (size,), generator=g)
            mine = torch.tensor_split(torch.arange(size), self.world_size)[self.rank]
            yield list(zip(order[mine].tolist(), item_seeds[mine].tolist()))


class SeededItems(Dataset[Any]):
    """``dataset`` read with ``(index, seed)`` keys: torch's generator is seeded with ``seed``
    while the item is loaded (torchvision's random transforms and our cutout draw from it), so
    an image's augmentation depends on its position in the epoch only, not on the rank, the
    data-loader worker or where a resumed run restarted."""

    def __init__(self, dataset: Dataset[Any]) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, key: tuple[int, int]) -> Any:
        index, seed = key
        # the CPU generator only (torch.manual_seed would also reseed CUDA: 85 us per image)
        generator = torch.default_generator
        saved = generator.get_state()
        generator.manual_seed(seed)
        try:
            return self.dataset[index]
        finally:
            generator.set_state(saved)


def epoch_loader(
    dataset: Dataset[Any],
    cfg: DictConfig,
    stream: int,
    env: D.DistEnv,
    min_batch: int,
    *,
    random_draws: int | None = None,
) -> DataLoader[Any]:
    """The loader of one split: ``EpochSampler`` batches of ``SeededItems`` (with
    ``random_draws``: that many ``RandomBatchSampler`` draws per epoch instead)."""
    common: dict[str, Any] = {
        "seed": int(cfg.seed),
        "batch_size": int(cfg.batch_size),
        "stream": stream,
        "rank": env.rank,
        "world_size": env.world_size,
        "min_batch": min_batch,
    }
    num_items = len(dataset)  # type: ignore[arg-type]
    sampler = (
        EpochSampler(num_items, **common)
        if random_draws is None
        else RandomBatchSampler(num_items, num_batches=random_draws, **common)
    )
    return DataLoader(
        SeededItems(dataset),
        batch_sampler=sampler,
        num_workers=int(cfg.data.num_workers),
        pin_memory=bool(cfg.data.pin_memory) and torch.cuda.is_available(),
        worker_init_fn=seed_worker,
        generator=torch.Generator(),
    )


def epoch_sampler(loader: DataLoader[Any]) -> EpochSampler:
    sampler = loader.batch_sampler
    assert isinstance(sampler, EpochSampler)
    return sampler


def start_epoch(
    loader: DataLoader[Any], seed: int, epoch: int, start_batch: int, stream: int
) -> Iterator[tuple[Any, int]]:
    """This rank's shares of the epoch's global batches from ``start_batch`` on, each with the
    size of its global batch."""
    sampler = epoch_sampler(loader)
    sampler.set_epoch(epoch, start_batch)
    assert loader.generator is not None
    # Worker seeds derive from this generator: fix them by (seed, epoch, position).
    loader.generator.manual_seed(
        stream_seed(seed, epoch, LOADER_WORKERS + stream + LOADER_START_STRIDE * start_batch)
    )
    return zip(iter(loader), sampler.global_sizes())
