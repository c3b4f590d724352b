"""Training augmentation and evaluation preprocessing of every dataset.

Data stage (``nas.data``): the transforms given to ``build_dataset``. torchvision's transforms
wherever they exist, with the recipes of the reference code:

* CIFAR (DARTS ``utils._data_transforms_cifar10``, Liu et al., ICLR 2019): RandomCrop 32 pad 4,
  horizontal flip, normalisation; Cutout (DeVries & Taylor, 2017) for retraining.
* ImageNet (DARTS ``train_imagenet.py``): RandomResizedCrop 224, flip, ColorJitter(0.4, 0.4, 0.4,
  0.2); evaluation Resize 256 + CenterCrop 224.
* ImageNet16-120 (NAS-Bench-201 ``get_datasets``): RandomCrop 16 pad 2, flip.

Random choices draw from torch's generator: seeded per worker by ``make_loader``, and by
``torch.manual_seed`` in the main process when the loader has no workers.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torchvision import transforms as T

from nas.data.datasets import DATASETS


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


def train_transform(dataset_name: str, *, cutout: int = 0, color_jitter: bool = True) -> T.Compose:
    """The training augmentation of ``dataset_name``, with Cutout of side ``cutout`` if > 0.

    ``color_jitter`` applies to ImageNet only: the DARTS retraining recipe uses it, the DrNAS
    and PC-DARTS ImageNet search scripts do not (pass False to reproduce them).
    """
    spec = DATASETS.get(dataset_name)
    _check_cutout(cutout)
    steps: list[Any]
    if spec.family == "cifar":
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


def eval_transform(dataset_name: str) -> T.Compose:
    """The evaluation preprocessing of ``dataset_name`` (no randomness)."""
    spec = DATASETS.get(dataset_name)
    steps: list[Any] = [T.Resize(256), T.CenterCrop(224)] if spec.family == "imagenet" else []
    return T.Compose([*steps, T.ToTensor(), T.Normalize(spec.mean, spec.std)])
