"""The dataset formats: reading CIFAR batches, ImageNet16 pickles and image folders from disk.

Data stage (``nas.data``), below the registry of ``nas.data.datasets``, which names every
dataset and calls one of the builders here (``build_cifar``, ``build_imagenet16``,
``build_imagenet``, ``build_imagefolder``, ``build_cifar10_mini``). What each reads:

* the "python version" folders of CIFAR-10 / CIFAR-100 (Krizhevsky, 2009;
  ``cifar-10-batches-py``, ``cifar-100-python``: ``read_cifar_folder``), read here rather than
  by torchvision, which checks the MD5 of every original batch file and refuses a folder holding
  only some of them;
* NAS-Bench-201's ImageNet16 pickles (``read_imagenet16``; Dong & Yang, ICLR 2020);
* ImageFolder layouts: ImageNet's ``train/`` + ``val/`` and the user's own class folders;
* the embedded ``cifar10-mini`` arrays (``nas.data.embedded``).

Arrays in memory become an ``ImageArrayDataset``. The batch files are Python pickles, as the
formats define them; they are read by an unpickler that builds only what the formats hold
(dicts, lists, numbers, strings and bytes, NumPy arrays) and refuses any other class or
function in one line, so a batch file cannot run code.
"""

from __future__ import annotations

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

Transform = Callable[[Any], Any]
# what a registry entry calls: (root, train, transform, download) -> the dataset
Builder = Callable[[Path | None, bool, Transform | None, bool], Dataset[Any]]

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


# the globals a CIFAR / ImageNet16 batch pickle needs: NumPy's array reconstruction, and
# _codecs.encode, with which protocol-2 pickles of Python 3 rebuild bytes (text -> bytes only)
_ARRAY_GLOBALS = {
    (module, name)
    for module in ("numpy.core.multiarray", "numpy._core.multiarray")
    for name in ("_reconstruct", "scalar")
} | {("numpy", "ndarray"), ("numpy", "dtype"), ("_codecs", "encode")}


class UnsafePickleError(pickle.UnpicklingError):
    """A batch file that names a class or function its format never holds."""


class _ArraysOnly(pickle.Unpickler):
    """Unpickles dicts, lists, numbers, strings, bytes and NumPy arrays; nothing that runs."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ARRAY_GLOBALS:
            return super().find_class(module, name)
        raise UnsafePickleError(
            f"it names {module}.{name}, which a batch file never holds (unpickling it could "
            "run code)"
        )


def _load_pickle(path: Path, *, encoding: str, expected: str) -> dict[str, Any]:
    """Unpickle a batch file into a dict with ``str`` keys (``_ArraysOnly``); one-line
    ValueError if unreadable or if it names anything but arrays and plain values."""
    try:
        with open(path, "rb") as f:
            entry = _ArraysOnly(f, encoding=encoding).load()
    except UnsafePickleError as error:
        raise ValueError(
            f"{path} is refused: {error}; expected a pickled dict with {expected}"
        ) from None
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


def build_cifar(variant: str) -> Builder:
    """The builder of ``cifar10`` or ``cifar100`` (``variant``): the batch files under ``root``,
    fetched first with ``download`` where none is there."""
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


def build_imagenet16(
    root: Path | None, train: bool, transform: Transform | None, download: bool
) -> Dataset[Any]:
    """``imagenet16-120``: the ImageNet16 pickles under ``root`` (never downloaded)."""
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


def class_folders(folder: Path) -> list[str]:
    """The class sub-folders of an ImageFolder layout, sorted (the order of its labels)."""
    return sorted(entry.name for entry in os.scandir(folder) if entry.is_dir())


def build_imagenet(
    root: Path | None, train: bool, transform: Transform | None, download: bool
) -> Dataset[Any]:
    """``imagenet``: ``root/train`` or ``root/val`` as an ImageFolder, the same class folders in
    both (never downloaded)."""
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
        dataset = ImageFolder(str(folder), transform=transform, loader=read_image)
    except FileNotFoundError as error:
        first_line = str(error).splitlines()[0] if str(error) else repr(error)
        raise FileNotFoundError(
            f"{folder}: {first_line}; expected one sub-folder of images per class"
        ) from None
    # A class missing from one split would shift every later label: refuse it.
    if (root / other).is_dir():
        other_classes = class_folders(root / other)
        if other_classes != dataset.classes:
            only_here = sorted(set(dataset.classes) - set(other_classes))
            only_there = sorted(set(other_classes) - set(dataset.classes))
            raise ValueError(
                f"class folders of {folder} ({len(dataset.classes)}) and {root / other} "
                f"({len(other_classes)}) differ (only in {split}: {only_here[:3]}, only in "
                f"{other}: {only_there[:3]}); expected the same classes in both"
            )
    return dataset


def read_image(path: str) -> Any:
    """An image file as RGB (torchvision's ``pil_loader``); a file PIL cannot read is bad
    input, one line naming it (``ValueError``), not a worker traceback."""
    from PIL import Image

    try:
        with open(path, "rb") as f:
            return Image.open(f).convert("RGB")
    except (OSError, SyntaxError, ValueError) as e:  # PIL.UnidentifiedImageError is an OSError
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ValueError(
            f"{path} is not an image PIL can read ({reason[:80]}); expected only images in "
            "the class folders (remove or move the file)"
        ) from None


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
        dataset = ImageFolder(str(folder), transform=transform, loader=read_image)
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


def build_imagefolder(
    root: Path | None, train: bool, transform: Transform | None, download: bool
) -> Dataset[Any]:
    """``root`` is the training folder for ``train=True`` and the held-out folder otherwise
    (``build_dataset`` passes ``val_root`` there)."""
    assert root is not None
    if download:
        raise ValueError("imagefolder data cannot be downloaded; expected download=false")
    return _shuffled_folder(root, transform)


def build_cifar10_mini(
    root: Path | None, train: bool, transform: Transform | None, download: bool
) -> Dataset[Any]:
    """``cifar10-mini``: the images embedded in the package (no ``root``)."""
    images, labels, classes = load_cifar10_mini(train=train)
    return ImageArrayDataset(
        name="cifar10-mini",
        data=images,
        targets=labels,
        classes=classes,
        train=train,
        transform=transform,
    )
