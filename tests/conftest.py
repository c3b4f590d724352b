"""Shared fixtures: where the real data of ``../shared/data`` lies, relative to the repo."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = (REPO / ".." / "shared" / "data").resolve()

torch.set_num_threads(2)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"the real data folder {SHARED_DATA} is not here")
    return SHARED_DATA
