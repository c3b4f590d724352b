"""Atomic checkpoints of a whole run, and the RNG states that make a resume exact.

Shared by the search and training loops. A checkpoint is written to a temporary file in the
same folder, flushed to disk, then renamed over the old one (``os.replace`` is atomic on
POSIX), so a run killed at any moment leaves either the old or the new checkpoint, never a torn
one. Loading names the file and what was wrong in one line.
"""

from __future__ import annotations

import os
import random
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

CHECKPOINT_VERSION = 1


class CheckpointError(ValueError):
    """A checkpoint that is missing, unreadable, or of another kind of run."""


def atomic_save(obj: Any, path: str | Path) -> None:
    """``torch.save`` to ``path`` through a temporary file and an atomic rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_checkpoint(path: str | Path, *, kind: str) -> dict[str, Any]:
    """Load a checkpoint written by this toolkit for a run of ``kind`` ("search", "train")."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"no checkpoint at {path}; expected a file written by nas-{kind}")
    try:
        # Our checkpoints hold numpy RNG states and plain containers besides tensors.
        state = torch.load(path, map_location="cpu", weights_only=False)
    except (RuntimeError, EOFError, OSError, zipfile.BadZipFile, ValueError, TypeError) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise CheckpointError(
            f"checkpoint {path} is corrupt or truncated ({reason}); expected a file written "
            f"by nas-{kind}"
        ) from None
    if not isinstance(state, dict) or state.get("kind") != kind:
        found = state.get("kind") if isinstance(state, dict) else type(state).__name__
        raise CheckpointError(f"checkpoint {path} is not a nas-{kind} checkpoint (found {found!r})")
    if state.get("version") != CHECKPOINT_VERSION:
        raise CheckpointError(
            f"checkpoint {path} has format version {state.get('version')!r}; this toolkit "
            f"reads version {CHECKPOINT_VERSION}"
        )
    return state


def rng_state() -> dict[str, Any]:
    """Every global RNG state that a step can consume: Python, NumPy, torch (CPU and CUDA)."""
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch from one integer."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
