"""Training augmentation and evaluation preprocessing of every dataset.

Data stage (``nas.data``): the transforms given to ``build_dataset``. torchvision's transforms
wherever they exist, with the recipes of the reference code:

* CIFAR (DARTS ``utils._data_transforms_cifar10``, Liu et al., ICLR 2019): RandomCrop 32 pad 4,
  horizontal flip, normalisation; Cutout (DeVries & Taylor, 2017) for retraining.
* ImageNet (DARTS ``train_imagenet.py``): RandomResizedCrop 224, flip, ColorJitter(0.4, 0.4, 0.4,
  0.2); evaluation Resize 256 + CenterCrop 224.
* ImageNet16-120 (NAS-Bench-201 ``get_datasets``): RandomCrop 16 pad 2, flip.
* ``imagefolder`` (the user's images, any size), chosen by the side ``image_size`` the networks
  see: up to 64 pixels the CIFAR recipe (resize the short side to ``image_size``, centre crop,
  then RandomCrop with ``image_size / 8`` padding and flip; evaluation: resize and centre crop),
  above 64 the ImageNet recipe (RandomResizedCrop ``image_size``, flip, optional ColorJitter;
  evaluation: resize to ``image_size / 0.875`` and centre crop). ImageNet channel statistics.

Random choices draw from torch's generator: seeded per worker by ``make_loader``, and by
``torch.manual_seed`` in the main process when the loader has no workers.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torchvision import transforms as T

from nas.data.datasets import DATASETS, check_image_size


class Cutout:
    """Zero one square of side ``length`` of a [C, H, W] tensor, as the DARTS reference does.

    The centre is uniform over the image and the square is clipped at the borders (so near an
    edge less is cut); applied after normalisation, where zero is the mean colour. An odd
    ``length`` cuts ``length - 1`` pixels a side, as the reference's ``length // 2`` does.
    """

    def __init__(self, *, length: int = 16) -> None:
        if isinstance(length, bool) or not isinstance(length, int) or length < 1:
            raise ValueError(f"cutout length must be a positive int, got {length!r}")
        self.length = length

    def __call__(self, image: Tensor) -> Tensor:
        if not isinstance(image, Tensor) or image.dim() < 2:
            raise ValueError(
                f"Cutout expects a [C, H, W] tensor (after ToTensor), got {type(image).__name__}"
            )
        height, width = image.shape[-2:]
        # One draw for the centre, uniform over the pixels (the reference draws y, x apart).
        y, x = divmod(int(torch.randint(height * width, (1,))), width)
        half = self.length // 2
        out = image.clone()
        out[
            ..., max(0, y - half) : min(height, y + half), max(0, x - half) : min(width, x + half)
        ] = 0
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}(length={self.length})"


def _check_cutout(cutout: int) -> None:
    if isinstance(cutout, bool) or not isinstance(cutout, int) or cutout < 0:
        raise ValueError(f"cutout must be a non-negative int (0 = off), got {cutout!r}")


def _size(spec: Any, image_size: Any) -> int | None:
    """The image folder's side (required there); None for datasets of a fixed size, where a
    different ``image_size`` is refused."""
    if spec.family == "folder":
        return check_image_size(image_size)
    if image_size is not None and image_size != spec.image_size:
        raise ValueError(
            f"{spec.name} images are {spec.image_size}x{spec.image_size}; got "
            f"data.image_size={image_size!r} (only imagefolder data take another size)"
        )
    return None


def train_transform(
    dataset_name: str, *, cutout: int = 0, color_jitter: bool = True, image_size: Any = None
) -> T.Compose:
    """The training augmentation of ``dataset_name``, with Cutout of side ``cutout`` if > 0.

    ``color_jitter`` applies to ImageNet-sized images only: the DARTS retraining recipe uses it,
    the DrNAS and PC-DARTS ImageNet search scripts do not (pass False to reproduce them).
    ``image_size``: the side the networks see, required for ``imagefolder``.
    """
    spec = DATASETS.get(dataset_name)
    _check_cutout(cutout)
    size = _size(spec, image_size)
    steps: list[Any]
    if size is not None and size <= 64:  # a small image folder: the CIFAR recipe at its size
        steps = [
            T.Resize(size),
            T.CenterCrop(size),
            T.RandomCrop(size, padding=max(1, size // 8)),
            T.RandomHorizontalFlip(),
        ]
    elif size is not None:  # a large one: the ImageNet recipe at its size
        steps = [T.RandomResizedCrop(size), T.RandomHorizontalFlip()]
        if color_jitter:
            steps.append(T.ColorJitter(brightness=0.4, contrast=0.4, saturation=0.4, hue=0.2))
    elif spec.family == "cifar":
        steps = [T.RandomCrop(32, padding=4), T.RandomHorizontalFlip()]
    elif spec.family == "imagenet16":
        steps = [T.RandomCrop(16, padding=2), T.RandomHorizontalFlip()]
    else:
        steps = [T.RandomResizedCrop(224), T.RandomHorizontalFlip()]
        if color_jitter:
            steps.append(T.ColorJitter(brightness=0.4, contrast=0.4, saturation=0.4, hue=0.2))
    steps += [T.ToTensor(), T.Normalize(spec.mean, spec.std)]
    if cutout > 0:
        steps.append(Cutout(length=cutout))
    return T.Compose(steps)


def eval_transform(dataset_name: str, *, image_size: Any = None) -> T.Compose:
    """The evaluation preprocessing of ``dataset_name`` (no randomness); ``image_size`` as in
    ``train_transform``."""
    spec = DATASETS.get(dataset_name)
    size = _size(spec, image_size)
    steps: list[Any] = [T.Resize(256), T.CenterCrop(224)] if spec.family == "imagenet" else []
    if size is not None:
        steps = [T.Resize(size if size <= 64 else round(size / 0.875)), T.CenterCrop(size)]
    return T.Compose([*steps, T.ToTensor(), T.Normalize(spec.mean, spec.std)])
