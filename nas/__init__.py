"""nas: the search, selection, training and benchmark stages of the toolkit.

Pipeline: ``search_spaces`` (what is searched) -> ``nas.supernet`` -> ``nas.search`` ->
``nas.selection`` -> genotype -> ``nas.train`` -> ``nas.bench``.

The Python API (``nas.api``): ``nas.search(...)`` runs a search as ``nas-search`` does,
``nas.train(...)`` a retraining as ``nas-train`` does, ``nas.load_run(folder)`` reads a run
folder. ``import nas`` stays light: each is imported when first used.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

__all__ = ["load_run", "search", "train"]


def __getattr__(name: str) -> Any:
    """``nas.search`` / ``nas.train`` (packages that are callable), ``nas.load_run``."""
    if name in ("search", "train"):
        return importlib.import_module(f"nas.{name}")
    if name in ("load_run", "Run", "RunError", "Stopped"):
        return getattr(importlib.import_module("nas.api"), name)
    raise AttributeError(f"module 'nas' has no attribute {name!r}")
