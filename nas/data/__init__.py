"""Data stage: datasets, the search split, transforms, loaders and the embedded quickstart data.

Pipeline: ``nas.data`` feeds ``nas.search`` (the weight / architecture halves of the training
set, ``search_split``; per-class ImageNet subsets, ``imagenet_search_subsets``) and
``nas.train`` (full training and test sets). Datasets are registered by name in ``DATASETS``:
``cifar10``, ``cifar100``, ``cifar10-mini`` (embedded, no path), ``imagenet``,
``imagenet16-120`` and ``imagefolder`` (the user's own class sub-folders, any image size).

    from nas.data import build_dataset, search_split, train_transform, make_loader

    data = build_dataset("cifar10-mini", train=True, transform=train_transform("cifar10-mini"))
    weights, arch = search_split(data, train_portion=0.5)
    loader = make_loader(weights, batch_size=64, shuffle=True, seed=0)
"""

from nas.data.datasets import (
    DATASETS,
    DatasetSpec,
    ImageArrayDataset,
    build_dataset,
    dataset_info,
    imagenet_search_subsets,
    read_cifar_folder,
    read_imagenet16,
    search_split,
)
from nas.data.embedded import load_cifar10_mini
from nas.data.loaders import make_loader, seed_worker
from nas.data.transforms import Cutout, eval_transform, train_transform

__all__ = [
    "DATASETS",
    "Cutout",
    "DatasetSpec",
    "ImageArrayDataset",
    "build_dataset",
    "dataset_info",
    "eval_transform",
    "imagenet_search_subsets",
    "load_cifar10_mini",
    "make_loader",
    "read_cifar_folder",
    "read_imagenet16",
    "search_split",
    "seed_worker",
    "train_transform",
]
