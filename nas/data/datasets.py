"""Datasets of the search and retraining stages, the search split and the ImageNet search subsets.

Data stage (``nas.data``): feeds ``nas.search`` (the weight / architecture halves) and
``nas.train`` (the full training set, the test set). Every dataset is registered by name in
``DATASETS``; ``build_dataset(name, ...)`` is the one entry point.

* ``cifar10`` / ``cifar100``: the "python version" folders of Krizhevsky (2009)
  (``cifar-10-batches-py``, ``cifar-100-python``). Read here rather than by torchvision, which
  checks the MD5 of every original batch file and refuses a folder holding only some of them.
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

Search data follow the references: DARTS (Liu et al., ICLR 2019) splits the training set by
index, the first ``train_portion`` for the weights and the rest for the architecture, both with
the training augmentation (``search_split``); DrNAS / PC-DARTS search directly on ImageNet with
10% / 2.5% of every class (``imagenet_search_subsets``).

The batch files are Python pickles, as the formats define them: only read files you trust.
"""

from __future__ import annotations

import math
import os
import pickle
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image
from torch.utils.data import Dataset, Subset
from torchvision.datasets import ImageFolder

from nas.data.embedded import load_cifar10_mini
from nas.registry import Registry

Transform = Callable[[Any], Any]

CIFAR10_CLASSES = (
    "airplane",
    "automobile",
    "bird",
    "cat",
    "deer",
    "dog",
    "frog",
    "horse",
    "ship",
    "truck",
)


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
    build: Callable[[Path | None, bool, Transform | None, bool], Dataset[Any]]
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


class ImageArrayDataset(Dataset[tuple[Any, int]]):
    """Images held in memory as uint8 ``data`` [N, H, W, 3] with int ``targets``, as torchvision.

    An item is ``(transform(PIL image), label)``; without a transform the PIL image itself, so
    that torchvision's transforms apply unchanged.
    """

    def __init__(
        self,
        *,
        name: str,
        data: np.ndarray,
        targets: list[int],
        classes: Sequence[str],
        train: bool,
        transform: Transform | None = None,
        root: Path | None = None,
    ) -> None:
        assert data.dtype == np.uint8 and data.ndim == 4 and data.shape[-1] == 3, data.shape
        assert len(targets) == len(data), (len(targets), len(data))
        self.name = name
        self.data = data
        self.targets = targets
        self.classes = list(classes)
        self.train = train
        self.transform = transform
        self.root = root

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        image: Any = Image.fromarray(self.data[index])
        if self.transform is not None:
            image = self.transform(image)
        return image, self.targets[index]

    def __repr__(self) -> str:
        split = "train" if self.train else "test"
        where = f", root={str(self.root)!r}" if self.root is not None else ""
        return f"{type(self).__name__}({self.name!r}, {split}, {len(self)} images{where})"


# --------------------------------------------------------------------------------------------
# Reading the file formats


def _load_pickle(path: Path, *, encoding: str, expected: str) -> dict[str, Any]:
    """Unpickle a batch file into a dict with ``str`` keys; one-line ValueError if unreadable."""
    try:
        with open(path, "rb") as f:
            entry = pickle.load(f, encoding=encoding)
    except Exception as error:  # a truncated or corrupt pickle raises any of many types
        reason = " ".join(f"{type(error).__name__}: {error}".split())
        raise ValueError(
            f"{path} is truncated or corrupt ({reason}); expected a pickled dict with {expected}"
        ) from None
    if not isinstance(entry, dict):
        raise ValueError(f"{path} holds a {type(entry).__name__}; expected a dict with {expected}")
    # Files pickled by Python 2 and read with encoding="bytes" have bytes keys.
    return {k.decode("latin1") if isinstance(k, bytes) else k: v for k, v in entry.items()}


def _images_and_labels(
    path: Path,
    entry: dict[str, Any],
    *,
    label_key: str,
    side: int,
    label_range: tuple[int, int],
) -> tuple[np.ndarray, list[int]]:
    """Check one batch and turn its N x (3*side*side) planes into [N, side, side, 3] uint8."""
    expected = f"'data' (N x {3 * side * side} uint8) and {label_key!r}"
    if "data" not in entry or label_key not in entry:
        raise ValueError(f"{path} has keys {sorted(entry)}; expected {expected}")
    data = np.asarray(entry["data"])
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3 * side * side:
        raise ValueError(f"{path}: 'data' is {data.dtype} {data.shape}; expected {expected}")
    try:
        labels = [int(v) for v in entry[label_key]]
    except (TypeError, ValueError):
        raise ValueError(
            f"{path}: {label_key!r} is not a list of ints; expected {expected}"
        ) from None
    if len(labels) != len(data):
        raise ValueError(f"{path}: {len(labels)} labels for {len(data)} images; expected as many")
    low, high = label_range
    bad = [v for v in labels if not low <= v <= high]
    if bad:
        raise ValueError(f"{path}: label {bad[0]} outside {low}..{high}")
    # Row-major R, G, B planes -> height x width x channel, as PIL and torchvision expect.
    images = np.ascontiguousarray(data.reshape(-1, 3, side, side).transpose(0, 2, 3, 1))
    return images, labels


def _find_folder(root: Path, base_folder: str, *, marker_files: Sequence[str], what: str) -> Path:
    """``root`` itself or ``root / base_folder``, whichever holds the dataset's files."""
    if not root.exists():
        raise FileNotFoundError(
            f"{what} folder {root} does not exist; "
            f"expected the {base_folder!r} folder or its parent"
        )
    if not root.is_dir():
        raise FileNotFoundError(
            f"{what} path {root} is not a folder; expected the {base_folder!r} folder or its parent"
        )
    nested = root / base_folder
    if nested.is_dir() and not any((root / name).is_file() for name in marker_files):
        return nested
    return root


def _read_batches(
    folder: Path, names: Sequence[str], *, what: str, read: Callable[[Path], tuple[Any, Any]]
) -> tuple[np.ndarray, list[int]]:
    present = [folder / name for name in names if (folder / name).is_file()]
    if not present:
        raise FileNotFoundError(
            f"no {what} batch file in {folder}; expected one or more of {', '.join(names)}"
        )
    parts = [read(path) for path in present]
    images = np.concatenate([p[0] for p in parts]) if len(parts) > 1 else parts[0][0]
    return images, [label for p in parts for label in p[1]]


@dataclass(frozen=True)
class _CifarFormat:
    name: str
    base_folder: str
    train_files: tuple[str, ...]
    test_files: tuple[str, ...]
    meta_file: str
    label_key: str
    names_key: str
    num_classes: int
    url: str
    archive: str
    archive_md5: str


_CIFAR10 = _CifarFormat(
    name="CIFAR-10",
    base_folder="cifar-10-batches-py",
    train_files=tuple(f"data_batch_{i}" for i in range(1, 6)),
    test_files=("test_batch",),
    meta_file="batches.meta",
    label_key="labels",
    names_key="label_names",
    num_classes=10,
    url="https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
    archive="cifar-10-python.tar.gz",
    archive_md5="c58f30108f718f92721af3b95e74349a",
)
_CIFAR100 = _CifarFormat(
    name="CIFAR-100",
    base_folder="cifar-100-python",
    train_files=("train",),
    test_files=("test",),
    meta_file="meta",
    label_key="fine_labels",
    names_key="fine_label_names",
    num_classes=100,
    url="https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz",
    archive="cifar-100-python.tar.gz",
    archive_md5="eb9058c3a382ffc7106e4002c42a8d85",
)


_CIFAR_FORMATS = {"cifar10": _CIFAR10, "cifar100": _CIFAR100}


def read_cifar_folder(
    root: str | os.PathLike[str], *, train: bool, variant: str = "cifar10"
) -> tuple[np.ndarray, list[int], list[str], Path]:
    """Read a CIFAR "python version" folder: (images [N,32,32,3] uint8, labels, classes, folder).

    ``root`` is the ``cifar-10-batches-py`` / ``cifar-100-python`` folder or its parent. Any
    subset of the batch files is accepted, read in the standard order.
    """
    fmt = _CIFAR_FORMATS.get(variant)
    if fmt is None:
        raise ValueError(f"unknown CIFAR variant {variant!r}; expected 'cifar10' or 'cifar100'")
    names = fmt.train_files if train else fmt.test_files
    folder = _find_folder(
        Path(root).expanduser(),
        fmt.base_folder,
        marker_files=(*fmt.train_files, *fmt.test_files),
        what=fmt.name,
    )

    def read(path: Path) -> tuple[np.ndarray, list[int]]:
        entry = _load_pickle(path, encoding="bytes", expected=f"'data' and {fmt.label_key!r}")
        return _images_and_labels(
            path,
            entry,
            label_key=fmt.label_key,
            side=32,
            label_range=(0, fmt.num_classes - 1),
        )

    split = "training" if train else "test"
    images, labels = _read_batches(folder, names, what=f"{fmt.name} {split}", read=read)
    return images, labels, _cifar_classes(folder, fmt), folder


def _cifar_classes(folder: Path, fmt: _CifarFormat) -> list[str]:
    meta = folder / fmt.meta_file
    if not meta.is_file():
        return list(CIFAR10_CLASSES) if fmt is _CIFAR10 else [str(i) for i in range(100)]
    entry = _load_pickle(meta, encoding="bytes", expected=repr(fmt.names_key))
    names = entry.get(fmt.names_key)
    if not isinstance(names, list) or len(names) != fmt.num_classes:
        raise ValueError(f"{meta}: expected {fmt.num_classes} class names under {fmt.names_key!r}")
    return [n.decode("latin1") if isinstance(n, bytes) else str(n) for n in names]


def _download_cifar(root: Path, fmt: _CifarFormat) -> None:
    """Fetch and unpack the official archive into ``root`` (torchvision's downloader)."""
    from torchvision.datasets.utils import download_and_extract_archive  # only to download

    download_and_extract_archive(
        fmt.url, download_root=str(root), filename=fmt.archive, md5=fmt.archive_md5
    )


def _build_cifar(
    variant: str,
) -> Callable[[Path | None, bool, Transform | None, bool], Dataset[Any]]:
    fmt = _CIFAR_FORMATS[variant]

    def build(
        root: Path | None, train: bool, transform: Transform | None, download: bool
    ) -> Dataset[Any]:
        assert root is not None
        names = fmt.train_files if train else fmt.test_files
        # torchvision's convention: root is the parent of the batches folder (or that folder).
        folder = root if root.name == fmt.base_folder else root / fmt.base_folder
        if download and not any((d / n).is_file() for d in (root, folder) for n in names):
            _download_cifar(folder.parent, fmt)
            root = folder  # read what was fetched, even if root holds other batch files
        images, labels, classes, found = read_cifar_folder(root, train=train, variant=variant)
        return ImageArrayDataset(
            name=variant,
            data=images,
            targets=labels,
            classes=classes,
            train=train,
            transform=transform,
            root=found,
        )

    return build


def read_imagenet16(
    root: str | os.PathLike[str], *, train: bool, num_classes: int = 120
) -> tuple[np.ndarray, list[int], Path]:
    """Read NAS-Bench-201's ImageNet16 pickles: (images [N,16,16,3] uint8, labels, folder).

    ``root`` holds ``train_data_batch_1``..``10`` and ``val_data`` (or is their parent, with
    them in ``ImageNet16/``); any subset of the training batches is accepted. Labels are 1-based
    over 1000 classes; images of classes 1..``num_classes`` are kept, labels shifted to 0-based.
    """
    train_files = tuple(f"train_data_batch_{i}" for i in range(1, 11))
    folder = _find_folder(
        Path(root).expanduser(),
        "ImageNet16",
        marker_files=(*train_files, "val_data"),
        what="ImageNet16",
    )

    def read(path: Path) -> tuple[np.ndarray, list[int]]:
        entry = _load_pickle(path, encoding="latin1", expected="'data' and 'labels'")
        images, labels = _images_and_labels(
            path, entry, label_key="labels", side=16, label_range=(1, 1000)
        )
        keep = np.flatnonzero(np.asarray(labels) <= num_classes)
        return images[keep], [labels[i] - 1 for i in keep]

    names = train_files if train else ("val_data",)
    split = "training" if train else "validation"
    images, labels = _read_batches(folder, names, what=f"ImageNet16 {split}", read=read)
    return images, labels, folder


def _build_imagenet16(
    root: Path | None, train: bool, transform: Transform | None, download: bool
) -> Dataset[Any]:
    assert root is not None
    if download and not root.exists():
        raise ValueError(
            f"ImageNet16-120 cannot be downloaded automatically and {root} does not exist; "
            "expected the NAS-Bench-201 ImageNet16 folder (train_data_batch_1..10, val_data)"
        )
    images, labels, folder = read_imagenet16(root, train=train)
    return ImageArrayDataset(
        name="imagenet16-120",
        data=images,
        targets=labels,
        classes=[str(i) for i in range(120)],
        train=train,
        transform=transform,
        root=folder,
    )


def _class_folders(folder: Path) -> list[str]:
    return sorted(entry.name for entry in os.scandir(folder) if entry.is_dir())


def _build_imagenet(
    root: Path | None, train: bool, transform: Transform | None, download: bool
) -> Dataset[Any]:
    assert root is not None
    split, other = ("train", "val") if train else ("val", "train")
    folder = root / split
    if not folder.is_dir():
        if download:
            raise ValueError(
                f"ImageNet cannot be downloaded automatically and {folder} does not exist; "
                "download it from image-net.org and lay it out as train/<class>/*, val/<class>/*"
            )
        if not root.is_dir():
            raise FileNotFoundError(
                f"ImageNet folder {root} does not exist; expected a folder holding train/ and val/"
            )
        raise FileNotFoundError(
            f"ImageNet {split} folder {folder} does not exist; expected {root} to hold "
            f"train/<class>/* and val/<class>/* (ImageFolder layout)"
        )
    try:
        dataset = ImageFolder(str(folder), transform=transform)
    except FileNotFoundError as error:
        first_line = str(error).splitlines()[0] if str(error) else repr(error)
        raise FileNotFoundError(
            f"{folder}: {first_line}; expected one sub-folder of images per class"
        ) from None
    # A class missing from one split would shift every later label: refuse it.
    if (root / other).is_dir():
        other_classes = _class_folders(root / other)
        if other_classes != dataset.classes:
            only_here = sorted(set(dataset.classes) - set(other_classes))
            only_there = sorted(set(other_classes) - set(dataset.classes))
            raise ValueError(
                f"class folders of {folder} ({len(dataset.classes)}) and {root / other} "
                f"({len(other_classes)}) differ (only in {split}: {only_here[:3]}, only in "
                f"{other}: {only_there[:3]}); expected the same classes in both"
            )
    return dataset


def _shuffled_folder(folder: Path, transform: Transform | None) -> Dataset[Any]:
    """``ImageFolder(folder)`` in a fixed random order (seed 0), with its ``targets`` and
    ``classes``: ImageFolder lists the images class by class, so "the first N images" and the
    index split of the search would otherwise take whole classes."""
    if not folder.is_dir():
        raise FileNotFoundError(
            f"image folder {folder} does not exist; expected a folder of class sub-folders "
            "(<folder>/<class>/<image>)"
        )
    try:
        dataset = ImageFolder(str(folder), transform=transform)
    except FileNotFoundError as error:
        first_line = str(error).splitlines()[0] if str(error) else repr(error)
        raise FileNotFoundError(
            f"{folder}: {first_line}; expected one sub-folder of images per class"
        ) from None
    if len(dataset.classes) < 2:
        raise ValueError(
            f"image folder {folder} has {len(dataset.classes)} class folder(s); expected at "
            "least 2 sub-folders, one per class"
        )
    order = np.random.default_rng(0).permutation(len(dataset)).tolist()
    shuffled = Subset(dataset, order)
    shuffled.targets = [dataset.targets[i] for i in order]  # type: ignore[attr-defined]
    shuffled.classes = dataset.classes  # type: ignore[attr-defined]
    return shuffled


def _build_imagefolder(
    root: Path | None, train: bool, transform: Transform | None, download: bool
) -> Dataset[Any]:
    """``root`` is the training folder for ``train=True`` and the held-out folder otherwise
    (``build_dataset`` passes ``val_root`` there)."""
    assert root is not None
    if download:
        raise ValueError("imagefolder data cannot be downloaded; expected download=false")
    return _shuffled_folder(root, transform)


def _build_cifar10_mini(
    root: Path | None, train: bool, transform: Transform | None, download: bool
) -> Dataset[Any]:
    images, labels, classes = load_cifar10_mini(train=train)
    return ImageArrayDataset(
        name="cifar10-mini",
        data=images,
        targets=labels,
        classes=classes,
        train=train,
        transform=transform,
    )


DATASETS.register("cifar10")(
    DatasetSpec(
        name="cifar10",
        num_classes=10,
        image_size=32,
        mean=CIFAR10_MEAN,
        std=CIFAR10_STD,
        family="cifar",
        build=_build_cifar("cifar10"),
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
        build=_build_cifar10_mini,
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
        build=_build_cifar("cifar100"),
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
        build=_build_imagenet,
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
        build=_build_imagefolder,
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
        build=_build_imagenet16,
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
    ours, theirs = _class_folders(root), _class_folders(val_root)
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
        num_classes = len(_class_folders(folder))
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
