"""configs/data/*.yaml: one per registered dataset, consistent with the code that reads them."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from nas.data import DATASETS, dataset_info

CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "data"
KEYS = {"name", "root", "download", "train_portion", "cutout", "num_workers", "pin_memory"}
# read by no code: the class count and image side of a fixed dataset are the registry's, and the
# loops never keep workers alive between epochs (each epoch's workers are seeded afresh)
DEAD_KEYS = {"num_classes", "persistent_workers"}


def test_one_config_per_dataset():
    assert sorted(p.stem for p in CONFIGS.glob("*.yaml")) == DATASETS.names()


@pytest.mark.parametrize("name", DATASETS.names())
def test_config_matches_the_dataset(name):
    config = yaml.safe_load((CONFIGS / f"{name}.yaml").read_text())
    assert set(config) >= KEYS, KEYS - set(config)
    assert not set(config) & DEAD_KEYS
    assert config["name"] == name
    if name == "imagefolder":  # the user's folder: classes counted, size a setting
        assert config["root"] is None
        assert config["val_root"] is None and config["image_size"] == 32
        return
    assert "image_size" not in config  # the dataset's own (dataset_info), not a setting
    info = dataset_info(name)
    head = (CONFIGS / f"{name}.yaml").read_text()
    side = info["image_size"]
    assert f"# {info['num_classes']} classes, {side}x{side} images" in head
    assert (config["root"] is None) == (name == "cifar10-mini")
    assert 0 < config["train_portion"] < 1 and config["download"] is False
    if name == "imagenet":
        assert (config["weight_fraction"], config["arch_fraction"]) == (0.1, 0.025)
