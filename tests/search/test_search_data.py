"""The search's data: ImageNet per-class subsets are drawn with ``data.subset_seed``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from omegaconf import OmegaConf
from PIL import Image

from nas.run.checkpoint import seed_everything
from nas.strategies.data import search_data


def _image_folder(root: Path, classes: int = 2, per_class: int = 40) -> None:
    for c in range(classes):
        folder = root / "train" / f"n{c:08d}"
        folder.mkdir(parents=True)
        for i in range(per_class):
            Image.fromarray(np.full((8, 8, 3), i, dtype=np.uint8)).save(folder / f"{i}.png")


def _subsets(root: Path, *, seed: int, subset_seed: int) -> tuple[list[int], list[int]]:
    data = OmegaConf.create(
        {
            "name": "imagenet",
            "root": str(root),
            "weight_fraction": 0.1,
            "arch_fraction": 0.025,
            "subset_seed": subset_seed,
            "color_jitter": False,
        }
    )
    seed_everything(seed)  # the run seed reseeds the global generators: they must not matter
    weights, arch = search_data(data)
    return list(weights.indices), list(arch.indices)  # type: ignore[attr-defined]


def test_imagenet_subsets_follow_subset_seed_not_the_run_seed(tmp_path):
    _image_folder(tmp_path)
    base = _subsets(tmp_path, seed=0, subset_seed=0)
    assert len(base[0]) == 8 and len(base[1]) == 2  # 10% / 2.5% of 40 images per class
    # two run seeds search on the same images ...
    assert _subsets(tmp_path, seed=1, subset_seed=0) == base
    # ... and another subset seed draws other images
    assert _subsets(tmp_path, seed=0, subset_seed=1) != base
