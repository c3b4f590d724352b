"""Fixtures of the NAS-Bench-201 lookup tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from official_file import write_tiny_official


@pytest.fixture(scope="session")
def tiny_official(tmp_path_factory) -> Path:
    """A tiny official-format ``.pth`` (see ``official_file.py``)."""
    return write_tiny_official(tmp_path_factory.mktemp("nb201") / "NAS-Bench-201-tiny.pth")
