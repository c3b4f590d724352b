"""Shared fixtures: where the real data of ``../shared/data`` lies, relative to the repo."""

from __future__ import annotations

import os
from pathlib import Path

# The tests run tiny networks, where a second intra-op thread costs more in synchronisation
# than it saves (10x on a busy 2-core machine); subprocesses (the CLI tests) inherit this.
os.environ["OMP_NUM_THREADS"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = (REPO / ".." / "shared" / "data").resolve()

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"the real data folder {SHARED_DATA} is not here")
    return SHARED_DATA
