"""Data stage: datasets, the readers of their formats, transforms, loaders and the embedded
quickstart data.

Pipeline: ``nas.data`` feeds ``nas.strategies`` (which splits the training set into weight and
architecture halves, ``nas.strategies.data.search_split``, or per-class ImageNet subsets,
``imagenet_search_subsets``) and ``nas.training`` (full training and test sets). Datasets are
registered by name in ``DATASETS`` (``nas.data.datasets``): ``cifar10``, ``cifar100``,
``cifar10-mini`` (embedded, no path), ``imagenet``, ``imagenet16-120`` and ``imagefolder`` (the
user's own class sub-folders, any image size); ``nas.data.formats`` reads their files.

    from nas.data import build_dataset, train_transform, make_loader

    data = build_dataset("cifar10-mini", train=True, transform=train_transform("cifar10-mini"))
    loader = make_loader(data, batch_size=64, shuffle=True, seed=0)
"""

from nas.data.datasets import DATASETS, DatasetSpec, build_dataset, dataset_info
from nas.data.embedded import load_cifar10_mini
from nas.data.formats import ImageArrayDataset, read_cifar_folder, read_imagenet16
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
    "load_cifar10_mini",
    "make_loader",
    "read_cifar_folder",
    "read_imagenet16",
    "seed_worker",
    "train_transform",
]
