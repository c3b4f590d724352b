"""Clusters: Hydra's submitit launcher (``pip install "nas-toolkit[slurm]"``). The local
executor runs a real sweep end to end (each run a submitit job in its own process); the SLURM
config is checked by composing it. Skipped, saying so, where the plugin is not installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip(
    "hydra_plugins.hydra_submitit_launcher",
    reason="hydra-submitit-launcher is not installed (pip install hydra-submitit-launcher)",
)


def _sweep(module: str, sweep_dir, *overrides: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", module, "-m", *overrides, "hydra/launcher=submitit_local",
           f"hydra.sweep.dir={sweep_dir}", "hydra.launcher.timeout_min=10"]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)


@pytest.mark.slow
def test_search_sweep_on_the_local_submitit_executor(tmp_path):
    proc = _sweep(
        "nas.cli.search", tmp_path, "seed=0,1", "space=nb201", "space.C=4", "space.layers=1",
        "batch_size=16", "data.max_items=48", "epochs=1", "figures=false",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    for seed in (0, 1):
        record = json.loads((tmp_path / f"seed{seed}" / "genotype.json").read_text())
        assert record["space"] == "nb201"
    # two submitit jobs, each with its own log that shows the run
    logs = sorted(tmp_path.glob(".submitit/*/*_log.out"))
    assert len(logs) == 2
    assert all("nas-search: run folder" in log.read_text() for log in logs)


@pytest.mark.slow
def test_train_sweep_on_the_local_submitit_executor(tmp_path):
    proc = _sweep(
        "nas.cli.train", tmp_path, "seed=0,1", "model.darts.C=4", "model.darts.layers=3",
        "batch_size=32", "data.max_items=64", "eval.max_items=32", "epochs=1",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    for seed in (0, 1):
        results = json.loads((tmp_path / f"seed{seed}" / "results.json").read_text())
        assert results["epochs"] == 1


def test_the_slurm_config_composes_for_both_commands():
    from contextlib import nullcontext

    from hydra import compose, initialize_config_dir

    from nas.cli.search import CONFIG_DIR
    from nas.cli.train import TRAIN_CONFIG_DIR, prepare_argv, shared_configs

    for config_dir, name, extra, store in (
        (CONFIG_DIR, "nas_search", [], nullcontext()),
        # nas-train's shared groups (data, hydra/launcher) come from the ConfigStore
        (TRAIN_CONFIG_DIR, "nas_train", prepare_argv([]), shared_configs([])),
    ):
        with (
            store,
            initialize_config_dir(config_dir=str(config_dir), version_base="1.3"),
        ):
            cfg = compose(
                config_name=name,
                overrides=[*extra, "hydra/launcher=slurm", "hydra.launcher.partition=gpu"],
                return_hydra_config=True,
            )
        launcher = cfg.hydra.launcher
        assert launcher._target_.endswith("SlurmLauncher")
        assert (launcher.partition, launcher.gpus_per_node, launcher.timeout_min) == (
            "gpu",
            1,
            1440,
        )
