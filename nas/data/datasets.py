"""The dataset registry of the search and retraining stages: every dataset by name.

Data stage (``nas.data``): feeds ``nas.strategies`` (its weight / architecture splits,
``nas.strategies.data``) and ``nas.training`` (the full training set, the test set). Every
dataset is registered by name in ``DATASETS`` with its class count, image side, channel
statistics and builder (the readers of the formats: ``nas.data.formats``);
``build_dataset(name, ...)`` is the one entry point, ``dataset_info`` the shape of a dataset
without reading it.

* ``cifar10`` / ``cifar100``: the "python version" folders of Krizhevsky (2009)
  (``cifar-10-batches-py``, ``cifar-100-python``).
* ``cifar10-mini``: 4,000 + 1,000 real CIFAR-10 images embedded in the package
  (``nas/data/embedded.py``), the quickstart default.
* ``imagenet``: the ImageFolder layout ``train/`` and ``val/`` (class folders in both), as the
  DARTS and DrNAS ImageNet scripts read it.
* ``imagenet16-120``: the 16x16 down-sampled ImageNet restricted to its first 120 classes, as
  NAS-Bench-201 (Dong & Yang, ICLR 2020) builds it (``xautodl`` ``ImageNet16``).
* ``imagefolder``: the user's own data, a folder of class sub-folders (images of any size and
  any format PIL reads) for training and search, and optionally a second such folder
  (``val_root``) of held-out images: the test set of ``nas-train``, the architecture split of
  ``nas-search`` instead of the index split. The side the networks see (``image_size``) is a
  setting; the transforms follow from it (``nas.data.transforms``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch.utils.data import Dataset

from nas.data.formats import (
    Builder,
    Transform,
    build_cifar,
    build_cifar10_mini,
    build_imagefolder,
    build_imagenet,
    build_imagenet16,
    class_folders,
)
from nas.registry import Registry


@dataclass(frozen=True)
class DatasetSpec:
    """What the toolkit knows about a dataset: its shape, its statistics, how to build it.

    ``build(root, train, transform, download)`` returns the dataset; ``family`` picks the
    augmentation recipe (``cifar``, ``imagenet``, ``imagenet16``); ``needs_root`` is False only
    for the embedded dataset.
    """

    name: str
    num_classes: int
    image_size: int
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    family: str
    build: Builder
    needs_root: bool = True


DATASETS: Registry[DatasetSpec] = Registry("dataset")

# Channel statistics of the reference code: DARTS / DrNAS / DARTS-PT ``utils.py`` for CIFAR,
# the torchvision ImageNet values, NAS-Bench-201's ``get_datasets`` for ImageNet16-120.
CIFAR10_MEAN = (0.49139968, 0.48215827, 0.44653124)
CIFAR10_STD = (0.24703233, 0.24348505, 0.26158768)
CIFAR100_MEAN = (0.5071, 0.4865, 0.4409)
CIFAR100_STD = (0.2673, 0.2564, 0.2762)
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
IMAGENET16_MEAN = (122.68 / 255, 116.66 / 255, 104.01 / 255)
IMAGENET16_STD = (63.22 / 255, 61.26 / 255, 65.09 / 255)


DATASETS.register("cifar10")(
    DatasetSpec(
        name="cifar10",
        num_classes=10,
        image_size=32,
        mean=CIFAR10_MEAN,
        std=CIFAR10_STD,
        family="cifar",
        build=build_cifar("cifar10"),
    )
)
DATASETS.register("cifar10-mini")(
    DatasetSpec(
        name="cifar10-mini",
        num_classes=10,
        image_size=32,
        mean=CIFAR10_MEAN,
        std=CIFAR10_STD,
        family="cifar",
        build=build_cifar10_mini,
        needs_root=False,
    )
)
DATASETS.register("cifar100")(
    DatasetSpec(
        name="cifar100",
        num_classes=100,
        image_size=32,
        mean=CIFAR100_MEAN,
        std=CIFAR100_STD,
        family="cifar",
        build=build_cifar("cifar100"),
    )
)
DATASETS.register("imagenet")(
    DatasetSpec(
        name="imagenet",
        num_classes=1000,
        image_size=224,
        mean=IMAGENET_MEAN,
        std=IMAGENET_STD,
        family="imagenet",
        build=build_imagenet,
    )
)
DATASETS.register("imagefolder")(
    DatasetSpec(
        name="imagefolder",
        num_classes=0,  # the number of class folders (dataset_info)
        image_size=0,  # data.image_size: the side the networks see
        mean=IMAGENET_MEAN,
        std=IMAGENET_STD,
        family="folder",
        build=build_imagefolder,
    )
)
DATASETS.register("imagenet16-120")(
    DatasetSpec(
        name="imagenet16-120",
        num_classes=120,
        image_size=16,
        mean=IMAGENET16_MEAN,
        std=IMAGENET16_STD,
        family="imagenet16",
        build=build_imagenet16,
    )
)


# --------------------------------------------------------------------------------------------
# Public entry points


def build_dataset(
    name: str,
    *,
    root: str | os.PathLike[str] | None = None,
    train: bool,
    transform: Transform | None = None,
    download: bool = False,
    val_root: str | os.PathLike[str] | None = None,
) -> Dataset[Any]:
    """The training (``train=True``) or test split of the dataset registered as ``name``.

    ``imagefolder``: ``root`` is the folder of class sub-folders to train on; the test split is
    the folder ``val_root`` (same class folders). Other datasets take no ``val_root``.

    ``root``: the dataset's folder (for CIFAR, the ``cifar-10-batches-py`` folder or its
    parent; for ImageNet, the folder holding ``train/`` and ``val/``); ``None`` for the embedded
    ``cifar10-mini``. ``download=True`` fetches CIFAR-10/100 into ``root`` when its files are
    missing (needs network). Items are ``(transform(image), label)``; without a transform the
    image is a PIL image. Use ``train_transform(name)`` / ``eval_transform(name)``.
    """
    spec = DATASETS.get(name)
    if not isinstance(train, bool):
        raise ValueError(f"train must be True or False, got {train!r}")
    if not spec.needs_root:
        if root is not None:
            raise ValueError(
                f"dataset {name!r} is embedded in the package; expected root=None, got {root!r}"
            )
        return spec.build(None, train, transform, download)
    if root is None or str(root) == "":
        raise ValueError(f"dataset {name!r} needs root=<its folder>; got {root!r}")
    if spec.family == "folder":
        if not train:
            if val_root is None or str(val_root) == "":
                raise ValueError(
                    f"dataset {name!r} has no held-out images without val_root; expected "
                    "data.val_root=<a folder of the same class sub-folders>"
                )
            _check_same_classes(Path(root).expanduser(), Path(val_root).expanduser())
            root = val_root
    elif val_root is not None:
        raise ValueError(f"val_root applies to imagefolder data only; {name!r} got {val_root!r}")
    # Absolute, so that messages name the folder even when a launcher changed directory.
    return spec.build(Path(root).expanduser().absolute(), train, transform, download)


def _check_same_classes(root: Path, val_root: Path) -> None:
    """A class missing from one folder would shift every later label: refuse it."""
    if not (root.is_dir() and val_root.is_dir()):
        return  # the builder names the missing folder
    ours, theirs = class_folders(root), class_folders(val_root)
    if ours != theirs:
        raise ValueError(
            f"class folders of {root.absolute()} ({len(ours)}) and {val_root.absolute()} "
            f"({len(theirs)}) differ (only in the first: {sorted(set(ours) - set(theirs))[:3]}, "
            f"only in the second: {sorted(set(theirs) - set(ours))[:3]}); expected the same "
            "classes in both"
        )


def dataset_info(name: str, data: Any = None) -> dict[str, Any]:
    """``num_classes``, ``image_size`` (input side in pixels), channel ``mean`` and ``std``.

    ``imagefolder`` needs its data config ``data`` (a mapping with ``root`` and ``image_size``):
    the classes are its class folders, the size is the setting."""
    spec = DATASETS.get(name)
    num_classes, image_size = spec.num_classes, spec.image_size
    if spec.family == "folder":
        root = data.get("root") if data is not None else None
        if root is None or str(root) == "":
            raise ValueError(f"dataset {name!r} needs data.root=<a folder of class sub-folders>")
        folder = Path(str(root)).expanduser().absolute()
        if not folder.is_dir():
            raise FileNotFoundError(
                f"image folder {folder} does not exist; expected a folder of class sub-folders"
            )
        num_classes = len(class_folders(folder))
        image_size = check_image_size(data.get("image_size"))
    return {
        "num_classes": num_classes,
        "image_size": image_size,
        "mean": spec.mean,
        "std": spec.std,
    }


def check_image_size(value: Any) -> int:
    """``data.image_size`` of an image folder: the side of the square the networks see. The
    DARTS networks halve the feature map twice, and above 64 pixels their ImageNet stem three
    times more: the side must divide evenly (by 4 up to 64 pixels, by 32 above)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 8:
        raise ValueError(f"data.image_size must be an int >= 8 (pixels), got {value!r}")
    step = 4 if value <= 64 else 32
    if value % step:
        raise ValueError(
            f"data.image_size={value} must be a multiple of {step} (the networks halve the "
            f"image {'2' if step == 4 else '5'} times); e.g. {value - value % step or step}"
        )
    return value
