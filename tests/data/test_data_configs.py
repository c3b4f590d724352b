"""configs/data/*.yaml: one per registered dataset, consistent with the code that reads them."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from nas.data import DATASETS, dataset_info

CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "data"
KEYS = {"name", "root", "download", "num_classes", "image_size", "train_portion", "cutout"}
KEYS |= {"num_workers", "pin_memory", "persistent_workers"}


def test_one_config_per_dataset():
    assert sorted(p.stem for p in CONFIGS.glob("*.yaml")) == DATASETS.names()


@pytest.mark.parametrize("name", DATASETS.names())
def test_config_matches_the_dataset(name):
    config = yaml.safe_load((CONFIGS / f"{name}.yaml").read_text())
    assert set(config) >= KEYS, KEYS - set(config)
    assert config["name"] == name
    if name == "imagefolder":  # the user's folder: classes counted, size a setting
        assert config["num_classes"] is None and config["root"] is None
        assert config["val_root"] is None and config["image_size"] == 32
        return
    info = dataset_info(name)
    assert (config["num_classes"], config["image_size"]) == (
        info["num_classes"],
        info["image_size"],
    )
    assert (config["root"] is None) == (name == "cifar10-mini")
    assert 0 < config["train_portion"] < 1 and config["download"] is False
    if name == "imagenet":
        assert (config["weight_fraction"], config["arch_fraction"]) == (0.1, 0.025)
