"""nas: the search, selection, training and benchmark stages of the toolkit.

Pipeline: ``search_spaces`` (what is searched) -> ``nas.supernet`` -> ``nas.strategies`` ->
``nas.selection`` -> genotype -> ``nas.training`` -> ``nas.bench``.

The Python API (``nas.api``), beneath the command lines: ``nas.search(...)`` runs a search as
``nas-search`` does, ``nas.train(...)`` a retraining as ``nas-train`` does, ``nas.load_run(folder)``
reads a run folder. They are plain functions of ``nas.api``; ``import nas`` stays light (no
torch, no Hydra): each is imported when first used.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the real signatures for type checkers; at run time, imported when used
    from nas.api import Run, RunError, Stopped, load_run, search, train

__version__ = "0.2.0"

__all__ = ["Run", "RunError", "Stopped", "load_run", "search", "train"]


def __getattr__(name: str) -> Any:
    """``nas.search``, ``nas.train``, ``nas.load_run`` and the API's classes (``nas.api``)."""
    if name in __all__:
        return getattr(importlib.import_module("nas.api"), name)
    raise AttributeError(f"module 'nas' has no attribute {name!r}")


# 0.2 renamed the packages ``nas.search`` (now ``nas.strategies``) and ``nas.train`` (now
# ``nas.training``), so that ``nas.search`` and ``nas.train`` are the API's plain functions. An
# old import path is refused with its new one (an alias would rebind ``nas.search`` to a module).
_MOVED = {"nas.search": "nas.strategies", "nas.train": "nas.training"}


class _MovedPackages(importlib.abc.MetaPathFinder):
    """Refuses ``import nas.search...`` / ``nas.train...`` naming the new path."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        for old, new in _MOVED.items():
            if fullname == old or fullname.startswith(old + "."):
                moved = new + fullname[len(old) :]
                raise ModuleNotFoundError(
                    f"{fullname} is now {moved} ({old} is the API's function since 0.2)",
                    name=fullname,
                )
        return None


if not any(isinstance(f, _MovedPackages) for f in sys.meta_path):
    sys.meta_path.insert(0, _MovedPackages())
