"""Helpers of the retraining tests: ``nas-train`` run as a user runs it, on tiny settings."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

# A DARTS_V2 network of 3 cells at C=4 on the first 128 embedded CIFAR-10 images: 4 steps of a
# global batch of 32 per epoch, evaluated on 64 test images.
TINY = [
    "model.darts.C=4",
    "model.darts.layers=3",
    "batch_size=32",
    "data.max_items=128",
    "eval.max_items=64",
    "log_every=1",
]


def _env() -> dict[str, str]:
    # One thread per process: the two cores are shared, and OpenMP threads waiting for a busy
    # core make a step many times slower; torchrun sets the same for its workers.
    return dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")


def _nas_train(run_dir: Path | None, *overrides: str, nproc: int = 0, wait: bool = True):
    """``nas-train TINY overrides`` (``nproc`` > 0: under ``torchrun --nproc_per_node``)."""
    if nproc:
        launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                    f"--nproc_per_node={nproc}", "-m", "nas.cli.train"]  # fmt: skip
    else:
        launcher = [sys.executable, "-m", "nas.cli.train"]
    cmd = [*launcher, *TINY, *overrides]
    if run_dir is not None:
        cmd.append(f"hydra.run.dir={run_dir}")
    if not wait:
        return subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env()
        )
    return subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=600)


@pytest.fixture(scope="session")
def tiny() -> list[str]:
    """The overrides of the tiny setting, for in-process runs (``compose_config``)."""
    return list(TINY)


@pytest.fixture
def one_thread():
    """In-process runs with one thread, for the reason given in ``_env``."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def nas_train():
    """The helper above: ``nas_train(run_dir, *overrides, nproc=0, wait=True)``."""
    return _nas_train


@pytest.fixture(scope="session")
def uninterrupted(tmp_path_factory) -> Path:
    """A finished 2-epoch run with augmentation and drop-path, the reference of resume tests."""
    run_dir = tmp_path_factory.mktemp("train") / "full"
    proc = _nas_train(run_dir, "epochs=2")
    assert proc.returncode == 0, proc.stderr
    return run_dir
